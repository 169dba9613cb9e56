"""Which transforms each ``DataSpec`` was given, keyed by its dataloader: what the monitor reads to know what to watch.

A DataSpec keeps no trace of an argument that Composer drops (0.27–0.28 assign ``device_transforms``, then overwrite
it), and a callback sees only the running dataloader (``state.dataloader``), not its DataSpec. So the DataSpec is
*noted* when it is built: by the shim's own ``DataSpec.__init__`` wrapper while the shim is on
(:mod:`compatshim.patches.data_spec`), and by the monitor's watch (:mod:`compatshim.patches.watch`) while it is armed.
A note holds weak references only; imports nothing.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Callable, Optional

__all__ = ['TRANSFORM_NAMES', 'Note', 'find', 'given_transforms', 'note']

#: The DataSpec arguments that take a transform, in the order Composer applies them.
TRANSFORM_NAMES = ('device_transforms', 'batch_transforms', 'microbatch_transforms')


@dataclasses.dataclass(eq=False)
class Note:
    """One DataSpec: a weak reference to it, and the transforms it was given (by argument name)."""

    spec: Callable[[], Any]
    given: frozenset[str]
    #: Whether the shim converted it (its hooks are the shim's).
    by_shim: bool = False


_NOTES: dict[int, tuple[Callable[[], Any], Note]] = {}


def _ref(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:  # an object that takes no weak reference (rare for a dataloader): keep it
        return lambda: obj


def given_transforms(arguments: dict[str, Any]) -> frozenset[str]:
    """The transform arguments among ``arguments`` that hold something other than ``None``."""
    return frozenset(name for name in TRANSFORM_NAMES if arguments.get(name) is not None)


def note(spec: Any, given: frozenset[str], *, by_shim: bool = False) -> None:
    """Remember that ``spec`` was given ``given`` (merged with what an earlier note of the same DataSpec said)."""
    loader = getattr(spec, 'dataloader', None)
    if loader is None:
        return
    key = id(loader)
    found = _NOTES.get(key)
    if found is not None and found[0]() is loader and found[1].spec() is spec:
        old = found[1]
        old.given, old.by_shim = old.given | given, old.by_shim or by_shim
        return
    _NOTES[key] = (_ref(loader), Note(weakref.ref(spec), given, by_shim))
    if len(_NOTES) > 64:  # drop the notes of dataloaders that are gone
        for stale in [k for k, (ref, n) in _NOTES.items() if ref() is None or n.spec() is None]:
            del _NOTES[stale]


def find(loader: Any) -> Optional[tuple[Any, Note]]:
    """The DataSpec last built over ``loader`` and its note, or ``None`` if none was noted (or it is gone)."""
    found = _NOTES.get(id(loader))
    if found is None or found[0]() is not loader:
        return None
    spec = found[1].spec()
    return None if spec is None else (spec, found[1])
