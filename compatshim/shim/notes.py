"""Which transforms each ``DataSpec`` was given, where each one sits, and what became of it.

A DataSpec keeps no trace of an argument that Composer drops (0.27–0.28), and a callback sees the running dataloader
more readily than its DataSpec. So the DataSpec is *noted* when it is built, by the wrapper that knows where each
transform went: the shim's (:mod:`compatshim.shim.data_spec`) while the shim is on, the monitor's observe-only watch
(:mod:`compatshim.observe.watch`) while it is armed. The monitor taps through :func:`tap` and knows nothing of the
shim's hooks. A note lives on its DataSpec; the DataSpecs over a dataloader are known by weak references (one
dataloader may feed several). Imports nothing heavy.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import weakref
from collections.abc import Iterable
from typing import Any, Callable, Optional

from compatshim.config.support import family_of, installed
from compatshim.shim import patching

__all__ = [
    'TRANSFORM_NAMES',
    'Fate',
    'Note',
    'Slot',
    'composer_slots',
    'find',
    'given_transforms',
    'held_note',
    'held_slots',
    'note',
    'noted',
    'over',
    'spec_name',
    'tap',
]

#: The DataSpec arguments that take a transform, in the order Composer applies them.
TRANSFORM_NAMES = ('device_transforms', 'batch_transforms', 'microbatch_transforms')


class Fate(str, enum.Enum):
    """What became of a transform a DataSpec was given."""

    #: Composer calls it where it was given: its own ``batch_transforms`` / ``microbatch_transforms``, and
    #: ``device_transforms`` up to 0.24 (after the move, on the device).
    CALLED = 'called by Composer'
    #: ``device_transforms`` on 0.25–0.26 without the shim: called at batch level, before the move (on the host).
    ON_HOST = 'called before the move'
    #: ``device_transforms`` on 0.27–0.28 without the shim: assigned, then overwritten; nothing will call it.
    DROPPED = 'dropped by Composer'
    #: ``device_transforms`` converted by the shim: its hooks call it on the device, at the slot's stage.
    PLACED = 'placed by the shim'


@dataclasses.dataclass(frozen=True)
class Slot:
    """One transform of one DataSpec.

    Attributes:
        name: The DataSpec argument it was given as (:data:`TRANSFORM_NAMES`).
        fate: What became of it.
        places: Every ``(holder, attribute)`` that holds the callable something calls (empty: nothing will).
        stage: ``'batch'`` or ``'microbatch'``: where it runs; ``None`` for the shim's hooks following
            ``enable(stage=...)`` (the DataSpec gave no ``data_transfer_stage``).
    """

    name: str
    fate: Fate
    places: tuple[tuple[Any, str], ...] = ()
    stage: Optional[str] = None


@dataclasses.dataclass(eq=False)
class Note:
    """One DataSpec: how messages name it, and its slots (by argument name). It travels with its DataSpec: a deep copy
    gets a copy (the slots then name the copy's holders); a pickle keeps it where the shim placed a transform (the
    DataSpec holds the shim's hooks anyway) and drops it elsewhere (unpickling a DataSpec never needs compatshim
    because compatshim noted it)."""

    spec_name: str
    slots: dict[str, Slot]
    #: Noted by the shim's own wrapper, which knows where it put the transforms: a watch's note never replaces it.
    by_shim: bool = False

    def __deepcopy__(self, memo: dict[int, Any]) -> Note:
        return Note(self.spec_name, copy.deepcopy(self.slots, memo), self.by_shim)

    def __reduce__(self) -> Any:
        placed = any(slot.fate is Fate.PLACED for slot in self.slots.values())
        return (Note, (self.spec_name, self.slots, True)) if placed else (type(None), ())


#: The attribute a noted DataSpec keeps its note in: the note lives and dies with its DataSpec. (A note holds its
#: transforms' holders, and through them the DataSpec: kept anywhere else, it would keep every DataSpec alive.)
NOTE_ATTRIBUTE = '_compatshim_note'
#: By dataloader: weak references to the DataSpecs noted over it, newest last (train, eval and predict may share one
#: dataloader, each with its own DataSpec).
_OVER: dict[int, list[weakref.ref[Any]]] = {}


def spec_name(spec: Any) -> str:
    """``DataSpec(dataloader=DataLoader over TensorDataset)``: how messages name a DataSpec."""
    loader = getattr(spec, 'dataloader', None)
    dataset = getattr(loader, 'dataset', None)
    over = f' over {type(dataset).__name__}' if dataset is not None else ''
    return f'DataSpec(dataloader={type(loader).__name__}{over})'


def given_transforms(arguments: dict[str, Any]) -> frozenset[str]:
    """The transform arguments among ``arguments`` that hold something other than ``None``."""
    return frozenset(name for name in TRANSFORM_NAMES if arguments.get(name) is not None)


def _is_default(spec: Any, value: Any) -> bool:
    """Composer's own no-op transforms are methods of the DataSpec itself."""
    return getattr(value, '__self__', None) is spec


def composer_slots(spec: Any, given: Iterable[str]) -> list[Slot]:
    """Where Composer itself (no shim) keeps each transform ``spec`` was given, and what it does with it."""
    slots = []
    for name in (n for n in TRANSFORM_NAMES if n in set(given)):
        held = vars(spec).get(name)
        kept = callable(held) and not _is_default(spec, held)
        if name != 'device_transforms':
            stage = {'batch_transforms': 'batch', 'microbatch_transforms': 'microbatch'}[name]
            slots.append(Slot(name, Fate.CALLED, ((spec, name),) if kept else (), stage))
        elif not kept:  # 0.27–0.28: assigned, then overwritten
            slots.append(Slot(name, Fate.DROPPED))
        else:  # up to 0.24 after the move; 0.25–0.26 before it
            version = installed('mosaicml')
            fate = Fate.CALLED if version is None or family_of(version) is None else Fate.ON_HOST
            slots.append(Slot(name, fate, ((spec, name),), 'batch'))
    return slots


def held_slots(spec: Any) -> list[Slot]:
    """What a DataSpec that was never noted (built before any watch) visibly holds: its non-default transforms."""
    held = [n for n in TRANSFORM_NAMES if callable(vars(spec).get(n)) and not _is_default(spec, vars(spec)[n])]
    return composer_slots(spec, held)


def note(spec: Any, slots: Iterable[Slot], *, by_shim: bool = False) -> None:
    """Remember ``spec``'s slots. The shim's note replaces a watch's; a watch's never replaces the shim's."""
    before = noted(spec)
    if (before is not None and before.by_shim and not by_shim) or not hasattr(spec, '__dict__'):
        return
    vars(spec)[NOTE_ATTRIBUTE] = Note(spec_name(spec), {s.name: s for s in slots}, by_shim)
    loader = getattr(spec, 'dataloader', None)
    if loader is not None:
        kept = [ref for ref in _OVER.get(id(loader), []) if over(ref(), loader) and ref() is not spec]
        _OVER[id(loader)] = [*kept[-7:], weakref.ref(spec)]
    if len(_OVER) > 64:  # drop what is gone
        for stale in [key for key, refs in _OVER.items() if all(ref() is None for ref in refs)]:
            del _OVER[stale]


def over(spec: Any, loader: Any) -> bool:
    """Whether ``spec`` is a DataSpec (alive) over ``loader``."""
    return spec is not None and getattr(spec, 'dataloader', None) is loader


def held_note(spec: Any) -> Any:
    """The note object ``spec`` holds (``None``: none), as it is: a new one means its transforms were placed anew."""
    return vars(spec).get(NOTE_ATTRIBUTE) if hasattr(spec, '__dict__') else None


def noted(spec: Any) -> Optional[Note]:
    """``spec``'s note (``None``: it was never noted). A shallow copy shares its original's note, whose slots name the
    original where Composer keeps a transform: the copy gets the same slots on itself."""
    found = vars(spec).get(NOTE_ATTRIBUTE) if hasattr(spec, '__dict__') else None
    if not isinstance(found, Note):
        return None

    def own(holder: Any) -> Any:
        return spec if isinstance(holder, type(spec)) else holder

    if all(own(holder) is holder for slot in found.slots.values() for holder, _ in slot.places):
        return found
    slots = {name: dataclasses.replace(slot, places=tuple((own(h), a) for h, a in slot.places))
             for name, slot in found.slots.items()}  # fmt: skip
    return Note(found.spec_name, slots, found.by_shim)


def find(loader: Any) -> Optional[tuple[Any, Note]]:
    """The DataSpec last noted over ``loader`` and its note, or ``None`` if none was noted (or it is gone)."""
    for ref in reversed(_OVER.get(id(loader), [])):
        spec = ref()
        found = noted(spec) if over(spec, loader) else None
        if found is not None:
            return spec, found
    return None


def tap(slot: Slot, wrap: Callable[[Any], Any]) -> tuple[Any, list[patching.Swap]]:
    """Put one ``wrap(callable)`` in every place of ``slot`` (``None`` and no swap where it has none); the wrapper,
    and the swaps that take it out again (``undo()``: only where it is still there)."""
    if not slot.places:
        return None, []
    holder, attr = slot.places[0]
    wrapper = wrap(patching.held(holder, attr))
    return wrapper, [patching.swap(h, a, lambda _: wrapper) for h, a in slot.places]
