"""The shim's patch of ``composer.core.data_spec.DataSpec.__init__``.

The wrapper takes ``device_transforms`` (and the shim's own ``data_transfer_stage``) away from Composer, lets
Composer build the DataSpec without it (the call bound against the original's own signature), then installs
:class:`~compatshim._transforms.BatchHook` (and, on 0.27+, :class:`~compatshim._transforms.MicrobatchHook`) around
the hooks Composer calls, and notes where each transform now sits (:mod:`compatshim._dataspecs`).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from compatshim import _dataspecs, _patching, _stages
from compatshim._dataspecs import Fate, Slot
from compatshim._state import STATE
from compatshim._support import Family
from compatshim._transforms import BatchHook, MicrobatchHook

__all__ = ['TARGET', 'given', 'instrument']

#: What this module patches.
TARGET = 'composer.core.data_spec.DataSpec.__init__'


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
    bound = _patching.bound(signature, None, *args, **kwargs)
    if bound is None:
        return None, args, kwargs  # let Composer report its own argument error
    transform = bound.arguments.pop('device_transforms', None)
    return transform, bound.args[1:], bound.kwargs


def given(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> frozenset[str]:
    """The transform arguments a ``DataSpec(...)`` call gives (bound against Composer's signature where it can be)."""
    bound = _patching.bound(signature, None, *args, **kwargs)
    return _dataspecs.given_transforms(kwargs if bound is None else bound.arguments)


def _check_transform(transform: Any) -> None:
    if transform is not None and not callable(transform):
        raise TypeError(
            'compatshim: DataSpec(device_transforms=...) must be a callable that takes a batch and returns the '
            f'transformed batch; got {type(transform).__name__} {transform!r}',
        )


def _make_init(original: Callable[..., None], record: _patching.Patch, family: Family) -> Callable[..., None]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if not record.active:  # switched off beneath another wrapper: Composer's own behaviour, keywords and all
            record.original(self, *args, **kwargs)
            return
        stage = kwargs.pop('data_transfer_stage', None)
        if stage is not None:
            stage = _stages.validate_stage(stage, what='DataSpec data_transfer_stage')
        transform, args, kwargs = _take_device_transforms(signature, args, kwargs)
        _check_transform(transform)
        record.original(self, *args, **kwargs)
        native = given(signature, args, kwargs)
        if transform is None:
            _dataspecs.note(self, _dataspecs.composer_slots(self, native), by_shim=True)
            return
        name = _dataspecs.spec_name(self)
        if family is Family.HOST:
            hook = BatchHook(transform, stage, native=None, has_microbatch_hook=False, spec_name=name)
            self.device_transforms = hook
            _dataspecs.note(self, [Slot('device_transforms', Fate.PLACED, ((hook, 'transform'),), stage)], by_shim=True)
            return
        hook = BatchHook(transform, stage, native=self.batch_transforms, has_microbatch_hook=True, spec_name=name)
        micro = MicrobatchHook(transform, stage, native=self.microbatch_transforms, spec_name=name)
        self.batch_transforms, self.microbatch_transforms = hook, micro
        slots = [Slot('device_transforms', Fate.PLACED, ((hook, 'transform'), (micro, 'transform')), stage)]
        natives = (('batch_transforms', hook, 'batch'), ('microbatch_transforms', micro, 'microbatch'))
        slots += [Slot(n, Fate.CALLED, ((holder, 'native'),), where) for n, holder, where in natives if n in native]
        _dataspecs.note(self, slots, by_shim=True)

    return __init__


def instrument(data_spec_cls: type, family: Family) -> None:
    """Wrap ``DataSpec.__init__`` for ``family``."""
    STATE.patches.patch(data_spec_cls, '__init__', functools.partial(_make_init, family=family))
