"""The callables the shim installs on a ``DataSpec`` in place of Composer's transform hooks, both called with the
batch alone: the batch-level hook (``device_transforms`` on 0.25–0.26, ``batch_transforms`` on 0.27+), once per batch,
before the batch is split and moved; the microbatch-level hook (``microbatch_transforms``, 0.27+), after each
microbatch is moved. :class:`BatchHook` and :class:`MicrobatchHook` wrap what Composer would have called (``native``)
and add the user's ``device_transforms`` at the right stage; plain, picklable objects, no closures. Their
``transform`` is ``None`` once the user assigned ``spec.device_transforms = None``: then they call only ``native``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Callable, Optional

from compatshim.config import stages
from compatshim.errors import CompatShimWarning, TransformResultError
from compatshim.shim import loops
from compatshim.shim.registry import STATE

__all__ = ['BatchHook', 'MicrobatchHook']

Batch = Any
Transform = Callable[[Batch], Batch]


def _kind(batch: Batch) -> str:
    if hasattr(batch, 'shape') and hasattr(batch, 'dtype'):
        return 'tensor'
    if isinstance(batch, (list, tuple)):
        return f'{type(batch).__name__} of {len(batch)}'
    if isinstance(batch, Mapping):
        return 'mapping'
    return type(batch).__name__


def _structure_problem(given: Batch, result: Batch) -> Optional[str]:
    """Why ``result`` cannot stand for ``given`` (``None`` if it can).

    A tensor must stay a tensor; a list or tuple must stay a list or tuple of the same length (Composer splits it
    element-wise); a mapping must stay a mapping (keys may be added). Other batch objects only must not become None.
    """
    if result is None:
        return 'None'
    if hasattr(given, 'shape') and hasattr(given, 'dtype'):
        ok = hasattr(result, 'shape') and hasattr(result, 'dtype')
    elif isinstance(given, (list, tuple)):
        ok = isinstance(result, (list, tuple)) and len(result) == len(given)
    elif isinstance(given, Mapping):
        ok = isinstance(result, Mapping)
    else:
        return None
    return None if ok else f'a {_kind(result)} for a batch that was a {_kind(given)}'


#: What a transform must return, as every message of a wrong result says it.
RESULT_RULE = (
    'It must return the batch it was given, transformed: a tensor for a tensor, a list or tuple of the same length, '
    'or a mapping.'
)


def result_problem(transform: Transform, given: Batch, result: Batch) -> Optional[str]:
    """Why ``transform``'s ``result`` cannot stand for the batch it was ``given``, in words naming the transform
    (``None`` if it can): ``'Normalize' returned None``."""
    problem = _structure_problem(given, result)
    return None if problem is None else f'{_name(transform)!r} returned {problem}'


def _name(transform: Transform) -> str:
    return getattr(transform, '__qualname__', None) or type(transform).__name__


def _apply(hook: BatchHook | MicrobatchHook, batch: Batch, stage: str) -> Batch:
    """Call the user's transform (its exceptions propagate untouched) and check what it returned."""
    transform = hook.transform
    if transform is None:  # removed between the batch-level call that armed a microbatch and the move
        return batch
    result = transform(batch)
    problem = _structure_problem(batch, result)
    if problem is not None:
        raise TransformResultError(
            f'compatshim: device_transforms {_name(transform)!r} of {hook.spec_name} returned {problem} at stage '
            f'{stage!r}. {RESULT_RULE}',
        )
    return result


def _stage_of(hook: BatchHook | MicrobatchHook) -> Optional[stages.Stage]:
    return hook.stage or STATE.stage


def _warn_inactive(hook: BatchHook) -> None:
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
            ``microbatch`` arms the loop frame instead (see :mod:`compatshim.shim.loops`).
        spec_name: The DataSpec, as error messages name it.
    """

    def __init__(
        self,
        transform: Optional[Transform],
        stage: Optional[stages.Stage],
        native: Optional[Transform],
        has_microbatch_hook: bool,
        spec_name: str = 'a DataSpec',
    ) -> None:
        self.transform: Optional[Transform] = transform
        self.stage, self.native, self.spec_name = stage, native, spec_name
        #: The transform as the user gave or last assigned it (``transform`` is what is called: a monitor may wrap it).
        self.given: Optional[Transform] = transform
        self.has_microbatch_hook = has_microbatch_hook
        self.warned = False  # the disabled-shim warning is given once per DataSpec
        #: The DataSpec the hooks were made for (a shallow copy of it shares them until it assigns).
        self.owner: Any = None
        #: The microbatch-level hook beside this one (0.27+).
        self.micro: Optional[MicrobatchHook] = None
        #: How a transform assigned while the shim was off is placed once it is on again (0.27+; it notes the DataSpec
        #: anew, so that a monitor taps it): ``follow(owner, transform)``.
        self.follow: Optional[Callable[[Any, Optional[Transform]], None]] = None

    def __call__(self, batch: Batch) -> Batch:
        if self.native is not None:
            batch = self.native(batch)
        if self.has_microbatch_hook and STATE.stage is not None:
            self._follow_the_attribute()
        if self.transform is None:  # removed by ``spec.device_transforms = None``
            return batch
        stage = _stage_of(self)
        if STATE.stage is None:
            _warn_inactive(self)
            return _apply(self, batch, 'batch (shim disabled: on the host)')
        frame = loops.current_frame()
        if frame is None:
            # Called outside a trainer loop (by hand): there is no trainer device to move to.
            return _apply(self, batch, 'batch (outside a trainer loop)')
        if stage == 'batch':
            return _apply(self, frame.device.batch_to_device(batch), 'batch')
        if self.has_microbatch_hook:
            return batch  # MicrobatchHook applies the transform after each move
        if frame.mode == 'predict':
            return _apply(self, batch, 'microbatch')  # 0.25–0.26 predict moves the whole batch before this hook
        frame.arm(self.after_move)
        return batch

    def _follow_the_attribute(self) -> None:
        """0.27+: the DataSpec's ``device_transforms`` (in its own ``__dict__``) is the transform; one assigned while
        the shim was off is placed (``follow``) once the shim is on again."""
        if self.follow is None or self.owner is None:
            return
        held = vars(self.owner).get('device_transforms')
        if held is not self.given and (held is None or callable(held)):
            self.follow(self.owner, held)

    def after_move(self, microbatch: Batch) -> Batch:
        """Stage ``microbatch`` on 0.25–0.26: run right after the trainer's device moved a microbatch."""
        return _apply(self, microbatch, 'microbatch')

    def __repr__(self) -> str:
        return f'BatchHook(transform={self.transform!r}, stage={self.stage!r}, native={self.native!r})'


class MicrobatchHook:
    """Composer's microbatch-level hook (0.27+): at stage ``microbatch``, ``fn`` then ``native``.

    Args:
        transform: The user's ``device_transforms``.
        stage: The DataSpec's own ``data_transfer_stage``, or ``None`` to follow ``enable(stage=...)``.
        native: The DataSpec's own ``microbatch_transforms``.
        spec_name: The DataSpec, as error messages name it.
    """

    def __init__(
        self,
        transform: Optional[Transform],
        stage: Optional[stages.Stage],
        native: Transform,
        spec_name: str = 'a DataSpec',
    ) -> None:
        self.transform: Optional[Transform] = transform
        self.stage, self.native, self.spec_name = stage, native, spec_name

    def __call__(self, microbatch: Batch) -> Batch:
        if self.transform is not None and STATE.stage is not None and _stage_of(self) == 'microbatch':
            microbatch = _apply(self, microbatch, 'microbatch')
        return self.native(microbatch)

    def __repr__(self) -> str:
        return f'MicrobatchHook(transform={self.transform!r}, stage={self.stage!r}, native={self.native!r})'
