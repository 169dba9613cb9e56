"""The monitor's watch: observe-only patches of ``DataSpec`` and of the Trainer's loops, in a patch set of their own.

* ``__init__``: after Composer (and the shim, if it is on) built the DataSpec, it writes down which transform
  arguments the DataSpec was given (:func:`compatshim.observe.slots.note`), so that the monitor can tell a transform
  Composer dropped (0.27–0.28) from one never given.
* the trainer's reads of its transform hooks (``__getattribute__``, :func:`~compatshim.shim.data_spec.make_lookup`,
  up to 0.26; on 0.27+ a descriptor per hook name, :class:`~compatshim.shim.data_spec.HookName`, as the shim's, and the
  lookup too once a subclass defines a hook name itself): while the shim is off, a read of a transform by Composer's
  trainer, on a DataSpec the monitor taps, gets the transform called through its tap
  (:func:`compatshim.shim.notes.tapped`). Every other read — the user's own above all — gets what Python gives:
  the monitor never changes what ``spec.device_transforms`` reads. (With the shim on, the shim's hooks call every
  transform through the taps themselves.)
* the Trainer's train, eval and predict loops: each opens a loop frame naming its DataSpec
  (:func:`compatshim.shim.loops.instrument`, as the shim's patches do), where the monitor finds the running DataSpec.

It changes no argument and no attribute of Composer's. Its patch set (:data:`WATCH`, ``STATE.watch``) is its own, as
an OpenTelemetry instrumentor's are: ``compatshim.disable()`` leaves it alone (the monitor is how you see that the
shim is off) and ``compatshim.status()`` does not list it.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from compatshim.config.support import HOOKS, Family, family_of, installed
from compatshim.observe.slots import note
from compatshim.shim import loops, notes, patching
from compatshim.shim.data_spec import HookName, given, lookups, make_lookup, own_hook_names
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
            note(self, given(signature, args, kwargs))
            if type(self) is not record.owner and own_hook_names(type(self), record.owner, HOOKS[Family.REJECTED]):
                _look_up(record.owner)  # its class hides the descriptors: the lookup sees its reads

    return __init__


def _look_up(data_spec_cls: type) -> None:
    """The watch's ``__getattribute__`` on ``DataSpec`` (once)."""
    with STATE.lock:
        if (data_spec_cls, '__getattribute__') not in WATCH:
            lookup = functools.partial(make_lookup, names=notes.TRANSFORM_NAMES, serve=notes.tapped)
            WATCH.patch(data_spec_cls, '__getattribute__', lookup)


def _takes_batch_transforms(data_spec_cls: type) -> bool:
    """Whether ``DataSpec`` takes 0.27+'s arguments (for a release the support table does not name)."""
    return 'batch_transforms' in inspect.signature(vars(data_spec_cls)['__init__']).parameters


def watch() -> None:
    """Note every ``DataSpec`` built from now on, tap the trainer's reads and frame its loops (idempotent). Imports
    Composer."""
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    with STATE.lock:
        if (DataSpec, '__init__') not in WATCH:
            WATCH.patch(DataSpec, '__init__', _make_init)
            version = installed('mosaicml')
            family = family_of(version) if version else None
            if family is None:  # 0.24.1, or a release outside the table: read from DataSpec's arguments
                family = Family.REJECTED if _takes_batch_transforms(DataSpec) else Family.HOST
            for name in lookups(family):  # what serves the trainer's reads, as for the shim
                if name == '__getattribute__':
                    _look_up(DataSpec)
                else:
                    WATCH.patch(DataSpec, name, functools.partial(HookName, name=name, serve=notes.tapped))
            loops.instrument(Trainer, WATCH)


def unwatch() -> None:
    """Undo :func:`watch` (DataSpecs already noted stay noted)."""
    with STATE.lock:
        WATCH.restore_all()
