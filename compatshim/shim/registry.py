"""Everything compatshim keeps about this process, in one object (:data:`STATE`), after gevent's ``monkey._state`` and
OpenTelemetry's ``BaseInstrumentor``: the shim's switch and patches, and the monitor's taps and patch sets (the
running loops are each thread's own: :mod:`compatshim.shim.loops`)."""

from __future__ import annotations

import dataclasses
import threading
import warnings
from typing import Any, Optional

from compatshim.config.stages import Stage
from compatshim.config.support import Family
from compatshim.shim.patching import _MISSING, PatchSet

__all__ = ['STATE', 'ShimState', 'get_original', 'is_patched', 'patched_targets', 'warn_once']


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
    #: The shim's patches: live ones, and those left switched off beneath another wrapper by ``disable()``.
    patches: PatchSet = dataclasses.field(default_factory=lambda: PatchSet('compatshim.disable()'))
    #: True while ``enable()`` imports and patches Composer: a re-entrant call (``compatshim run``'s import hook,
    #: fired by that very import) must leave the work to the outer call.
    enabling: bool = False
    #: What enabled the active patches: ``compatshim.enable()``, ``compatshim run`` (its import hook),
    #: ``compatshim.auto``; ``None`` while the shim is off.
    enabled_by: Optional[str] = None
    #: Set by :func:`compatshim._start.start` around its ``enable()``: who is starting the shim.
    starting: Optional[str] = None
    #: One-per-process warnings already given (by key).
    warned: set[str] = dataclasses.field(default_factory=set)
    #: The monitor's taps, by DataSpec (its id, while a tap holds it), then transform name (written under ``lock``).
    taps: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    #: The monitor's watch of ``DataSpec`` (observe-only), and its attaching to every ``Trainer``: patch sets of their
    #: own, which ``disable()`` leaves alone.
    watch: PatchSet = dataclasses.field(default_factory=lambda: PatchSet('compatshim.monitor.unwatch()'))
    attaching: PatchSet = dataclasses.field(default_factory=lambda: PatchSet('compatshim.monitor.unwatch()'))
    #: The arguments of the monitor :func:`compatshim.monitor.attach_to_every_trainer` adds to every Trainer.
    attach: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The monitor's arguments, when ``compatshim run`` asked to attach it while ``compatshim.monitor`` was itself
    #: being imported: that module attaches itself at the end of its import.
    pending: Optional[dict[str, Any]] = None

    @property
    def active(self) -> bool:
        return self.stage is not None


#: The one state object of this process.
STATE = ShimState()


def warn_once(key: str, message: str, category: type[Warning], stacklevel: int) -> None:
    """``warnings.warn(message, category)`` once per process and ``key`` (``STATE.warned``), however often its reason
    recurs; ``stacklevel`` as the caller would give ``warnings.warn`` itself."""
    if key not in STATE.warned:
        STATE.warned.add(key)
        warnings.warn(message, category, stacklevel=stacklevel + 1)


def is_patched(owner: type, name: str) -> bool:
    """Whether the shim's replacement of ``owner.name`` is live (on top, or beneath another wrapper)."""
    record = STATE.patches.get(owner, name)
    return record is not None and record.active and (record.is_on_top() or record.is_reachable())


def get_original(owner: type, name: str) -> Any:
    """What ``owner.name`` resolved to before the shim patched it; the current attribute when it is not patched."""
    record = STATE.patches.get(owner, name)
    if record is None:
        return getattr(owner, name)
    if record.original is _MISSING:
        raise AttributeError(f'{owner.__qualname__} had no attribute {name!r} before compatshim added it')
    return record.original


def patched_targets() -> tuple[str, ...]:
    """Dotted names of every attribute currently patched, in patch order."""
    return STATE.patches.labels()
