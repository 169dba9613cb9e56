"""The monitor's watch: observe-only patches of ``DataSpec`` and of the Trainer's loops, in a patch set of their own.

* ``__init__``: after Composer (and the shim, if it is on) built the DataSpec, it writes down which transform
  arguments the DataSpec was given (:func:`compatshim.observe.slots.note`), so that the monitor can tell a transform
  Composer dropped (0.27–0.28) from one never given.
* the Trainer's train, eval and predict loops: each opens a loop frame naming its DataSpec
  (:func:`compatshim.shim.loops.instrument`, as the shim's patches do), where the monitor finds the running DataSpec,
  and, as for the shim, makes the trainer's binding of it the loop's view
  (:func:`compatshim.shim.data_spec.view_of`). While the shim is off, the view's hook names give what Python gives on
  the DataSpec, called through the monitor's tap where it has one (:func:`compatshim.shim.notes.tapped`). Every other
  read — the user's own above all — is Python's own: the monitor never changes what ``spec.device_transforms``
  reads, and puts no lookup on ``DataSpec``. (With the shim on, the shim's hooks call every transform through the
  taps themselves.)

It changes no argument and no attribute of Composer's. Its patch set (:data:`WATCH`, ``STATE.watch``) is its own, as
an OpenTelemetry instrumentor's are: ``compatshim.disable()`` leaves it alone (the monitor is how you see that the
shim is off) and ``compatshim.status()`` does not list it.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from compatshim.config.support import Family, family_of, installed
from compatshim.observe.slots import note
from compatshim.shim import data_spec, loops, patching
from compatshim.shim.registry import STATE

__all__ = ['WATCH', 'unwatch', 'watch']

#: The watch's patches (``DataSpec.__init__`` and the hook names' lookup, the loops), kept in the process state.
WATCH = STATE.watch


def _make_init(original: Callable[..., None], record: patching.Patch) -> Callable[..., None]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        record.original(self, *args, **kwargs)
        if record.active:
            note(self, data_spec.given(signature, args, kwargs))

    return __init__


def _takes_batch_transforms(data_spec_cls: type) -> bool:
    """Whether ``DataSpec`` takes 0.27+'s arguments (for a release the support table does not name)."""
    return 'batch_transforms' in inspect.signature(vars(data_spec_cls)['__init__']).parameters


def watch() -> None:
    """Note every ``DataSpec`` built from now on, and frame the Trainer's loops, whose reads of their DataSpec's
    transforms go through its view (idempotent). Imports Composer."""
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    with STATE.lock:
        if (DataSpec, '__init__') not in WATCH:
            WATCH.patch(DataSpec, '__init__', _make_init)
            version = installed('mosaicml')
            family = family_of(version) if version else None
            if family is None:  # 0.24.1, or a release outside the table: read from DataSpec's arguments
                family = Family.REJECTED if _takes_batch_transforms(DataSpec) else Family.HOST
            loops.instrument(Trainer, WATCH, functools.partial(data_spec.view_of, family=family))


def unwatch() -> None:
    """Undo :func:`watch` (DataSpecs already noted stay noted)."""
    with STATE.lock:
        WATCH.restore_all()
