"""The monitor's view of a DataSpec: what becomes of each transform it holds (:class:`Fate`, :func:`slots`), the
transform arguments it was given that Composer dropped (:func:`note`, written by the watch into ``_compatshim_note``,
a frozenset of strings: a copy or a pickle carries it, and unpickling needs no compatshim), and the taps it puts on a
DataSpec's transforms (``STATE.taps``; every transform is called through :func:`compatshim.shim.notes.call`, which
finds them). Read from the DataSpec each time: nothing here keeps a copy of a transform. Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Optional

from compatshim.config.support import Family, family_of, installed
from compatshim.shim.notes import TRANSFORM_NAMES, holds, own, stage_of
from compatshim.shim.patching import definer
from compatshim.shim.registry import STATE

__all__ = ['NOTE_ATTRIBUTE', 'Fate', 'Slot', 'note', 'noted', 'slots', 'tap', 'untap']

#: Where the watch writes the names of the transform arguments a DataSpec was given and Composer dropped.
NOTE_ATTRIBUTE = '_compatshim_note'


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


def note(spec: Any, given: frozenset[str]) -> None:
    """Write down which of the transform arguments ``spec`` was ``given`` it does not hold (Composer dropped them)."""
    if not hasattr(spec, '__dict__'):
        return
    held = own(spec)  # read without calling anything of the user's: a property's getter is not run
    dropped = (name for name in given if name not in held and definer(type(spec), name) is None)
    held[NOTE_ATTRIBUTE] = frozenset(dropped)


def noted(spec: Any) -> bool:
    """Whether ``spec`` was noted when it was built (by the watch)."""
    return isinstance(vars(spec).get(NOTE_ATTRIBUTE) if hasattr(spec, '__dict__') else None, frozenset)


def slots(spec: Any) -> list[Slot]:
    """Every transform ``spec`` holds now, or was given and Composer dropped, and what becomes of each: read from the
    DataSpec itself, each time (``None``, or no attribute after ``del``: none)."""
    given = own(spec).get(NOTE_ATTRIBUTE) or frozenset()
    version = installed('mosaicml')
    family = None if version is None else family_of(version)
    stage = stage_of(spec)
    found = []
    for name in TRANSFORM_NAMES:
        value = getattr(spec, name, None)
        held = holds(value) and callable(value)
        if name != 'device_transforms':
            if held:
                found.append(Slot(name, Fate.CALLED, name.partition('_')[0]))
        elif held and stage is not None:
            found.append(Slot(name, Fate.PLACED, stage))
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
