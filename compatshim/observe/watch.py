"""The monitor's watch: an observe-only wrapper of ``DataSpec.__init__``, in a patch set of its own.

After Composer (and the shim, if it is on) built the DataSpec, it notes which transforms the DataSpec was given and
where Composer keeps each (:func:`compatshim.shim.notes.composer_slots`), so that the monitor can tell a transform
never called from one never given; it changes no argument and no attribute of Composer's (the note is one attribute of
its own on the DataSpec, ``_compatshim_note``, so that it lives and dies with it). Its patch set (:data:`WATCH`) is its
own, as an OpenTelemetry instrumentor's are: ``compatshim.disable()`` leaves it alone (the monitor is how you see that
the shim is off) and ``compatshim.status()`` does not list it.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from compatshim.shim import notes as _dataspecs
from compatshim.shim import patching
from compatshim.shim.data_spec import given
from compatshim.shim.registry import STATE

__all__ = ['WATCH', 'unwatch', 'watch']

#: The watch's patches (``DataSpec.__init__``).
WATCH = patching.PatchSet('compatshim.monitor.unwatch()')


def _make_init(original: Callable[..., None], record: patching.Patch) -> Callable[..., None]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        record.original(self, *args, **kwargs)
        if record.active:
            _dataspecs.note(self, _dataspecs.composer_slots(self, given(signature, args, kwargs)))

    return __init__


def watch() -> None:
    """Note every ``DataSpec`` built from now on (idempotent). Imports Composer."""
    from composer.core.data_spec import DataSpec

    with STATE.lock:
        if (DataSpec, '__init__') not in WATCH:
            WATCH.patch(DataSpec, '__init__', _make_init)


def unwatch() -> None:
    """Undo :func:`watch` (DataSpecs already noted stay noted)."""
    with STATE.lock:
        WATCH.restore_all()
