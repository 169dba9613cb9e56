"""Which Composer loop is running on this thread, and on which device.

The trainer calls a ``DataSpec``'s batch-level transform with the batch alone; to move that batch the shim needs the
trainer's own ``Device``. The loop patches (``patches/trainer.py``) push a frame for each train, eval or predict loop
(eval inside ``fit`` nests), and the transforms read the innermost one. On 0.25–0.26, which have no per-microbatch
hook, stage ``microbatch`` *arms* the frame: each move by that trainer's device is followed by the transform.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any, Callable, Optional

from compatshim.shim import patching

__all__ = ['LoopFrame', 'current_frame', 'loop_frame']

Batch = Any

_local = threading.local()


@dataclasses.dataclass(eq=False)
class LoopFrame:
    """One running loop: the trainer's device, the mode, and (0.25–0.26, stage microbatch) the armed transform."""

    device: Any
    mode: str  # 'train' | 'eval' | 'predict'
    armed: Optional[Callable[[Batch], Batch]] = None
    #: Stage batch: the transform that last changed its batch's structure, both structures and its DataSpec, named
    #: where Composer cannot split or count the result.
    reshaped: Optional[tuple[str, str, str, str]] = None
    #: The device's ``batch_to_device`` replaced by this frame's interposer, while armed.
    _interposed: Optional[patching.Swap] = None

    def arm(self, transform: Callable[[Batch], Batch]) -> None:
        """Run ``transform`` after every move this frame's device makes until the frame closes."""
        self.armed = transform
        if not isinstance(vars(self.device).get('batch_to_device'), _MoveThenTransform):
            self._interposed = patching.swap(
                self.device, 'batch_to_device', lambda move: _MoveThenTransform(self.device, move)
            )

    def close(self) -> None:
        if self._interposed is not None:
            self._interposed.undo()
            self._interposed = None


class _MoveThenTransform:
    """Stands in for ``device.batch_to_device`` while a frame is armed: move, then the innermost armed transform."""

    def __init__(self, device: Any, move: Callable[[Batch], Batch]) -> None:
        self.device = device
        self.move = move

    def __call__(self, batch: Batch) -> Batch:
        moved = self.move(batch)
        frame = current_frame()
        if frame is not None and frame.device is self.device and frame.armed is not None:
            return frame.armed(moved)
        return moved


def _stack() -> list[LoopFrame]:
    stack = getattr(_local, 'stack', None)
    if stack is None:
        stack = _local.stack = []
    return stack


def current_frame() -> Optional[LoopFrame]:
    """The innermost running loop on this thread, or ``None`` outside any trainer loop."""
    stack = _stack()
    return stack[-1] if stack else None


@contextlib.contextmanager
def loop_frame(device: Any, mode: str) -> Iterator[LoopFrame]:
    """Open a frame for one trainer loop; it closes (and un-arms its device) however the loop ends."""
    frame = LoopFrame(device, mode)
    stack = _stack()
    stack.append(frame)
    try:
        yield frame
    finally:
        stack.remove(frame)
        frame.close()
