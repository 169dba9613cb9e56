"""The registry of saved originals: every attribute the shim replaced, and how to put it back exactly.

Patches are recorded once per ``(owner, name)``; a second patch of the same target is refused, so a patched function
can never be saved as an "original". Restoring puts back the exact object that was in the owner's ``__dict__``, or
deletes the attribute when the owner only inherited it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ['is_patched', 'patch', 'patched_targets', 'restore_all']

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class _Saved:
    owner: type
    name: str
    original: Any  # what ``vars(owner)[name]`` held, or _MISSING when the attribute was inherited
    replacement: Any


_saved: dict[tuple[type, str], _Saved] = {}


def _label(owner: type, name: str) -> str:
    return f'{owner.__module__}.{owner.__qualname__}.{name}'


def patch(owner: type, name: str, replacement: Any) -> None:
    """Replace ``owner.name`` with ``replacement``, remembering what was there.

    Args:
        owner: The class to patch (the class object itself, never a name bound to it).
        name: The attribute name.
        replacement: The new value.

    Raises:
        RuntimeError: If the target is already patched (an internal error: callers check first).
    """
    key = (owner, name)
    if key in _saved:
        raise RuntimeError(f'compatshim: {_label(owner, name)} is already patched')
    original = vars(owner).get(name, _MISSING)
    _saved[key] = _Saved(owner, name, original, replacement)
    setattr(owner, name, replacement)


def restore_all() -> None:
    """Put back every patched attribute, newest first, exactly as it was."""
    for key in reversed(list(_saved)):
        saved = _saved.pop(key)
        if saved.original is _MISSING:
            if _is_ours(saved):
                delattr(saved.owner, saved.name)
        else:
            setattr(saved.owner, saved.name, saved.original)


def _is_ours(saved: _Saved) -> bool:
    return vars(saved.owner).get(saved.name, _MISSING) is saved.replacement


def is_patched(owner: type, name: str) -> bool:
    """Whether ``owner.name`` is currently replaced by the shim."""
    saved = _saved.get((owner, name))
    return saved is not None and _is_ours(saved)


def patched_targets() -> tuple[str, ...]:
    """Dotted names of every attribute currently patched, in patch order."""
    return tuple(_label(owner, name) for owner, name in _saved)
