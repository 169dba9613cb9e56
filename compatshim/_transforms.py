"""The callables the shim installs on a ``DataSpec`` in place of Composer's transform hooks.

Composer calls two hooks, both with the batch alone:

* the batch-level hook (``device_transforms`` on 0.25–0.26, ``batch_transforms`` on 0.27+), once per batch, before
  the batch is split and (on these releases) before it is moved;
* the microbatch-level hook (``microbatch_transforms``, 0.27+ only), after each microbatch is moved.

:class:`BatchHook` and :class:`MicrobatchHook` wrap whatever Composer would have called (``native``) and add the
user's ``device_transforms`` at the right stage. They are plain, picklable objects holding references, no closures.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

from compatshim import _loop_frames, _stages
from compatshim.errors import CompatShimWarning

__all__ = ['BatchHook', 'MicrobatchHook']

Batch = Any
Transform = Callable[[Batch], Batch]

def _identity(batch: Batch) -> Batch:
    return batch


def _stage_of(hook: 'BatchHook | MicrobatchHook') -> Optional[_stages.Stage]:
    return hook.stage or _stages.current_default()


def _warn_inactive(hook: 'BatchHook') -> None:
    if not hook.warned:
        hook.warned = True
        warnings.warn(
            'compatshim is disabled, but a DataSpec built while it was enabled is in use: its device_transforms now '
            'runs before the batch is moved (on the host). Build DataSpecs after enable(), or re-enable the shim.',
            CompatShimWarning,
            stacklevel=3,
        )


class BatchHook:
    """Composer's batch-level hook: ``native`` (0.27+ ``batch_transforms``), then, at stage ``batch``, move + ``fn``.

    Args:
        transform: The user's ``device_transforms``.
        stage: The DataSpec's own ``data_transfer_stage``, or ``None`` to follow ``enable(stage=...)``.
        native: What Composer would have called here (``None`` on 0.25–0.26, which have no such transform).
        has_microbatch_hook: Whether the release calls a microbatch-level hook (0.27+); if not, stage
            ``microbatch`` arms the loop frame instead (see :mod:`compatshim._loop_frames`).
    """

    def __init__(
        self,
        transform: Transform,
        stage: Optional[_stages.Stage],
        native: Optional[Transform],
        has_microbatch_hook: bool,
    ) -> None:
        self.transform = transform
        self.stage = stage
        self.native = native
        self.has_microbatch_hook = has_microbatch_hook
        self.warned = False  # the disabled-shim warning is given once per DataSpec

    def __call__(self, batch: Batch) -> Batch:
        if self.native is not None:
            batch = self.native(batch)
        stage = _stage_of(self)
        if not _stages.is_active():
            _warn_inactive(self)
            return self.transform(batch)
        frame = _loop_frames.current_frame()
        if frame is None:
            # Called outside a trainer loop (by hand): there is no trainer device to move to.
            return self.transform(batch)
        if stage == 'batch':
            return self.transform(frame.device.batch_to_device(batch))
        if self.has_microbatch_hook:
            return batch  # MicrobatchHook applies the transform after each move
        if frame.mode == 'predict':
            return self.transform(batch)  # 0.25–0.26 predict moves the whole batch before this hook
        frame.arm(self.transform)
        return batch

    def __repr__(self) -> str:
        return f'BatchHook(transform={self.transform!r}, stage={self.stage!r}, native={self.native!r})'


class MicrobatchHook:
    """Composer's microbatch-level hook (0.27+): at stage ``microbatch``, ``fn`` then ``native``.

    Args:
        transform: The user's ``device_transforms``.
        stage: The DataSpec's own ``data_transfer_stage``, or ``None`` to follow ``enable(stage=...)``.
        native: The DataSpec's own ``microbatch_transforms``.
    """

    def __init__(self, transform: Transform, stage: Optional[_stages.Stage], native: Transform) -> None:
        self.transform = transform
        self.stage = stage
        self.native = native

    def __call__(self, microbatch: Batch) -> Batch:
        if _stages.is_active() and _stage_of(self) == 'microbatch':
            microbatch = self.transform(microbatch)
        return self.native(microbatch)

    def __repr__(self) -> str:
        return f'MicrobatchHook(transform={self.transform!r}, stage={self.stage!r}, native={self.native!r})'
