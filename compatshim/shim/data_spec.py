"""The shim's patch of ``composer.core.data_spec.DataSpec.__init__``.

The wrapper takes ``device_transforms`` (and the shim's own ``data_transfer_stage``) away from Composer, lets
Composer build the DataSpec without it (the call bound against the original's own signature), then installs
:class:`~compatshim.shim.hooks.BatchHook` (and, on 0.27+, :class:`~compatshim.shim.hooks.MicrobatchHook`) around
the hooks Composer calls, and notes where each transform now sits (:mod:`compatshim.shim.notes`).
"""

from __future__ import annotations

import copy
import functools
import inspect
import sys
from collections.abc import Iterable
from typing import Any, Callable, Optional

from compatshim.config import stages
from compatshim.config.support import Family
from compatshim.shim import notes as _dataspecs
from compatshim.shim import patching
from compatshim.shim.hooks import BatchHook, MicrobatchHook, Transform
from compatshim.shim.notes import Fate, Slot
from compatshim.shim.registry import STATE

__all__ = ['ATTRIBUTE_TARGET', 'COPY_TARGET', 'TARGET', 'DeviceTransforms', 'given', 'instrument']

#: What this module patches: the constructor, and the attribute 0.24.1 had (0.27+ have none; 0.25–0.26 an instance's).
TARGET = 'composer.core.data_spec.DataSpec.__init__'
ATTRIBUTE_TARGET = 'composer.core.data_spec.DataSpec.device_transforms'
COPY_TARGET = 'composer.core.data_spec.DataSpec.__copy__'


def _take_device_transforms(
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """Remove ``device_transforms`` from a call, whether passed by keyword or (0.25–0.28) by position.

    Where Composer has the parameter, the call is bound against its signature first, so that a call Composer would
    refuse (``device_transforms`` given twice, by position and by keyword) reaches Composer as it is, and fails there.
    """
    if 'device_transforms' not in signature.parameters:
        if 'device_transforms' not in kwargs:
            return None, args, kwargs
        kwargs = dict(kwargs)
        return kwargs.pop('device_transforms'), args, kwargs
    bound = patching.bound(signature, None, *args, **kwargs)
    if bound is None:
        return None, args, kwargs  # let Composer report its own argument error
    transform = bound.arguments.pop('device_transforms', None)
    return transform, bound.args[1:], bound.kwargs


def given(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> frozenset[str]:
    """The transform arguments a ``DataSpec(...)`` call gives (bound against Composer's signature where it can be)."""
    bound = patching.bound(signature, None, *args, **kwargs)
    return _dataspecs.given_transforms(kwargs if bound is None else bound.arguments)


def _check_transform(transform: Any) -> None:
    if transform is not None and not callable(transform):
        raise TypeError(
            'compatshim: DataSpec(device_transforms=...) must be a callable that takes a batch and returns the '
            f'transformed batch; got {type(transform).__name__} {transform!r}',
        )


def _make_init(original: Callable[..., None], record: patching.Patch, family: Family) -> Callable[..., None]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if not record.active:  # switched off beneath another wrapper: Composer's own behaviour, keywords and all
            record.original(self, *args, **kwargs)
            return
        stage = kwargs.pop('data_transfer_stage', None)
        if stage is not None:
            stage = stages.validate_stage(stage, what='DataSpec data_transfer_stage')
        transform, args, kwargs = _take_device_transforms(signature, args, kwargs)
        _check_transform(transform)
        record.original(self, *args, **kwargs)
        if family is not Family.HOST:  # 0.24.1's __init__ sets the attribute: a value set before it is replaced
            vars(self).pop('device_transforms', None)
        if stage is not None:
            vars(self)[STAGE_ATTRIBUTE] = stage
        native = given(signature, args, kwargs)
        if transform is None:
            _dataspecs.note(self, _dataspecs.composer_slots(self, native), by_shim=True)
        else:
            _place(self, transform, family, native)

    return __init__


#: Where a DataSpec keeps its own ``data_transfer_stage`` (a plain string), for a transform assigned later.
STAGE_ATTRIBUTE = '_compatshim_stage'
#: The identity methods Composer's DataSpec has (0.25–0.26, 0.27+): ``device_transforms``' default, as 0.24.1's.
_DEFAULTS = ('_default_device_transforms', '_default_transforms')


def _hooks(spec: Any, family: Family) -> tuple[Optional[BatchHook], Optional[MicrobatchHook]]:
    """The shim's hooks on ``spec`` (``None`` where it has none)."""
    held = vars(spec)
    batch = held.get('device_transforms' if family is Family.HOST else 'batch_transforms')
    micro = held.get('microbatch_transforms')
    return (
        batch if isinstance(batch, BatchHook) else None,
        micro if isinstance(micro, MicrobatchHook) else None,
    )


def _is_default(spec: Any, value: Any) -> bool:
    """Whether ``value`` is the DataSpec's own identity method (what Composer's ``__init__`` assigns on 0.25–0.26)."""
    return getattr(value, '__self__', None) is spec and getattr(value, '__name__', None) in _DEFAULTS


def _default(spec: Any) -> Any:
    """The identity ``device_transforms`` reads as when none is set: the DataSpec's own no-op method, as on 0.24.1."""
    for name in _DEFAULTS:
        method = getattr(spec, name, None)
        if method is not None:
            return method
    raise AttributeError(f"{type(spec).__name__!r} object has no attribute 'device_transforms'")


def _place(spec: Any, transform: Optional[Transform], family: Family, native: Iterable[str]) -> None:
    """Make ``transform`` the one the trainer runs at ``spec``'s stage (``None``: none), and note ``spec``.

    The hooks are installed once, with the first transform, and updated after: what a monitor tapped in them stays
    where it is tapped.
    """
    if family is not Family.HOST:  # the attribute 0.27+ lack, kept where it stays readable after disable()
        if transform is None:
            vars(spec).pop('device_transforms', None)
        else:
            vars(spec)['device_transforms'] = transform
    batch, micro = _hooks(spec, family)
    if batch is None and transform is None:
        if family is Family.HOST:
            vars(spec)['device_transforms'] = _default(spec)
        return
    if batch is None:
        stage = vars(spec).get(STAGE_ATTRIBUTE)
        name = _dataspecs.spec_name(spec)
        if family is Family.HOST:
            batch = BatchHook(transform, stage, native=None, has_microbatch_hook=False, spec_name=name)
            vars(spec)['device_transforms'] = batch
        else:
            batch = BatchHook(transform, stage, native=spec.batch_transforms, has_microbatch_hook=True, spec_name=name)
            micro = MicrobatchHook(transform, stage, native=spec.microbatch_transforms, spec_name=name)
            spec.batch_transforms, spec.microbatch_transforms = batch, micro
    elif batch.owner is not spec:  # a shallow copy holds its original's hooks: an assignment makes its own
        batch, micro = copy.copy(batch), None if micro is None else copy.copy(micro)
        vars(spec)['device_transforms' if family is Family.HOST else 'batch_transforms'] = batch
        if micro is not None:
            spec.microbatch_transforms = micro
    batch.owner, batch.micro = spec, micro
    batch.follow = None if family is Family.HOST else _follow
    batch.transform = batch.given = transform
    if micro is not None:
        micro.transform = transform
    slots = []
    if transform is not None:
        places = ((batch, 'transform'),) + (() if micro is None else ((micro, 'transform'),))
        slots.append(Slot('device_transforms', Fate.PLACED, places, batch.stage))
    if micro is not None:
        natives = (('batch_transforms', batch, 'batch'), ('microbatch_transforms', micro, 'microbatch'))
        slots += [Slot(n, Fate.CALLED, ((holder, 'native'),), where) for n, holder, where in natives if n in native]
    _dataspecs.note(spec, slots, by_shim=True)


def _follow(spec: Any, transform: Optional[Transform]) -> None:
    """0.27+: place the transform assigned to ``spec`` while the shim was off, now that it is on (its hooks call this
    when they find the attribute changed)."""
    _place(spec, transform, Family.DROPPED, _natives_given(spec))  # 0.27+ families place alike


def _natives_given(spec: Any) -> set[str]:
    """The native transforms (0.27+) ``spec`` was given, as its note (else what it visibly holds) says."""
    found = _dataspecs.noted(spec)
    slots = found.slots.values() if found is not None else _dataspecs.held_slots(spec)
    return {slot.name for slot in slots} - {'device_transforms'}


def _assigned_while_off(spec: Any, held: Any) -> bool:
    """0.25–0.26: whether ``held``, the DataSpec's own attribute, is a transform assigned while the shim was off to a
    DataSpec that held the shim's hooks (as on 0.27+, where the hooks follow the attribute; a DataSpec that never held
    a transform under the shim keeps Composer's own behaviour, as one built before ``enable()`` does)."""
    if isinstance(held, BatchHook) or not callable(held) or _is_default(spec, held):
        return False
    note = _dataspecs.noted(spec)
    slot = None if note is None or not note.by_shim else note.slots.get('device_transforms')
    return slot is not None and slot.fate is Fate.PLACED


def _initialised(spec: Any, family: Family) -> bool:
    """Whether Composer's ``__init__`` has set ``spec`` up (a subclass may assign before calling it)."""
    return 'dataloader' in vars(spec) if family is Family.HOST else 'microbatch_transforms' in vars(spec)


class DeviceTransforms:
    """``DataSpec.device_transforms`` on a patched release, as 0.24.1 has it: a data descriptor on the class.

    Reading it gives the callable the user gave or last assigned (else the DataSpec's identity method); assigning one
    makes the trainer run it on the device at the DataSpec's stage (``None`` removes it). On 0.25–0.26 Composer's
    trainer reads the attribute itself: its own reads get the shim's hook, which moves the batch first. On 0.27+ the
    transform is kept in the instance's ``__dict__`` too, where it stays readable after ``disable()``.
    """

    def __init__(self, record: patching.Patch, family: Family) -> None:
        self.record, self.family = record, family

    def __get__(self, spec: Any, owner: Optional[type] = None) -> Any:
        if spec is None:
            return self
        own = vars(spec)
        if 'device_transforms' not in own:
            if self.family is not Family.HOST and _initialised(spec, self.family):
                return _default(spec)
            raise AttributeError(f"{type(spec).__name__!r} object has no attribute 'device_transforms'")
        held = own['device_transforms']
        if self.family is not Family.HOST:
            return held
        by_trainer = sys._getframe(1).f_globals.get('__name__') == _TRAINER_MODULE
        if by_trainer and _assigned_while_off(spec, held) and self.record.active:
            _place(spec, held, self.family, ())  # built under the shim, assigned while it was off: place it now
            return own['device_transforms']
        if isinstance(held, BatchHook) and not by_trainer:
            return _default(spec) if held.given is None else held.given  # 0.25-0.26: the trainer's reads get the hook
        return held

    def __set__(self, spec: Any, value: Any) -> None:
        if not self.record.active or not _initialised(spec, self.family):
            vars(spec)['device_transforms'] = value  # before Composer's __init__, which replaces it as 0.24.1's does
            return
        transform = None if value is None or _is_default(spec, value) else value
        if transform is not None and not callable(transform):
            raise TypeError(
                'compatshim: DataSpec.device_transforms must be a callable that takes a batch and returns the '
                f'transformed batch, or None; got {type(value).__name__} {value!r}'
            )
        _place(spec, transform, self.family, _natives_given(spec))

    def __delete__(self, spec: Any) -> None:
        self.__set__(spec, None)


#: The module whose reads of ``device_transforms`` are the trainer's own (0.25–0.26 call it at batch level).
_TRAINER_MODULE = 'composer.trainer.trainer'


def _make_copy(original: Any, record: patching.Patch, family: Family) -> Callable[[Any], Any]:
    """``copy.copy(spec)``: as Python copies an object (its ``__dict__``, shallow), and a copy that holds the shim's
    hooks gets hooks of its own, so that an assignment on either never changes what the other runs (as 0.24.1's
    per-instance attribute behaves)."""

    def __copy__(self: Any) -> Any:
        if original is not patching.MISSING_ATTRIBUTE:  # a class of Composer's that copies itself: as it does
            new = original(self)
        else:
            new = object.__new__(type(self))
            vars(new).update(vars(self))
        batch = _hooks(new, family)[0]
        if record.active and batch is not None:
            _place(new, batch.given, family, _natives_given(new))
        return new

    return __copy__


def instrument(data_spec_cls: type, family: Family) -> None:
    """Wrap ``DataSpec.__init__`` for ``family``, and give the class 0.24.1's ``device_transforms`` attribute and a
    ``__copy__`` that gives a shallow copy hooks of its own."""
    STATE.patches.patch(data_spec_cls, '__init__', functools.partial(_make_init, family=family))
    STATE.patches.patch(data_spec_cls, 'device_transforms', lambda _, record: DeviceTransforms(record, family))
    STATE.patches.patch(data_spec_cls, '__copy__', functools.partial(_make_copy, family=family))
