"""Patch for ``composer.trainer.trainer.Trainer``: its train, eval and predict loops each open a loop frame
(:mod:`compatshim.shim.loops`) naming the trainer's device and state; where Composer's readers of a batch cannot take
what a transform returned in another structure, their error propagates as raised, with a note
(:func:`compatshim.shim.hooks.note_reshaped`)."""

from __future__ import annotations

import functools
from typing import Any, Callable

from compatshim.shim import hooks, patching
from compatshim.shim import loops as _loop_frames
from compatshim.shim.registry import STATE

__all__ = ['LOOPS', 'TARGETS', 'instrument']

#: Trainer method → the mode its frame records.
LOOPS: dict[str, str] = {'_train_loop': 'train', '_eval_loop': 'eval', 'predict': 'predict'}
#: What this module patches.
TARGETS = tuple(f'composer.trainer.trainer.Trainer.{name}' for name in LOOPS)


def _make_loop(original: Callable[..., Any], record: patching.Patch, mode: str) -> Callable[..., Any]:

    @functools.wraps(original)
    def loop(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not record.active:
            return record.original(self, *args, **kwargs)
        with _loop_frames.loop_frame(self.state.device, mode, self.state) as frame:
            try:
                return record.original(self, *args, **kwargs)
            except Exception as exc:
                hooks.note_reshaped(frame, exc)
                raise

    return loop


def instrument(trainer_cls: type) -> None:
    """Wrap each loop of ``trainer_cls`` in a loop frame."""
    for name, mode in LOOPS.items():
        STATE.patches.patch(trainer_cls, name, functools.partial(_make_loop, mode=mode))
