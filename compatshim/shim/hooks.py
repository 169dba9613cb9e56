"""What Composer's trainer gets, with the shim on, when it reads a DataSpec's transform hook through the loop's view
(:func:`compatshim.shim.data_spec.view_of`): a small callable bound to that DataSpec and that loop's frame that runs
the user's ``device_transforms`` on the device, at the DataSpec's stage. The hooks hold no copy of the transform:
they are made at the trainer's read, from what ``spec.device_transforms`` resolves to then (an instance attribute, a
subclass's method, a property), as 0.24.1's trainer read it at every batch; what they decide from it (whether
Composer's own value runs at all) is decided then, once. Every transform they run is called through the DataSpec's
taps (:func:`compatshim.shim.notes.call`).
"""

from __future__ import annotations

import types
from typing import Any, Callable, Optional

from compatshim.config.support import Family
from compatshim.shim.loops import LoopFrame
from compatshim.shim.notes import TapsInside, call, holds, spec_name
from compatshim.shim.registry import STATE

__all__ = ['BatchHook', 'MicrobatchHook', 'device_transforms_of']

Batch = Any
Transform = Callable[[Batch], Batch]
_METHOD = types.MethodType


def device_transforms_of(spec: Any) -> Optional[Transform]:
    """``spec.device_transforms`` as the DataSpec serves it (a subclass's own lookup included), read once where the
    transform runs (as 0.24.1's trainer read it once per batch); ``None`` where it has none. On 0.27+ this name is no
    hook, so the read is the user's own."""
    try:
        return getattr(spec, 'device_transforms')  # type: ignore[no-any-return]  # noqa: B009
    except AttributeError:
        return None


def _length(batch: Batch) -> Optional[int]:
    return len(batch) if isinstance(batch, (list, tuple)) else None


class BatchHook(TapsInside):
    """The batch-level hook: ``native`` (0.27+ ``batch_transforms``), then, at stage ``batch``, move + the transform.

    At stage batch it does what 0.24.1's trainer did, with a transform or without: the whole batch is moved,
    ``state.batch`` becomes the moved batch, the transform runs on it, and the moves of ``state.batch`` later in this
    step (Composer's per-microbatch move) leave what it returned as it is.

    Args:
        spec: The DataSpec whose hook the trainer read.
        frame: The loop that read it.
        native: What Composer would have called here (``None`` on 0.25–0.26, which have no such transform).
        transform: ``spec.device_transforms`` as the trainer's read resolved it (0.25–0.26); 0.27+ read it at the call.
        stage: The DataSpec's stage at the trainer's read (:func:`compatshim.shim.notes.stage_of`).
    """

    __slots__ = ('frame', 'host', 'native', 'spec', 'stage', 'transform')

    def __init__(
        self, spec: Any, frame: LoopFrame, native: Optional[Transform], transform: Optional[Transform], stage: str
    ) -> None:
        self.spec, self.frame, self.stage = spec, frame, stage
        self.native = native if native is not None and holds(native) else None  # Composer's own identity: no call
        self.transform = transform if holds(transform) else None
        self.host = STATE.family is Family.HOST

    def __call__(self, batch: Batch) -> Batch:
        spec, native, frame = self.spec, self.native, self.frame
        state = frame.state
        if frame.closed or (state is not None and batch is not state.batch):  # after its loop; or not the loop's
            return self.plain(batch)  # call (user code holding the trainer's binding): the transforms, as they are
        frame.passed, frame.reshaped = False, None  # a new step
        if native is not None:
            batch = call(spec, 'batch_transforms', native, batch)
        if self.host and frame.mode == 'predict':  # 0.25–0.26 predict moved the whole batch first, as 0.24.1 did
            transform = self.transform
            return batch if transform is None else call(spec, 'device_transforms', transform, batch)
        if self.stage == 'batch':
            if self.host:
                transform = self.transform
            else:
                try:
                    transform = spec.device_transforms
                except AttributeError:
                    transform = None
                if type(transform) is _METHOD and not holds(transform):
                    transform = None
            moved = frame.device.batch_to_device(batch)
            if frame.state is not None:
                frame.state.batch = moved  # 0.24.1 assigned the moved batch before calling the transform
            out = moved if transform is None else call(spec, 'device_transforms', transform, moved)
            frame.passed = True
            if frame._interposer is None:
                frame.interpose()
            if type(out) is not type(moved) or (isinstance(out, (list, tuple)) and len(out) != len(moved)):
                frame.reshaped = (transform, spec, type(moved), _length(moved), type(out), _length(out))
            return out
        transform = self.transform
        if not self.host or transform is None:
            return batch  # 0.27+: the microbatch hook runs it after each move
        frame.armed, frame.armed_by, frame.microbatches, frame.split_ids = transform, spec, (), frozenset()
        if frame._interposer is None:
            frame.interpose()
        return batch

    def plain(self, batch: Batch) -> Batch:
        """What the hook's transforms do to ``batch`` where it moves nothing: Composer's own, then the user's."""
        if self.native is not None:
            batch = call(self.spec, 'batch_transforms', self.native, batch)
        transform = self.transform if self.host else device_transforms_of(self.spec)
        return batch if not holds(transform) else call(self.spec, 'device_transforms', transform, batch)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f'BatchHook({spec_name(self.spec)}, transform={self.transform!r}, native={self.native!r})'


class MicrobatchHook(TapsInside):
    """The microbatch-level hook (0.27+): at stage ``microbatch``, ``spec.device_transforms`` (read then) and
    ``native``.

    Args:
        spec: The DataSpec whose hook the trainer read.
        frame: The loop that read it.
        native: The DataSpec's own ``microbatch_transforms`` (``None``: none).
        stage: The DataSpec's stage at the trainer's read.
    """

    __slots__ = ('frame', 'native', 'spec', 'stage')

    def __init__(self, spec: Any, frame: LoopFrame, native: Optional[Transform], stage: str) -> None:
        self.spec, self.frame, self.stage = spec, frame, stage
        self.native = native if native is not None and holds(native) else None

    def __call__(self, microbatch: Batch) -> Batch:
        spec = self.spec
        if self.stage == 'microbatch' and not self.frame.closed:
            transform = device_transforms_of(spec)
            if holds(transform):
                microbatch = call(spec, 'device_transforms', transform, microbatch)  # type: ignore[arg-type]
        native = self.native
        return microbatch if native is None else call(spec, 'microbatch_transforms', native, microbatch)

    def __repr__(self) -> str:
        return f'MicrobatchHook({spec_name(self.spec)}, native={self.native!r})'
