"""``TransformMonitor``: a Composer callback that shows, in your own run, where the data transforms ran.

It logs, per step and dataloader label, where each transform a DataSpec was given saw its input, its calls, their
time, the bytes moved to the device and the wait for data, and a summary at the end of each fit, eval and predict (the
keys: docs/monitor.md; the recorder and its policy: :mod:`compatshim.observe.steps`). It never makes the host wait for
the device, never reads tensor data and makes no collective call. Importing this module arms the observe-only watch of
``DataSpec.__init__`` (:func:`compatshim.observe.watch.watch`). Imports Composer.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import warnings
from typing import Any, Callable, Optional

from composer.core import Callback, State
from composer.loggers import Logger
from composer.utils import dist

from compatshim.config import settings
from compatshim.config.support import Family, family_of, installed
from compatshim.devices.accelerator import of_device
from compatshim.errors import CompatShimWarning, TransformPlacementError
from compatshim.observe import recorder as _recorder
from compatshim.observe import slots as view
from compatshim.observe import steps as _steps
from compatshim.observe.placement import Placement
from compatshim.observe.slots import Fate, Slot
from compatshim.observe.steps import Summary, Target, TransformSummary
from compatshim.observe.watch import unwatch as _unwatch_dataspecs
from compatshim.observe.watch import watch
from compatshim.shim import loops, patching
from compatshim.shim.notes import spec_name
from compatshim.shim.registry import STATE

__all__ = [
    'Summary',
    'TransformMonitor',
    'TransformSummary',
    'attach_to_every_trainer',
    'run_record',
    'unwatch',
    'watch',
]

log = logging.getLogger(__name__)


class _Watched:
    """A DataSpec this monitor watches: the transforms it holds (as it held them when tapped) and their taps."""

    def __init__(self, spec: Any, slots: list[Slot], make_tap: Callable[[], Any]) -> None:
        self.spec, self.spec_name, self.slots = spec, spec_name(spec), tuple(slots)
        self.targets = [Target(slot, None if slot.fate is Fate.DROPPED else make_tap()) for slot in slots]
        for target in self.targets:
            if target.tap is not None:
                view.tap(spec, target.slot.name, target.tap)
        #: The tap of its device_transforms (``None``: none held, or nothing will call it).
        self.device_tap = next((t.tap for t in self.targets if t.slot.name == 'device_transforms'), None)

    def remove(self) -> None:
        for target in self.targets:
            view.untap(self.spec, target.slot.name, target.tap)

    def is_current(self, spec: Any) -> bool:
        """Whether this is ``spec`` holding what it held when tapped (nothing assigned that changes a fate since)."""
        return self.spec is spec and self.slots == tuple(view.slots(spec))


def _drops_the_argument() -> bool:
    """Whether Composer here drops a ``device_transforms`` argument without a trace (0.27–0.28, the shim off)."""
    version = installed('mosaicml')
    return not STATE.active and version is not None and family_of(version) is Family.DROPPED


def _label(state: State) -> str:
    return state.dataloader_label or 'eval'


class TransformMonitor(Callback):
    """Logs, per step and dataloader label, where each data transform ran, its calls, its time and the bytes moved.

    Args:
        log_interval: Log the per-step metrics every this many steps of a label (the summaries count every step).
        strict: Raise :class:`~compatshim.errors.TransformPlacementError`, on an accelerator, as soon as a
            ``device_transforms`` is known to be dropped or to run on the host, instead of warning.

    It knows the DataSpecs built after ``compatshim.monitor`` was imported (or while the shim was on), wherever the
    monitor itself is created.
    ``compatshim run --monitor`` attaches one to every Trainer of the run, with nothing to edit.
    """

    #: Print each summary line to stderr unless the ``compatshim.monitor`` logger is at INFO with a handler: those that
    #: :func:`attach_to_every_trainer` adds (``compatshim run --monitor``), which no script configured.
    _echo = False

    def __init__(self, log_interval: int = 1, strict: bool = False) -> None:
        if isinstance(log_interval, bool) or not isinstance(log_interval, int) or log_interval < 1:
            raise ValueError(f'TransformMonitor: log_interval must be an int >= 1, got {log_interval!r}')
        if not isinstance(strict, bool):
            raise ValueError(f'TransformMonitor: strict must be True or False, got {strict!r}')
        super().__init__()
        self.log_interval, self.strict = log_interval, strict
        watch()
        self.composer = installed('mosaicml')
        #: One summary per fit, eval and predict, in order (``summary.line``: as logged).
        self.summaries: list[Summary] = []
        self._steps = _steps.Steps()  # the recorder: the host wall clock, and the transforms' (``transform_clock``)
        self._accelerator = False
        self._watched: dict[int, _Watched] = {}
        self._reading: Optional[_Watched] = None  # the DataSpec the open step reads
        self._warned: set[int] = set()
        self._blind: set[str] = set()
        self._current: dict[str, Optional[_Watched]] = {}  # by label, while its loop runs

    def init(self, state: State, logger: Logger) -> None:
        on = of_device(state.device)
        # Placement is said, and warned of, only where it can be seen (not on plain DeviceCPU).
        self._accelerator = self._steps.observable = on.observes(state.device)
        self._steps.transform_clock = _recorder.clock_for(on)
        self._steps.counter.install(state.device)
        logger.log_hyperparameters(run_record(strict=self.strict))

    def fit_start(self, state: State, logger: Logger) -> None:
        self._loop_start('train')
        self._watch(state, 'train')  # a dropped transform is known now, before the first batch

    def before_dataloader(self, state: State, logger: Logger) -> None:
        self._begin(state, 'train')

    def after_dataloader(self, state: State, logger: Logger) -> None:
        self._reached('train')

    def before_forward(self, state: State, logger: Logger) -> None:
        self._check_early('train')

    def batch_end(self, state: State, logger: Logger) -> None:
        self._end(logger, int(state.timestamp.batch))

    def fit_end(self, state: State, logger: Logger) -> None:
        self._loop_end('train', logger)

    def eval_start(self, state: State, logger: Logger) -> None:
        self._loop_start(_label(state))
        self._begin(state, _label(state))

    def eval_batch_start(self, state: State, logger: Logger) -> None:
        self._reached(_label(state))

    def eval_before_forward(self, state: State, logger: Logger) -> None:
        self._check_early(_label(state))

    def eval_batch_end(self, state: State, logger: Logger) -> None:
        self._end(logger, int(state.eval_timestamp.batch))
        self._begin(state, _label(state))  # the next batch is transformed before its start event

    def eval_end(self, state: State, logger: Logger) -> None:
        self._loop_end(_label(state), logger)

    def predict_start(self, state: State, logger: Logger) -> None:
        self._loop_start('predict')
        self._begin(state, 'predict')

    def predict_batch_start(self, state: State, logger: Logger) -> None:
        self._reached('predict')

    def predict_batch_end(self, state: State, logger: Logger) -> None:
        self._end(logger, int(state.predict_timestamp.batch))
        self._begin(state, 'predict')

    def predict_end(self, state: State, logger: Logger) -> None:
        self._loop_end('predict', logger)

    def close(self, state: State, logger: Logger) -> None:
        self._steps.counter.remove()
        for watched in self._watched.values():
            watched.remove()
        self._watched.clear()

    def state_dict(self) -> dict[str, Any]:
        return {'steps_in_all': dict(self._steps.steps_in_all)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for label, steps in state.get('steps_in_all', {}).items():
            self._steps.steps_in_all[label] += int(steps)

    def _watch(self, state: State, label: str) -> Optional[_Watched]:
        """The running loop's DataSpec (its loop frame names it), found and tapped once per loop: what it is known to
        do is said then. ``None`` where there is no frame, or where the DataSpec was built unseen on a release that
        drops ``device_transforms`` (what it was given left no trace)."""
        frame = loops.current_frame()
        spec = None if frame is None else frame.spec
        cached = self._current.get(label)
        if label in self._current and (cached is None or cached.spec is spec):
            return cached
        if frame is not None and spec is None:  # predict over a plain dataloader: Composer's bare DataSpec
            watched = None
        else:
            unseen = spec is None or (not view.noted(spec) and _drops_the_argument())
            watched = self._watch_found(None if unseen else spec, label, framed=frame is not None)
        self._current[label] = watched
        return watched

    def _watch_found(self, spec: Optional[Any], label: str, framed: bool = True) -> Optional[_Watched]:
        if spec is None:
            if label not in self._blind:
                self._blind.add(label)
                self._say(_steps.unseen_warning(label, self.strict, framed))
            return None
        watched = self._watched.get(id(spec))
        if watched is None or not watched.is_current(spec):
            if watched is not None:
                watched.remove()
            watched = self._watched[id(spec)] = _Watched(spec, view.slots(spec), self._steps.tap)
            slot = next((s for s in watched.slots if s.name == 'device_transforms'), None)
            if slot is not None and slot.fate is Fate.DROPPED:
                self._complain(watched, Placement.NEVER_CALLED, label)
        return watched

    def _loop_start(self, label: str) -> None:
        """A loop of ``label`` starts: what a loop of it that raised (never reaching its end event) left goes."""
        self._current.pop(label, None)
        self._steps.restart(label)

    def _begin(self, state: State, label: str) -> None:
        watched = self._reading = self._watch(state, label)
        self._steps.begin(label, [] if watched is None else watched.targets)

    def _reached(self, label: str) -> None:
        self._steps.reached()
        self._check_early(label)

    def _check_early(self, label: str) -> None:
        """Right after the batch-level transforms (and before each forward): a device_transforms that saw its batch on
        the host is said now, before the model gets it."""
        watched = self._reading
        if watched is None or watched.device_tap is None or not self._accelerator or id(watched.spec) in self._warned:
            return
        problem = _steps.early_problem(watched.device_tap.window.places)
        if problem is not None:
            self._complain(watched, problem, label)

    def _end(self, logger: Logger, step: int) -> None:
        watched, self._reading = self._reading, None
        ended = self._steps.end(step)
        if ended is None:
            return
        if ended.count % self.log_interval == 0:
            logger.log_metrics(ended.metrics)
        self._read_late(logger)
        where = ended.where.get('device_transforms')
        if watched is not None and self._accelerator and where is not None and where != Placement.DEVICE:
            self._complain(watched, where, ended.label)

    def _read_late(self, logger: Logger, final: bool = False) -> None:
        for timed in self._steps.collect(final):
            logger.log_metrics({f'data/{timed.label}/{timed.name}/time_ms': timed.ms}, step=timed.step)

    def _loop_end(self, label: str, logger: Logger) -> None:
        self._current.pop(label, None)
        self._steps.drop()
        self._reading = None
        self._read_late(logger, final=True)
        summary = self._steps.summary(label, self.composer, int(dist.get_global_rank()), STATE.stage)
        if summary is not None:
            logger.log_metrics(_steps.summary_metrics(summary))
            logger.log_traces({f'data/{label}/summary': summary.line})
            self.summaries.append(summary)
            log.info(summary.line)
            if self._echo and not (log.isEnabledFor(logging.INFO) and log.hasHandlers()):  # no script set logging up
                print(summary.line, file=sys.stderr, flush=True)

    def _complain(self, watched: _Watched, where: Placement, label: str) -> None:
        if id(watched.spec) not in self._warned or self.strict:
            self._warned.add(id(watched.spec))
            on = {'kill_switch': settings.kill_switch_on(), 'shim_on': STATE.active}
            self._say(_steps.placement_warning(where, watched.spec_name, label, self.composer, **on))

    def _say(self, message: str) -> None:
        if self.strict:
            raise TransformPlacementError(message)
        warnings.warn(message, CompatShimWarning, stacklevel=4)


#: The monitor's own patch set (``Trainer.__init__``, while attaching to every Trainer of the run), in the process
#: state; the arguments of the monitor it adds are ``STATE.attach``.
ATTACHING = STATE.attaching


def _make_trainer_init(original: Callable[..., None], record: patching.Patch) -> Callable[..., None]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = patching.bound(signature, self, *args, **kwargs) if record.active else None
        if bound is None:  # switched off; or a call that does not bind: Composer reports its own argument error
            record.original(self, *args, **kwargs)
            return
        callbacks = bound.arguments.get('callbacks')
        listed = [] if callbacks is None else [callbacks] if not isinstance(callbacks, (list, tuple)) else callbacks
        if not any(isinstance(cb, TransformMonitor) for cb in listed):
            added = TransformMonitor(**STATE.attach)
            added._echo = True
            bound.arguments['callbacks'] = [*listed, added]
        record.original(*bound.args, **bound.kwargs)

    return __init__


def attach_to_every_trainer(**monitor_kwargs: Any) -> None:
    """Watch, and give every ``Trainer`` built from now on a ``TransformMonitor(**monitor_kwargs)`` (unless its
    callbacks already hold one). Idempotent; a second call changes the monitor's arguments."""
    from composer.trainer.trainer import Trainer

    watch()
    with STATE.lock:
        STATE.attach = dict(monitor_kwargs)
        if (Trainer, '__init__') not in ATTACHING:
            ATTACHING.patch(Trainer, '__init__', _make_trainer_init)


def unwatch() -> None:
    """Undo :func:`watch` and :func:`attach_to_every_trainer` (DataSpecs already noted stay noted)."""
    with STATE.lock:
        STATE.attach = {}
        ATTACHING.restore_all()
        _unwatch_dataspecs()


def run_record(strict: bool = False) -> dict[str, Any]:
    """compatshim's state in this process, as the hyperparameters :class:`TransformMonitor` logs once per run (at the
    Trainer's ``INIT``, through ``logger.log_hyperparameters``), so that every logger of the run keeps it beside the
    run's own; every value a string or a bool (the keys: docs/monitor.md)."""
    from compatshim._version import __version__
    from compatshim.shim.status import status

    shim = status()
    return {
        'compatshim/version': __version__,
        'compatshim/composer': shim.composer_version or 'not installed',
        'compatshim/family': shim.family or 'none',
        'compatshim/verdict': shim.verdict.value,
        'compatshim/stage': shim.stage or 'off',
        'compatshim/patched': ', '.join(shim.patches) or 'nothing',
        'compatshim/enabled_by': shim.enabled_by or 'nothing',
        'compatshim/monitor_strict': strict,
    }


watch()  # importing the monitor is the opt-in: DataSpecs built from here on are known to it
# compatshim run's hook fired inside this module's own import of Composer (compatshim._start, which imports this
# module when it can, left the monitor's arguments for the end of this import).
if STATE.pending is not None:
    attach_to_every_trainer(**STATE.pending)
    STATE.pending = None
