"""Which Composer loop is running on this thread, on which device, and what the shim did in its current step.

The trainer calls a ``DataSpec``'s batch-level transform with the batch alone; to move that batch the shim needs the
trainer's own ``Device`` and ``State``. The loop patches (:mod:`compatshim.shim.trainer`) push a frame for each train,
eval or predict loop (eval inside ``fit`` nests), and the hooks read the innermost one. While a frame needs it, the
trainer's device's ``batch_to_device`` is interposed (on that ``Device`` instance only): after the shim moved a step's
batch at stage batch, the loop's later moves in that step leave the batch as the transform returned it (0.24.1 split
the moved batch and never moved it again); on 0.25–0.26 at stage microbatch, each move is followed by the transform.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any, Callable, Optional

from compatshim.shim import patching
from compatshim.shim.notes import by_trainer, kind, spec_name, transform_name
from compatshim.shim.registry import STATE

__all__ = ['LoopFrame', 'current_frame', 'loop_frame']

Batch = Any

_local = threading.local()


@dataclasses.dataclass(eq=False)
class LoopFrame:
    """One running loop: the trainer's device and state, the mode, and what the shim did in the current step."""

    device: Any
    mode: str  # 'train' | 'eval' | 'predict'
    state: Any = None
    #: 0.25–0.26, stage microbatch: the transform run after each move by this frame's device.
    armed: Optional[Callable[[Batch], Batch]] = None
    #: Stage batch: the shim moved this step's batch; the loop's later moves in the step leave it as it is.
    passed: bool = False
    #: Stage batch: the transform that changed its batch's structure in this step, both structures and its DataSpec,
    #: noted on an error of Composer's readers of the batch in this step.
    reshaped: Optional[tuple[str, str, str, str]] = None
    #: The interposer this frame uses on its device (shared by every frame of that device, on any thread).
    _interposer: Optional[_Interposer] = None

    def new_step(self) -> None:
        """A new batch reached the shim's hook: what the last step's did no longer applies."""
        self.passed = False
        self.reshaped = None

    def moved(self, transform: Any, spec: Any, moved: Batch, out: Batch) -> None:
        """Stage batch: the shim moved this step's batch and ran ``transform`` on it, which returned ``out``."""
        self.passed = True
        self._interpose()
        if type(out) is not type(moved) or (isinstance(out, (list, tuple)) and len(out) != len(moved)):
            self.reshaped = (transform_name(transform), kind(moved), kind(out), spec_name(spec))

    def arm(self, transform: Callable[[Batch], Batch]) -> None:
        """Run ``transform`` after every move this frame's device makes until the frame closes."""
        self.armed = transform
        self._interpose()

    def _interpose(self) -> None:
        if self._interposer is not None:
            return
        with STATE.lock:
            interposer = vars(self.device).get('batch_to_device')
            if not isinstance(interposer, _Interposer):
                device = self.device
                swapped = patching.swap(device, 'batch_to_device', lambda move: _Interposer(device, move))
                interposer = swapped.replacement
                interposer.swapped = swapped
            interposer.users += 1
            self._interposer = interposer

    def close(self) -> None:
        """The loop ended: its device's interposer goes once no frame (of any thread) uses it."""
        interposer, self._interposer = self._interposer, None
        if interposer is not None:
            with STATE.lock:
                interposer.users -= 1
                if interposer.users == 0 and interposer.swapped is not None:
                    interposer.swapped.undo()


class _Interposer:
    """Stands in for ``device.batch_to_device`` while frames need it. In the innermost frame of this device, the
    trainer's own moves: after the shim's move of the step, the batch as it is; armed, the move, then the transform.
    Every other move (a callback's, the transform's own, another loop's) is the move alone."""

    def __init__(self, device: Any, move: Callable[[Batch], Batch]) -> None:
        self.device = device
        self.move = move
        self.users = 0
        self.swapped: Optional[patching.Swap] = None

    def __call__(self, batch: Batch) -> Batch:
        frame = current_frame()
        if frame is None or frame.device is not self.device:
            return self.move(batch)
        if frame.passed and by_trainer():
            return batch
        moved = self.move(batch)
        return moved if frame.armed is None or not by_trainer() else frame.armed(moved)


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
def loop_frame(device: Any, mode: str, state: Any = None) -> Iterator[LoopFrame]:
    """Open a frame for one trainer loop; it closes (and restores its device) however the loop ends."""
    frame = LoopFrame(device, mode, state)
    stack = _stack()
    stack.append(frame)
    try:
        yield frame
    finally:
        stack.remove(frame)
        frame.close()
