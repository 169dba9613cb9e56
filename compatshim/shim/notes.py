"""What each ``DataSpec`` holds now, what it was given, and the taps that watch its transforms being called.

The DataSpec is the one owner of its transforms: what ``spec.device_transforms`` (or ``batch_transforms``,
``microbatch_transforms``) resolves to, whatever defines it (an instance attribute, a subclass's method, a property),
is the transform. Nothing here keeps a copy: :func:`slots` reads the DataSpec each time it is asked. The one thing the
DataSpec cannot show is an argument Composer dropped (0.27–0.28 overwrite ``device_transforms``): the monitor's watch
(:mod:`compatshim.observe.watch`) writes the names of the transform arguments a DataSpec was given and does not hold
after its ``__init__`` into one attribute of its own (``_compatshim_note``, a frozenset of strings: a copy or a pickle
carries it, and unpickling needs no compatshim).

A *tap* counts and times the calls of one transform of one DataSpec, by name (:func:`tap`). It never replaces the
DataSpec's attribute: what calls the transform calls it through :func:`call`, which finds the tap — the shim's hooks
(:mod:`compatshim.shim.hooks`) for the transforms they run, the watch's lookup for those Composer reads itself.
Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import weakref
from types import FrameType
from typing import Any, Callable, Optional

from compatshim.config.support import Family, family_of, installed
from compatshim.shim.registry import STATE

__all__ = [
    'NOTE_ATTRIBUTE',
    'STAGE_ATTRIBUTE',
    'TRANSFORM_NAMES',
    'Fate',
    'Slot',
    'TapsInside',
    'Tapped',
    'call',
    'find',
    'is_default',
    'kind',
    'left_to_composer',
    'leave_to_composer',
    'holds',
    'note',
    'own',
    'noted',
    'over',
    'by_trainer',
    'slots',
    'spec_name',
    'stage_of',
    'tap',
    'tapped',
    'transform_name',
    'untap',
]

#: The DataSpec arguments that take a transform, in the order Composer applies them.
TRANSFORM_NAMES = ('device_transforms', 'batch_transforms', 'microbatch_transforms')
#: The identity methods Composer's DataSpec has (0.24–0.26, 0.27+): what a transform reads as when none was given.
DEFAULTS = ('_default_device_transforms', '_default_transforms')
#: Where a DataSpec keeps its own ``data_transfer_stage`` (a plain string).
STAGE_ATTRIBUTE = '_compatshim_stage'
#: Where the watch writes the names of the transform arguments a DataSpec was given and Composer dropped.
NOTE_ATTRIBUTE = '_compatshim_note'
#: The module whose reads of a DataSpec's transforms are the trainer's own.
TRAINER_MODULE = 'composer.trainer.trainer'


class Fate(str, enum.Enum):
    """What becomes of a transform a DataSpec holds."""

    #: Composer calls it: its own ``batch_transforms`` / ``microbatch_transforms``, and ``device_transforms`` up to
    #: 0.24 (after the move, on the device).
    CALLED = 'called by Composer'
    #: ``device_transforms`` on 0.25–0.26 without the shim: called at batch level, before the move (on the host).
    ON_HOST = 'called before the move'
    #: ``device_transforms`` on 0.27+ without the shim: nothing calls it.
    DROPPED = 'dropped by Composer'
    #: ``device_transforms`` with the shim on: its hooks call it on the device, at the DataSpec's stage.
    PLACED = 'placed by the shim'


@dataclasses.dataclass(frozen=True)
class Slot:
    """One transform of one DataSpec: its name, what becomes of it, and its stage (``batch``, ``microbatch``; ``None``
    where nothing calls it)."""

    name: str
    fate: Fate
    stage: Optional[str] = None


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


def kind(batch: Any) -> str:
    """A batch's structure in words: ``tensor``, ``tuple of 2``, ``dict``, ``Record`` (read past its attributes)."""
    if type(batch).__module__.startswith('torch') and hasattr(type(batch), 'shape'):
        return 'tensor'
    if isinstance(batch, (list, tuple)):
        return f'{type(batch).__name__} of {len(batch)}'
    return 'None' if batch is None else type(batch).__name__


def _composer_defaults() -> tuple[Any, ...]:
    """Composer's own identity functions (``DataSpec._default_device_transforms`` / ``_default_transforms``), as
    its class defines them (a subclass's own default is a transform like any other)."""
    module = sys.modules.get('composer.core.data_spec')
    cls = getattr(module, 'DataSpec', None)
    held = vars(cls) if isinstance(cls, type) else {}
    return tuple(held[name] for name in DEFAULTS if name in held)


def is_default(value: Any) -> bool:
    """Whether ``value`` is Composer's own identity method bound to a DataSpec (what a transform reads as when none
    was given); a subclass's override of it is not."""
    return type(value) is types.MethodType and value.__func__ in _composer_defaults()


def holds(value: Any) -> bool:
    """Whether ``value`` is a transform something should run (not ``None``, not the identity method; a value that is
    not callable is run, and fails, as on 0.24.1)."""
    return value is not None and not is_default(value)


def own(spec: Any) -> dict[str, Any]:
    """``spec``'s own ``__dict__``, read past any ``__getattribute__`` (the shim's, the watch's)."""
    held: dict[str, Any] = object.__getattribute__(spec, '__dict__')
    return held


def stage_of(spec: Any) -> Optional[str]:
    """The stage ``spec``'s ``device_transforms`` runs at: its own ``data_transfer_stage``, else the shim's."""
    stage: Optional[str] = own(spec).get(STAGE_ATTRIBUTE)
    return stage or STATE.stage


def by_trainer() -> bool:
    """Whether the attribute read (or the call) being served is Composer's trainer's: the first caller past
    compatshim's own frames and any ``__getattribute__`` (a subclass's own, calling ``super()``) is in the trainer's
    module."""
    frame: Optional[FrameType] = sys._getframe(2)
    while frame is not None:
        name: str = frame.f_globals.get('__name__', '')
        if not name.startswith('compatshim.') and frame.f_code.co_name != '__getattribute__':
            return name == TRAINER_MODULE
        frame = frame.f_back
    return False


def note(spec: Any, given: frozenset[str]) -> None:
    """Write down which of the transform arguments ``spec`` was ``given`` it does not hold (Composer dropped them),
    and that it is over its dataloader."""
    if not hasattr(spec, '__dict__'):
        return
    vars(spec)[NOTE_ATTRIBUTE] = frozenset(name for name in given if not hasattr(spec, name))
    loader = getattr(spec, 'dataloader', None)
    if loader is not None:
        with STATE.lock:  # train, eval and predict may share a dataloader, each with its own DataSpec
            kept = [ref for ref in STATE.over.get(id(loader), []) if over(ref(), loader) and ref() is not spec]
            STATE.over[id(loader)] = [*kept[-7:], weakref.ref(spec)]
            if len(STATE.over) > 64:  # drop what is gone
                for stale in [key for key, refs in STATE.over.items() if all(ref() is None for ref in refs)]:
                    del STATE.over[stale]


def over(spec: Any, loader: Any) -> bool:
    """Whether ``spec`` is a DataSpec (alive) over ``loader``."""
    return spec is not None and getattr(spec, 'dataloader', None) is loader


#: A DataSpec's own stage that makes the shim leave it to Composer (the bench's legs without the shim).
COMPOSERS = 'composer'


def leave_to_composer(spec: Any) -> None:
    """Make the shim leave ``spec`` alone: Composer runs its transforms as it would without the shim."""
    own(spec)[STAGE_ATTRIBUTE] = COMPOSERS


def left_to_composer(spec: Any) -> bool:
    """Whether the shim leaves ``spec`` to Composer (:func:`leave_to_composer`)."""
    return own(spec).get(STAGE_ATTRIBUTE) == COMPOSERS


def noted(spec: Any) -> bool:
    """Whether ``spec`` was noted when it was built (by the watch)."""
    return isinstance(vars(spec).get(NOTE_ATTRIBUTE) if hasattr(spec, '__dict__') else None, frozenset)


def find(loader: Any) -> Optional[Any]:
    """The DataSpec last noted over ``loader`` (``None``: none, or it is gone)."""
    for ref in reversed(STATE.over.get(id(loader), [])):
        spec = ref()
        if over(spec, loader):
            return spec
    return None


def slots(spec: Any) -> list[Slot]:
    """Every transform ``spec`` holds now, or was given and Composer dropped, and what becomes of each: read from the
    DataSpec itself, each time (``None``, or no attribute after ``del``: none)."""
    given = own(spec).get(NOTE_ATTRIBUTE) or frozenset()
    version = installed('mosaicml')
    family = None if version is None else family_of(version)
    placed = STATE.active and not left_to_composer(spec)
    found = []
    for name in TRANSFORM_NAMES:
        value = getattr(spec, name, None)
        held = holds(value) and callable(value)
        if name != 'device_transforms':
            if held:
                found.append(Slot(name, Fate.CALLED, name.partition('_')[0]))
        elif held and placed:
            found.append(Slot(name, Fate.PLACED, stage_of(spec)))
        elif held and family in (None, Family.HOST):  # up to 0.24 after the move; 0.25–0.26 before it
            found.append(Slot(name, Fate.CALLED if family is None else Fate.ON_HOST, 'batch'))
        elif held or (name in given and not hasattr(spec, name)):  # 0.27+: nothing calls it, or Composer dropped it
            found.append(Slot(name, Fate.DROPPED))
    return found


def tap(spec: Any, name: str, tapping: Any) -> None:
    """Send every call of ``spec``'s ``name`` through ``tapping.call(transform, batch)`` until :func:`untap`."""
    with STATE.lock:
        STATE.taps.setdefault(id(spec), {})[name] = tapping


def untap(spec: Any, name: str, tapping: Any) -> None:
    """Take ``tapping`` off ``spec``'s ``name`` (only if it is still the one there)."""
    with STATE.lock:
        taps = STATE.taps.get(id(spec), {})
        if tapping is not None and taps.get(name) is tapping:
            del taps[name]
            if not taps:
                del STATE.taps[id(spec)]


def call(spec: Any, name: str, transform: Callable[[Any], Any], batch: Any) -> Any:
    """``transform(batch)``, through ``spec``'s tap of ``name`` if it has one."""
    taps = STATE.taps
    tapping = taps.get(id(spec), {}).get(name) if taps else None
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
