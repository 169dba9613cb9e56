"""What Composer's trainer gets, with the shim on, when it reads a DataSpec's transform hook: a small callable bound
to that DataSpec that runs the user's ``device_transforms`` on the device, at the DataSpec's stage.

The hooks hold no copy of the transform: they are made at the trainer's read (once per batch, or per microbatch),
from what ``spec.device_transforms`` resolves to then — an instance attribute, a subclass's method, a property —
exactly as 0.24.1's trainer read it at every batch. :class:`BatchHook` stands for the batch-level hook
(``device_transforms`` on 0.25–0.26, ``batch_transforms`` on 0.27+), :class:`MicrobatchHook` for the microbatch-level
one (``microbatch_transforms``, 0.27+); :class:`Split` for ``split_batch`` after a transform that changed the batch's
structure. Every transform they run is called through the DataSpec's taps (:func:`compatshim.shim.notes.call`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Optional

from compatshim.errors import TransformResultError
from compatshim.shim import loops
from compatshim.shim.notes import TapsInside, call, holds, spec_name, stage_of

__all__ = ['BatchHook', 'MicrobatchHook', 'Reshaped', 'kind']

Batch = Any
Transform = Callable[[Batch], Batch]


def kind(batch: Batch) -> str:
    """A batch's structure in words: ``tensor``, ``tuple of 2``, ``dict``, ``Record``."""
    if hasattr(batch, 'shape') and hasattr(batch, 'dtype'):
        return 'tensor'
    if isinstance(batch, (list, tuple)):
        return f'{type(batch).__name__} of {len(batch)}'
    if isinstance(batch, Mapping):
        return type(batch).__name__
    return 'None' if batch is None else type(batch).__name__


def _name(transform: Transform) -> str:
    return getattr(transform, '__qualname__', None) or type(transform).__name__


class BatchHook(TapsInside):
    """The batch-level hook: ``native`` (0.27+ ``batch_transforms``), then, at stage ``batch``, move + ``transform``.

    Args:
        spec: The DataSpec whose hook the trainer read.
        native: What Composer would have called here (``None`` on 0.25–0.26, which have no such transform).
        transform: ``spec.device_transforms`` as it resolved at the read (``None``: none).
    """

    __slots__ = ('native', 'spec', 'transform')

    def __init__(self, spec: Any, native: Optional[Transform], transform: Optional[Transform]) -> None:
        self.spec, self.native, self.transform = spec, native, transform

    def __call__(self, batch: Batch) -> Batch:
        spec, transform = self.spec, self.transform
        if self.native is not None:
            batch = call(spec, 'batch_transforms', self.native, batch)
        frame = loops.current_frame()
        if not holds(transform) or frame is None:  # removed (``None``, ``del``), or called by hand outside a loop
            return batch
        assert transform is not None
        if stage_of(spec) == 'batch':
            moved = frame.device.batch_to_device(batch)
            out = call(spec, 'device_transforms', transform, moved)
            frame.reshaped = None if kind(out) == kind(moved) else (_name(transform), kind(moved), kind(out))
            return out
        if self.native is not None:
            return batch  # 0.27+: the microbatch hook runs it after each move
        if frame.mode == 'predict':
            return call(spec, 'device_transforms', transform, batch)  # 0.25–0.26 predict moves the whole batch first
        frame.arm(lambda microbatch: call(spec, 'device_transforms', transform, microbatch))
        return batch

    def __repr__(self) -> str:
        return f'BatchHook({spec_name(self.spec)}, transform={self.transform!r}, native={self.native!r})'


class MicrobatchHook(TapsInside):
    """The microbatch-level hook (0.27+): at stage ``microbatch``, ``transform`` then ``native``.

    Args:
        spec: The DataSpec whose hook the trainer read.
        native: The DataSpec's own ``microbatch_transforms``.
        transform: ``spec.device_transforms`` as it resolved at the read (``None``: none).
    """

    __slots__ = ('native', 'spec', 'transform')

    def __init__(self, spec: Any, native: Transform, transform: Optional[Transform]) -> None:
        self.spec, self.native, self.transform = spec, native, transform

    def __call__(self, microbatch: Batch) -> Batch:
        spec, transform = self.spec, self.transform
        if holds(transform) and stage_of(spec) == 'microbatch' and loops.current_frame() is not None:
            assert transform is not None
            microbatch = call(spec, 'device_transforms', transform, microbatch)
        return call(spec, 'microbatch_transforms', self.native, microbatch)

    def __repr__(self) -> str:
        return f'MicrobatchHook({spec_name(self.spec)}, transform={self.transform!r}, native={self.native!r})'


class Reshaped:
    """One of Composer's batch readers (``split_batch``, ``get_num_samples_in_batch``, ``get_num_tokens_in_batch``)
    after a transform that changed the batch's structure: where it cannot take what the transform returned, one line
    says so, naming the reader, the transform and both structures (what 0.24.1 could not run either)."""

    __slots__ = ('name', 'reader', 'reshaped', 'spec')

    def __init__(self, spec: Any, name: str, reader: Callable[..., Any], reshaped: tuple[str, str, str]) -> None:
        self.spec, self.name, self.reader, self.reshaped = spec, name, reader, reshaped

    def __call__(self, batch: Batch, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.reader(batch, *args, **kwargs)
        except (ValueError, TypeError, NotImplementedError, AttributeError, IndexError, KeyError) as exc:
            transform, before, after = self.reshaped
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TransformResultError(
                f"compatshim: the DataSpec's {self.name} cannot take what device_transforms {transform!r} of "
                f'{spec_name(self.spec)} returned: a {after} for a batch that was a {before} ({first}). Return a '
                f'structure it takes, or give the DataSpec a {self.name} of your own.'
            ) from exc
