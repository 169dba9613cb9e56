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
from compatshim.shim import loops, notes
from compatshim.shim.notes import TapsInside, call, holds, spec_name, stage_of, transform_name

__all__ = ['BatchHook', 'MicrobatchHook', 'kind', 'reshaped_error']

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
        spec, transform, native = self.spec, self.transform, self.native
        if native is not None and holds(native):  # Composer's own identity needs no call
            batch = call(spec, 'batch_transforms', native, batch)
        frame = loops.current_frame()
        if not holds(transform) or frame is None:  # removed (``None``, ``del``), or called by hand outside a loop
            return batch
        assert transform is not None
        if stage_of(spec) == 'batch':
            frame.reshaped = None
            moved = frame.device.batch_to_device(batch)
            out = call(spec, 'device_transforms', transform, moved)
            if type(out) is not type(moved) or (isinstance(out, (list, tuple)) and len(out) != len(moved)):
                frame.reshaped = (transform_name(transform), kind(moved), kind(out), spec_name(spec))
            return out
        if native is not None:
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
        return call(spec, 'microbatch_transforms', self.native, microbatch) if holds(self.native) else microbatch

    def __repr__(self) -> str:
        return f'MicrobatchHook({spec_name(self.spec)}, transform={self.transform!r}, native={self.native!r})'


#: What Composer's readers of a batch raise where they cannot take its structure.
_READ_ERRORS = (ValueError, TypeError, NotImplementedError, AttributeError, IndexError, KeyError)
#: Composer's own readers of a batch (functions of ``composer.core.data_spec``), by the DataSpec attribute they serve.
_READERS = (
    ('split', 'split_batch'),
    ('num_samples', 'get_num_samples_in_batch'),
    ('tokens', 'get_num_tokens_in_batch'),
)


def _reader(exc: BaseException) -> Optional[str]:
    """What the trainer called that raised ``exc`` (``None``: compatshim's own code, or not the trainer's call)."""
    called, tb = None, exc.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get('__name__', '')
        if module == notes.TRAINER_MODULE:
            called = None
        elif called is None:
            code = tb.tb_frame.f_code
            called = '' if module.startswith('compatshim.') else getattr(code, 'co_qualname', code.co_name)
            if module == 'composer.core.data_spec':
                called = next((name for part, name in _READERS if part in code.co_name), called)
        tb = tb.tb_next
    return called or None


def reshaped_error(frame: loops.LoopFrame, exc: BaseException) -> Optional[TransformResultError]:
    """The one-line error for ``exc``, raised by what read a batch whose structure a transform changed at stage batch
    (``split_batch``, ``get_num_samples_in_batch``, ...), naming it, the transform and both structures; ``None`` for
    any other exception (the transform's own propagate untouched)."""
    reader = _reader(exc) if frame.reshaped is not None and isinstance(exc, _READ_ERRORS) else None
    if reader is None or isinstance(exc, TransformResultError):
        return None
    transform, before, after, spec = frame.reshaped  # type: ignore[misc]
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return TransformResultError(
        f'compatshim: {reader} cannot take what device_transforms {transform!r} of {spec} returned: a {after} for '
        f'a batch that was a {before} ({type(exc).__name__}: {first}). Return a structure it takes, or give the '
        f'DataSpec a {reader} of your own.'
    )
