"""The monitor's watch: two observe-only wrappers, kept apart from the shim's patches.

* ``DataSpec.__init__``: after Composer (and the shim, if it is on) built the DataSpec, note which transforms it was
  given (:mod:`compatshim._dataspecs`), so that the monitor can tell a transform that was never called from one that
  was never given. It changes no argument and no attribute.
* ``Trainer.__init__`` (only for :func:`attach_to_every_trainer`, the no-code option): add a
  :class:`~compatshim.monitor.TransformMonitor` to the Trainer's callbacks unless it has one.

Both live in this module's own patch set: ``compatshim.disable()`` leaves them alone (the monitor is how you see that
the shim is off), ``compatshim.status()`` does not list them, and :func:`unwatch` restores them with the shim's
discipline (exactly where they are on top; an inert pass-through beneath another library's wrapper).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

from compatshim import _dataspecs, _state

__all__ = ['attach_to_every_trainer', 'unwatch', 'watch', 'watching']

_LIVE: _state.Patches = {}
_DETACHED: _state.Patches = {}
_state.PATCH_SETS.append(_LIVE)
#: The keyword arguments of the monitor that ``Trainer.__init__`` adds, while attaching (``None``: not attaching).
_ATTACH: list[dict[str, Any]] = []


def _make_data_spec_init(original: Callable[..., None], record: _state.Patch) -> Callable[..., None]:
    from compatshim.patches.data_spec import given

    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        record.original(self, *args, **kwargs)
        if record.active:
            _dataspecs.note(self, given(signature, args, kwargs))

    return __init__


def _make_trainer_init(original: Callable[..., None], record: _state.Patch) -> Callable[..., None]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if record.active and _ATTACH:
            from compatshim.monitor import TransformMonitor

            try:
                bound = signature.bind_partial(self, *args, **kwargs)
            except TypeError:  # let Composer report its own argument error
                record.original(self, *args, **kwargs)
                return
            callbacks = bound.arguments.get('callbacks')
            listed = [] if callbacks is None else [callbacks] if not isinstance(callbacks, (list, tuple)) else callbacks
            if not any(isinstance(cb, TransformMonitor) for cb in listed):
                bound.arguments['callbacks'] = [*listed, TransformMonitor(**_ATTACH[0])]
            record.original(*bound.args, **bound.kwargs)
            return
        record.original(self, *args, **kwargs)

    return __init__


def watch() -> None:
    """Note every ``DataSpec`` built from now on (idempotent). Imports Composer."""
    from composer.core.data_spec import DataSpec

    with _state.STATE.lock:
        if (DataSpec, '__init__') not in _LIVE:
            _state.patch(DataSpec, '__init__', _make_data_spec_init, live=_LIVE, detached=_DETACHED)


def attach_to_every_trainer(**monitor_kwargs: Any) -> None:
    """Watch, and give every ``Trainer`` built from now on a ``TransformMonitor(**monitor_kwargs)`` (unless its
    callbacks already hold one). Idempotent; a second call changes the monitor's arguments."""
    from composer.trainer.trainer import Trainer

    watch()
    with _state.STATE.lock:
        _ATTACH[:] = [dict(monitor_kwargs)]
        if (Trainer, '__init__') not in _LIVE:
            _state.patch(Trainer, '__init__', _make_trainer_init, live=_LIVE, detached=_DETACHED)


def attaching() -> Optional[dict[str, Any]]:
    """The monitor arguments :func:`attach_to_every_trainer` uses, or ``None`` when it is not attaching."""
    return dict(_ATTACH[0]) if _ATTACH else None


def unwatch() -> None:
    """Undo :func:`watch` and :func:`attach_to_every_trainer` (DataSpecs already noted stay noted)."""
    with _state.STATE.lock:
        _ATTACH.clear()
        _state.restore_all(live=_LIVE, detached=_DETACHED, who='compatshim.monitor.unwatch()')


def watching() -> tuple[str, ...]:
    """Dotted names of what the watch has wrapped (``DataSpec.__init__``, and ``Trainer.__init__`` when attaching)."""
    return tuple(record.label for record in _LIVE.values())
