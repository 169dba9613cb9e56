"""Everything the shim knows about this process, in one object: :data:`STATE`.

After gevent's ``monkey._state`` and OpenTelemetry's ``BaseInstrumentor``: whether the shim is on and with which
default stage, the family its patches were made for, whether an untested release was opted in, every attribute it
replaced with what was there before, and the lock that serialises ``enable()``/``disable()``.

Each replaced attribute is a :class:`Patch`. Its replacement (built by ``patches/``) checks ``patch.active`` on every
call and passes straight through to the original when it is off. :func:`restore_all` puts an original back only while
the attribute still holds the shim's own replacement; when something else (an APM agent, a tracer, a profiler) has
wrapped it since, putting the original back would remove that wrapper, so the shim's replacement is left in that chain,
switched off, and a :class:`~compatshim.errors.CompatShimWarning` names it. A later :func:`patch` of the same target
switches that replacement back on if it is still reachable beneath the other wrapper (``__wrapped__``), instead of
stacking a second one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import types
import warnings
from typing import Any, Callable, Optional

from compatshim._stages import Stage
from compatshim._support import Family
from compatshim.errors import CompatShimWarning

__all__ = [
    'STATE',
    'Patch',
    'ShimState',
    'describe',
    'get_original',
    'is_patched',
    'label',
    'patch',
    'patched_targets',
    'restore_all',
]

MISSING: Any = object()


@dataclasses.dataclass(eq=False)
class Patch:
    """One attribute the shim replaced."""

    owner: type
    name: str
    #: What ``vars(owner)[name]`` held before the shim, or :data:`MISSING` when the owner only inherited it.
    saved: Any
    #: What the shim's replacement calls: the attribute as it resolved before the shim (inherited ones included).
    original: Any
    replacement: Any = None
    #: Read by the replacement on every call; off: a pure pass-through to :attr:`original`.
    active: bool = True

    @property
    def label(self) -> str:
        return label(self.owner, self.name)

    def is_on_top(self) -> bool:
        """Whether the owner's attribute is still the shim's own replacement (nothing wrapped it since)."""
        return vars(self.owner).get(self.name, MISSING) is self.replacement

    def is_reachable(self) -> bool:
        """Whether the replacement is still in the attribute's ``__wrapped__`` chain (someone else's wrapper on top)."""
        func = vars(self.owner).get(self.name, MISSING)
        for _ in range(64):  # a chain this deep is a cycle
            if func is self.replacement:
                return True
            func = getattr(func, '__wrapped__', MISSING)
            if func is MISSING:
                return False
        return False


#: Patches by target: the live ones, and those left switched off beneath another wrapper.
Patches = dict[tuple[type, str], Patch]
#: Every set of live patches compatshim keeps (the shim's, the monitor's watch): its own wrappers are spliced out of a
#: chain, never left behind as pass-throughs beneath one another.
PATCH_SETS: list[Patches] = []


@dataclasses.dataclass(eq=False)
class ShimState:
    """The process's shim state. Read on every batch (``stage``), written under ``lock``."""

    lock: threading.RLock = dataclasses.field(default_factory=threading.RLock)
    #: The default stage while the shim is on; ``None`` while it is off.
    stage: Optional[Stage] = None
    #: The family the active patches were made for (an opted-in untested release has none in the table).
    family: Optional[Family] = None
    #: Whether ``enable(allow_untested=True)`` patched a release outside the support table.
    allow_untested: bool = False
    #: Live patches, in patch order.
    patches: Patches = dataclasses.field(default_factory=dict)
    #: Switched-off replacements left beneath another wrapper by ``disable()``, to switch back on by the next patch.
    detached: Patches = dataclasses.field(default_factory=dict)
    #: True while ``enable()`` imports and patches Composer: a re-entrant call (``compatshim run``'s import hook,
    #: fired by that very import) must leave the work to the outer call.
    enabling: bool = False
    #: One-per-process warnings already given (by key).
    warned: set[str] = dataclasses.field(default_factory=set)

    @property
    def active(self) -> bool:
        return self.stage is not None


#: The one state object of this process.
STATE = ShimState()
PATCH_SETS.append(STATE.patches)


def label(owner: type, name: str) -> str:
    return f'{owner.__module__}.{owner.__qualname__}.{name}'


def patch(
    owner: type,
    name: str,
    make: Callable[[Any, Patch], Any],
    *,
    live: Optional[Patches] = None,
    detached: Optional[Patches] = None,
) -> Patch:
    """Replace ``owner.name`` with ``make(original, record)``, remembering what was there.

    If an earlier ``disable()`` left the shim's replacement switched off beneath another wrapper, and it is still
    there, it is switched back on instead: the other wrapper stays on top, and nothing is stacked twice.

    ``live`` and ``detached`` default to the shim's own (:data:`STATE`); the monitor's watch keeps its own pair
    (:mod:`compatshim.patches.watch`), so that ``disable()`` leaves it alone and ``status()`` does not list it.

    Raises:
        RuntimeError: If the target is already patched (an internal error: callers check first).
    """
    live = STATE.patches if live is None else live
    detached = STATE.detached if detached is None else detached
    key = (owner, name)
    if key in live:
        raise RuntimeError(f'compatshim: {label(owner, name)} is already patched')
    old = detached.pop(key, None)
    if old is not None and old.is_reachable():
        old.active = True
        live[key] = old
        return old
    record = Patch(owner, name, vars(owner).get(name, MISSING), getattr(owner, name))
    record.replacement = make(record.original, record)
    live[key] = record
    setattr(owner, name, record.replacement)
    return record


def _splice_out(record: Patch) -> bool:
    """Take ``record``'s replacement out from under another of compatshim's own live wrappers of the same target.

    compatshim's wrappers call ``record.original`` (not a copy of it), so the one above is made to call what ``record``
    wrapped and to restore what ``record`` saved; the chain loses exactly ``record``'s link and nothing else.
    """
    for patches in PATCH_SETS:
        above = patches.get((record.owner, record.name))
        if above is not None and above is not record and above.original is record.replacement:
            above.original, above.saved = record.original, record.saved
            with contextlib.suppress(AttributeError, TypeError):
                above.replacement.__wrapped__ = record.original
            return True
    return False


def restore_all(
    *, live: Optional[Patches] = None, detached: Optional[Patches] = None, who: str = 'compatshim.disable()'
) -> None:
    """Undo every live patch, newest first: restore exactly where the shim is on top, else switch off and warn."""
    live = STATE.patches if live is None else live
    detached = STATE.detached if detached is None else detached
    left: list[str] = []
    for key in reversed(list(live)):
        record = live.pop(key)
        record.active = False
        if record.is_on_top():
            if record.saved is MISSING:
                delattr(record.owner, record.name)
            else:
                setattr(record.owner, record.name, record.saved)
        elif _splice_out(record):
            pass  # beneath compatshim's own other wrapper, which now calls and restores what this one did
        elif record.is_reachable():
            detached[key] = record
            on_top = vars(record.owner).get(record.name)
            left.append(f'{record.owner.__qualname__}.{record.name} (now {describe(on_top)})')
        # else: someone replaced the attribute outright (without keeping ours): nothing of ours is left to restore.
    if left:
        warnings.warn(
            f'{who}: ' + ', '.join(reversed(left)) + ' were wrapped by other code after they were patched; '
            "compatshim's wrappers were left beneath them as inert pass-throughs, so that code keeps working. "
            'Composer behaves as without them.',
            CompatShimWarning,
            stacklevel=3,
        )


def describe(obj: Any) -> str:
    """``module.qualname`` of a function or object, for messages: the object itself, not what it wraps.

    ``functools.wraps`` copies the wrapped function's ``__module__`` and ``__qualname__`` onto a wrapper, so a plain
    function is named from its own code and globals; a wrapt wrapper by the function given to wrapt.
    """
    if type(obj) is types.FunctionType:
        code = obj.__code__
        return f'{obj.__globals__.get("__name__", obj.__module__)}.{getattr(code, "co_qualname", code.co_name)}'
    wrapper = getattr(obj, '_self_wrapper', None)  # wrapt's FunctionWrapper (a proxy: type() sees through it)
    if type(wrapper) is types.FunctionType:
        return f'{describe(wrapper)} (wrapt)'
    module = getattr(obj, '__module__', None) or type(obj).__module__
    name = getattr(obj, '__qualname__', None) or type(obj).__qualname__
    return f'{module}.{name}'


def is_patched(owner: type, name: str) -> bool:
    """Whether the shim's replacement of ``owner.name`` is live (on top, or beneath another wrapper)."""
    record = STATE.patches.get((owner, name))
    return record is not None and record.active and (record.is_on_top() or record.is_reachable())


def get_original(owner: type, name: str) -> Any:
    """What ``owner.name`` resolved to before the shim patched it; the current attribute when it is not patched."""
    record = STATE.patches.get((owner, name))
    return record.original if record is not None else getattr(owner, name)


def patched_targets() -> tuple[str, ...]:
    """Dotted names of every attribute currently patched, in patch order."""
    return tuple(record.label for record in STATE.patches.values())
