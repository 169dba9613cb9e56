"""What Composer's trainer gets, with the shim on, when it reads a DataSpec's transform hook: a small callable bound
to that DataSpec that runs the user's ``device_transforms`` on the device, at the DataSpec's stage. The hooks hold no
copy of the transform: they are made at the trainer's read, from what ``spec.device_transforms`` resolves to then (an
instance attribute, a subclass's method, a property), as 0.24.1's trainer read it at every batch. Every transform
they run is called through the DataSpec's taps (:func:`compatshim.shim.notes.call`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from compatshim.config.support import Family
from compatshim.shim import loops
from compatshim.shim.notes import TapsInside, call, holds, spec_name
from compatshim.shim.registry import STATE

__all__ = ['BatchHook', 'MicrobatchHook', 'device_transforms_of']

Batch = Any
Transform = Callable[[Batch], Batch]


def device_transforms_of(spec: Any) -> Optional[Transform]:
    """``spec.device_transforms`` as the DataSpec serves it (a subclass's own lookup included), read once where the
    transform runs (as 0.24.1's trainer read it once per batch); ``None`` where it has none. On 0.27+ this name is no
    hook, so the read is the user's own."""
    try:
        return getattr(spec, 'device_transforms')  # type: ignore[no-any-return]  # noqa: B009
    except AttributeError:
        return None


class BatchHook(TapsInside):
    """The batch-level hook: ``native`` (0.27+ ``batch_transforms``), then, at stage ``batch``, move + the transform.

    At stage batch it does what 0.24.1's trainer did, with a transform or without: the whole batch is moved,
    ``state.batch`` becomes the moved batch, the transform runs on it, and the trainer's later moves in this step
    (Composer's per-microbatch move) leave what it returned as it is.

    Args:
        spec: The DataSpec whose hook the trainer read.
        native: What Composer would have called here (``None`` on 0.25–0.26, which have no such transform).
        transform: ``spec.device_transforms`` as the trainer's read resolved it (0.25–0.26); 0.27+ read it at the call.
        stage: The DataSpec's stage at the trainer's read (:func:`compatshim.shim.notes.stage_of`).
    """

    __slots__ = ('native', 'spec', 'stage', 'transform')

    def __init__(self, spec: Any, native: Optional[Transform], transform: Optional[Transform], stage: str) -> None:
        self.spec, self.native, self.transform, self.stage = spec, native, transform, stage

    def __call__(self, batch: Batch) -> Batch:
        spec, native = self.spec, self.native
        frame = loops.current_frame()
        if frame is not None:
            frame.new_step()
        if native is not None and holds(native):  # Composer's own identity needs no call
            batch = call(spec, 'batch_transforms', native, batch)
        if frame is None:  # called by hand outside a loop
            return batch
        host = STATE.family is Family.HOST
        if host and frame.mode == 'predict':  # 0.25–0.26 predict moved the whole batch first, once, as 0.24.1 did
            transform = self.transform
            return call(spec, 'device_transforms', transform, batch) if holds(transform) else batch  # type: ignore[arg-type]
        if self.stage == 'batch':
            transform = self.transform if host else device_transforms_of(spec)
            moved = frame.device.batch_to_device(batch)
            if frame.state is not None:
                frame.state.batch = moved  # 0.24.1 assigned the moved batch before calling the transform
            out = call(spec, 'device_transforms', transform, moved) if holds(transform) else moved  # type: ignore[arg-type]
            frame.moved(transform, spec, moved, out)
            return out
        transform = self.transform
        if not host or not holds(transform):
            return batch  # 0.27+: the microbatch hook runs it after each move
        assert transform is not None
        frame.arm(spec, transform)
        return batch

    def __repr__(self) -> str:
        return f'BatchHook({spec_name(self.spec)}, transform={self.transform!r}, native={self.native!r})'


class MicrobatchHook(TapsInside):
    """The microbatch-level hook (0.27+): at stage ``microbatch``, ``spec.device_transforms`` (read then) and
    ``native``.

    Args:
        spec: The DataSpec whose hook the trainer read.
        native: The DataSpec's own ``microbatch_transforms`` (``None``: none).
        stage: The DataSpec's stage at the trainer's read.
    """

    __slots__ = ('native', 'spec', 'stage')

    def __init__(self, spec: Any, native: Optional[Transform], stage: str) -> None:
        self.spec, self.native, self.stage = spec, native, stage

    def __call__(self, microbatch: Batch) -> Batch:
        spec = self.spec
        if self.stage == 'microbatch' and loops.current_frame() is not None:
            transform = device_transforms_of(spec)
            if holds(transform):
                microbatch = call(spec, 'device_transforms', transform, microbatch)  # type: ignore[arg-type]
        native = self.native
        return (
            call(spec, 'microbatch_transforms', native, microbatch)
            if native is not None and holds(native)
            else microbatch
        )

    def __repr__(self) -> str:
        return f'MicrobatchHook({spec_name(self.spec)}, native={self.native!r})'
