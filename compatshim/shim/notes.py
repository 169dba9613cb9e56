"""What the shim's core knows of a DataSpec and its transforms: how messages name them, what counts as no transform,
a DataSpec's own stage, and the one way every transform is called
(:func:`call`, through a DataSpec's taps where the monitor put some: ``STATE.taps``). The monitor's own view of a
DataSpec (what becomes of each transform, the arguments Composer dropped, the taps it puts on) is
:mod:`compatshim.observe.slots`. Imports nothing heavy.
"""

from __future__ import annotations

import types
from typing import Any, Callable, Optional

from compatshim.shim.registry import STATE

__all__ = [
    'COMPOSERS_HOOKS',
    'STAGE_ATTRIBUTE',
    'TRANSFORM_NAMES',
    'TapsInside',
    'Tapped',
    'call',
    'kind',
    'leave_to_composer',
    'holds',
    'own',
    'spec_name',
    'stage_of',
    'tapped',
    'transform_name',
]

#: The DataSpec arguments that take a transform, in the order Composer applies them.
TRANSFORM_NAMES = ('device_transforms', 'batch_transforms', 'microbatch_transforms')
#: The identity methods Composer's DataSpec has (0.24–0.26, 0.27+): what a transform reads as when none was given.
DEFAULTS = ('_default_device_transforms', '_default_transforms')
#: Composer's DataSpec module, and its identity methods' qualified names there.
DATA_SPEC_MODULE = 'composer.core.data_spec'
_QUALNAMES = frozenset(f'DataSpec.{name}' for name in DEFAULTS)
#: Where a DataSpec keeps its own ``data_transfer_stage`` (a plain string).
STAGE_ATTRIBUTE = '_compatshim_stage'
#: Where a DataSpec whose class defines a hook name of 0.27+ itself keeps what Composer's ``__init__`` assigned there.
COMPOSERS_HOOKS = '_compatshim_composers'
#: The module whose reads of a DataSpec's transforms are the trainer's own.
TRAINER_MODULE = 'composer.trainer.trainer'


def spec_name(spec: Any) -> str:
    """``DataSpec(dataloader=DataLoader over TensorDataset)``: how messages name a DataSpec."""
    loader = getattr(spec, 'dataloader', None)
    dataset = getattr(loader, 'dataset', None)
    over_what = f' over {type(dataset).__name__}' if dataset is not None else ''
    return f'DataSpec(dataloader={type(loader).__name__}{over_what})'


def transform_name(transform: Any) -> str:
    """How messages name a transform: a function's qualified name, else its type's (a callable object). Read past
    the object's own ``__getattr__``, which may raise anything: the shim touches a transform only by calling it."""
    try:
        if isinstance(transform, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
            return str(transform.__qualname__)
        return type(transform).__qualname__
    except Exception:  # noqa: BLE001 (a name for a message never fails the run)
        return type(transform).__qualname__


def kind(cls: type, length: Optional[int] = None) -> str:
    """A batch's structure in words, from its class and (a list's or tuple's) length: ``tensor``, ``tuple of 2``,
    ``dict``, ``Record`` (read past its attributes)."""
    if cls.__module__.startswith('torch') and hasattr(cls, 'shape'):
        return 'tensor'
    if length is not None:
        return f'{cls.__name__} of {length}'
    return 'None' if cls is type(None) else cls.__name__


def holds(value: Any) -> bool:
    """Whether ``value`` is a transform something should run: not ``None``, and not Composer's own identity method
    bound to a DataSpec (a function of Composer's ``DataSpec`` class named in :data:`DEFAULTS`, told by its module and
    qualified name: read on every batch; a subclass's override is a transform like any other). A value that is not
    callable is run, and fails, as on 0.24.1."""
    if value is None:
        return False
    if type(value) is not types.MethodType:
        return True
    func = value.__func__
    return getattr(func, '__module__', None) != DATA_SPEC_MODULE or getattr(func, '__qualname__', '') not in _QUALNAMES


def own(spec: Any) -> dict[str, Any]:
    """``spec``'s own ``__dict__``, read past any ``__getattribute__`` (the shim's, the watch's)."""
    held: dict[str, Any] = object.__getattribute__(spec, '__dict__')
    return held


def stage_of(spec: Any) -> Optional[str]:
    """The stage the shim runs ``spec``'s ``device_transforms`` at (its own ``data_transfer_stage``, else the
    shim's); ``None`` where the shim does not run it: the shim is off, or ``spec`` is left to Composer. The one answer
    to "is the shim on for this DataSpec"."""
    if STATE.stage is None:
        return None
    stage: Optional[str] = own(spec).get(STAGE_ATTRIBUTE)
    return None if stage == COMPOSERS else stage or STATE.stage


#: A DataSpec's own stage that makes the shim leave it to Composer (the bench's legs without the shim).
COMPOSERS = 'composer'


def leave_to_composer(spec: Any) -> None:
    """Make the shim leave ``spec`` alone: Composer runs its transforms as it would without the shim."""
    own(spec)[STAGE_ATTRIBUTE] = COMPOSERS


#: No taps (one object: a read makes none).
_NONE: dict[str, Any] = {}


def call(spec: Any, name: str, transform: Callable[[Any], Any], batch: Any) -> Any:
    """``transform(batch)``, through ``spec``'s tap of ``name`` if it has one."""
    taps = STATE.taps
    tapping = taps.get(id(spec), _NONE).get(name) if taps else None
    return transform(batch) if tapping is None else tapping.call(transform, batch)


class TapsInside:
    """A callable that calls every transform it runs through :func:`call` itself (the shim's hooks): a lookup that
    taps leaves it as it is."""

    __slots__ = ()


class Tapped(TapsInside):
    """``transform``, called through ``spec``'s tap of ``name``: what the watch gives Composer's trainer to call."""

    __slots__ = ('name', 'spec', 'transform')

    def __init__(self, spec: Any, name: str, transform: Callable[[Any], Any]) -> None:
        self.spec, self.name, self.transform = spec, name, transform

    def __call__(self, batch: Any) -> Any:
        return call(self.spec, self.name, self.transform, batch)


def tapped(spec: Any, name: str, value: Any) -> Any:
    """What a trainer's read of ``spec.<name>`` gives while ``spec`` has a tap of ``name``: ``value`` called through
    it (a value that taps inside, or that nothing should run, as it is)."""
    if not STATE.taps or name not in STATE.taps.get(id(spec), {}) or isinstance(value, TapsInside) or not holds(value):
        return value
    return Tapped(spec, name, value)
