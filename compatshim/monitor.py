"""``TransformMonitor``: a Composer callback that shows, in your own run, where the data transforms ran.

Per step and per dataloader label (``train``, each evaluator's label, ``predict``), for every transform a DataSpec was
given — ``device_transforms`` (with or without the shim) and, on Composer 0.27+, its own ``batch_transforms`` and
``microbatch_transforms`` — it logs where the transform's input was, how many calls a step made, how long they took,
and the bytes that crossed host → device through the trainer's ``Device``, by dtype::

    from composer import Trainer
    from compatshim.monitor import TransformMonitor

    monitor = TransformMonitor()          # the import above is what lets it see the DataSpecs built after it
    trainer = Trainer(..., callbacks=[monitor])

Keys (``logger.log_metrics``, every ``log_interval`` steps; ``LABEL`` is the dataloader label, ``NAME`` the
transform's argument name):

- ``data/LABEL/NAME/calls``: calls in the step (1 at stage batch; one per microbatch at stage microbatch; 0: never
  called);
- ``data/LABEL/NAME/on_device``: the share of those calls whose input was on the accelerator (1.0: device, 0.0: host);
- ``data/LABEL/NAME/time_ms``: the calls' time: on cuda (and mps, where torch has timing events) device time from
  events read once they have completed — typically a step later, logged at the step they belong to, never by waiting
  for the device; elsewhere this process's CPU time;
- ``data/LABEL/bytes_to_device`` and ``data/LABEL/bytes_to_device/DTYPE``: what the trainer's device moved from the
  host in that step;
- ``data/LABEL/wait_ms`` and ``data/LABEL/wait_share``: how long the trainer waited for the dataloader's fetch (host
  wall time from asking for the batch until it reached the trainer, less the batch-level transforms and moves in that
  time), and that as a share of the step's host wall time. A share far above a few percent means the accelerator
  waits for data.

At the end of each fit, eval and predict a summary: ``data/LABEL/NAME/total_calls``, ``.../median_calls``,
``.../median_time_ms``, ``data/LABEL/median_bytes_to_device``, ``data/LABEL/median_wait_ms``,
``data/LABEL/median_wait_share``, ``data/LABEL/steps``, and one line of text (logged as
a trace ``data/LABEL/summary``, through the ``compatshim.monitor`` logger, and kept, with its figures, in
:attr:`TransformMonitor.summaries`).

On an accelerator, a ``device_transforms`` that will never be called, or whose input was on the host, gives one
:class:`~compatshim.errors.CompatShimWarning` per DataSpec naming it, the release and the fix, as soon as that is
known — before the first forward, which a dropped normalisation may crash: a dropped one when its loop starts
(``fit``, each evaluator, ``predict``), one on the host right after its first call (after the dataloader). With
``strict=True`` that event raises :class:`~compatshim.errors.TransformPlacementError` instead. With the shim working,
nothing is warned. Every rank logs its own figures; the monitor makes no collective call.

It never asks the device to finish per step and never reads tensor data (placement and bytes come from tensor
metadata). It knows each DataSpec from the note taken when it was built (:mod:`compatshim._dataspecs`: by the shim,
which knows where it put the transform, or by the watch). Importing this module (and creating a monitor) arms the watch
(:func:`compatshim.patches.watch.watch`), an observe-only wrapper of ``DataSpec.__init__`` that changes nothing
Composer does: DataSpecs built from then on are known to the monitor, also where Composer drops an argument — so
``Trainer(train_dataloader=DataSpec(...), callbacks=[TransformMonitor()])`` works, though it builds the DataSpec first.
:func:`unwatch` takes it off. This module imports Composer.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import logging
import statistics
import time
import warnings
from typing import Any, Callable, Optional

from composer.core import Callback, State
from composer.loggers import Logger

from compatshim import _dataspecs, _patching, _recorder, _settings
from compatshim._dataspecs import Fate, Note, Slot
from compatshim._recorder import MoveCounter, Tap
from compatshim._state import STATE
from compatshim._support import AFFECTED, UNAFFECTED, family_of, installed
from compatshim.errors import CompatShimWarning, TransformPlacementError
from compatshim.patches.watch import unwatch as _unwatch_dataspecs
from compatshim.patches.watch import watch

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

#: Steps kept per label and transform for the medians of a summary (the totals count every step).
KEEP_STEPS = 4096


@dataclasses.dataclass(eq=False)
class _Target:
    """One transform of one watched DataSpec: its slot, and its tap (``None``: nothing will ever call it)."""

    slot: Slot
    tap: Optional[Tap]


class _Watched:
    """A DataSpec this monitor watches: its note, the taps it put in every slot, and how to take them off."""

    def __init__(self, spec: Any, note: Note, clock: Any) -> None:
        self.spec, self.spec_name = spec, note.spec_name
        self.targets: list[_Target] = []
        self._swaps: list[_patching.Swap] = []
        for slot in note.slots.values():
            tap, swaps = _dataspecs.tap(slot, lambda transform: Tap(transform, clock))
            self.targets.append(_Target(slot, tap))
            self._swaps += swaps

    def device_transforms(self) -> Optional[_Target]:
        return next((t for t in self.targets if t.slot.name == 'device_transforms'), None)

    def remove(self) -> None:
        for done in reversed(self._swaps):
            done.undo()
        self._swaps.clear()


def _recent() -> collections.deque[Any]:
    return collections.deque(maxlen=KEEP_STEPS)


@dataclasses.dataclass
class _Series:
    """One transform of one loop: its slot, its per-step calls and times, and every call's placement."""

    slot: Slot
    calls: collections.deque[int] = dataclasses.field(default_factory=_recent)
    ms: collections.deque[float] = dataclasses.field(default_factory=_recent)
    places: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


@dataclasses.dataclass
class _Loop:
    """One fit, eval or predict of one label, until its summary: its steps, the bytes each moved, its transforms."""

    steps: int = 0
    bytes: collections.deque[int] = dataclasses.field(default_factory=_recent)
    dtypes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    transforms: dict[str, _Series] = dataclasses.field(default_factory=dict)
    #: Per step: seconds the trainer waited for the dataloader, and that as a share of the step (host wall time).
    waits: collections.deque[float] = dataclasses.field(default_factory=_recent)
    shares: collections.deque[float] = dataclasses.field(default_factory=_recent)


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
        self._counter = MoveCounter()
        self._clock: Any = _recorder.clock_for('cpu')
        self._accelerator = False
        self._watched: dict[int, _Watched] = {}
        self._open: Optional[tuple[str, Optional[_Watched]]] = None
        #: The open window's device_transforms tap, while its placement is still to be checked this early.
        self._early: Optional[tuple[_Watched, Tap]] = None
        #: When the open window began (host wall clock), and how long it waited for data (once the batch arrived).
        self._since = 0.0
        self._wait: Optional[float] = None
        self._loops: dict[str, _Loop] = {}
        #: Steps per label over every run this monitor's state has seen (a checkpoint's included): ``state_dict``.
        self._steps_in_all: dict[str, int] = {}
        self._window = 0
        self._late: dict[int, tuple[str, str, int]] = {}  # window id -> (label, transform, step), event clocks only
        self._warned: set[int] = set()
        self._blind: set[str] = set()

    # --- Composer events ----------------------------------------------------------------------------------------------

    def init(self, state: State, logger: Logger) -> None:
        device = state.device
        name = getattr(device, 'name', 'cpu')
        self._accelerator = name != 'cpu'
        self._clock = _recorder.clock_for({'gpu': 'cuda', 'mps': 'mps'}.get(name, 'cpu'))
        self._counter.install(device)
        logger.log_hyperparameters(run_record(strict=self.strict))

    def fit_start(self, state: State, logger: Logger) -> None:
        self._watch(state, 'train')  # a dropped transform is known now, before the first batch

    def before_dataloader(self, state: State, logger: Logger) -> None:
        self._begin(state, 'train')

    def after_dataloader(self, state: State, logger: Logger) -> None:
        self._reached('train')

    def before_forward(self, state: State, logger: Logger) -> None:
        self._check_early('train')

    def batch_end(self, state: State, logger: Logger) -> None:
        self._end(state, logger, int(state.timestamp.batch))

    def fit_end(self, state: State, logger: Logger) -> None:
        self._summarize('train', logger)

    def eval_start(self, state: State, logger: Logger) -> None:
        self._begin(state, state.dataloader_label or 'eval')

    def eval_batch_start(self, state: State, logger: Logger) -> None:
        self._reached(state.dataloader_label or 'eval')

    def eval_before_forward(self, state: State, logger: Logger) -> None:
        self._check_early(state.dataloader_label or 'eval')

    def eval_batch_end(self, state: State, logger: Logger) -> None:
        self._end(state, logger, int(state.eval_timestamp.batch))
        self._begin(state, state.dataloader_label or 'eval')  # the next batch is transformed before its start event

    def eval_end(self, state: State, logger: Logger) -> None:
        self._open = self._early = None
        self._summarize(state.dataloader_label or 'eval', logger)

    def predict_start(self, state: State, logger: Logger) -> None:
        self._begin(state, 'predict')

    def predict_batch_start(self, state: State, logger: Logger) -> None:
        self._reached('predict')

    def predict_batch_end(self, state: State, logger: Logger) -> None:
        self._end(state, logger, int(state.predict_timestamp.batch))
        self._begin(state, 'predict')

    def predict_end(self, state: State, logger: Logger) -> None:
        self._open = self._early = None
        self._summarize('predict', logger)

    def close(self, state: State, logger: Logger) -> None:
        self._counter.remove()
        for watched in self._watched.values():
            watched.remove()
        self._watched.clear()

    def state_dict(self) -> dict[str, Any]:
        return {'steps_in_all': dict(self._steps_in_all)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for label, steps in state.get('steps_in_all', {}).items():
            self._steps_in_all[label] = self._steps_in_all.get(label, 0) + int(steps)

    # --- which DataSpec, and its taps ---------------------------------------------------------------------------------

    def _find(self, state: State, label: str) -> Optional[tuple[Any, Note]]:
        """The running dataloader's DataSpec and its note: noted when it was built, or, for an evaluator built before
        any watch, what it visibly holds."""
        loader = state.dataloader
        found = _dataspecs.find(loader)
        if found is not None or label in ('train', 'predict'):
            return found
        specs = [e.dataloader for e in getattr(state, 'evaluators', []) or [] if e.label == label]
        if not specs or getattr(specs[0], 'dataloader', None) is not loader:
            return None
        spec = specs[0]
        return spec, Note(lambda: spec, _dataspecs.spec_name(spec), {s.name: s for s in _dataspecs.held_slots(spec)})

    def _watch(self, state: State, label: str) -> Optional[_Watched]:
        """The running DataSpec, tapped (once per DataSpec): what it is known to do is said then."""
        found = self._find(state, label)
        if found is None:
            self._cannot_see(label)
            return None
        spec, note = found
        watched = self._watched.get(id(spec))
        if watched is None or watched.spec is not spec:
            watched = self._watched[id(spec)] = _Watched(spec, note, self._clock)
            target = watched.device_transforms()
            if target is not None and target.slot.fate is Fate.DROPPED:
                self._complain(watched, 'never called', label)
        return watched

    def _cannot_see(self, label: str) -> None:
        if label in self._blind:
            return
        self._blind.add(label)
        message = (
            f"compatshim TransformMonitor: cannot see the transforms of the '{label}' dataloader: its DataSpec was "
            'built before compatshim.monitor was imported and while the shim was off. Import compatshim.monitor (or '
            'call compatshim.enable()) before building DataSpecs, or start the run with compatshim run --monitor.'
        )
        if self.strict:
            raise TransformPlacementError(message + ' (strict: a transform it cannot see is not verified)')
        warnings.warn(message + ' Only the bytes moved are reported for it.', CompatShimWarning, stacklevel=3)

    # --- windows ------------------------------------------------------------------------------------------------------

    def _begin(self, state: State, label: str) -> None:
        watched = self._watch(state, label)
        self._window += 1
        for target in [] if watched is None else watched.targets:
            if target.tap is not None:
                target.tap.take(self._window)
        self._counter.take()
        self._open, self._early = (label, watched), None
        self._since, self._wait = time.perf_counter(), None
        if watched is None or not self._accelerator or id(watched.spec) in self._warned:
            return
        device_transforms = watched.device_transforms()
        if device_transforms is not None and device_transforms.tap is not None:
            self._early = (watched, device_transforms.tap)

    def _reached(self, label: str) -> None:
        """The batch has reached the trainer (its batch-level transforms ran): how long the trainer waited for it, then
        the early check of where the transform saw it."""
        if self._wait is None:
            self._wait = self._fetched()
        self._check_early(label)

    def _fetched(self) -> float:
        """Host seconds the window has waited for the dataloader so far: its elapsed wall time less what it spent
        inside the transforms the monitor taps and the device's moves (the batch-level work that follows the fetch)."""
        watched = None if self._open is None else self._open[1]
        busy = sum(t.tap.window.wall for t in ([] if watched is None else watched.targets) if t.tap is not None)
        return max(0.0, time.perf_counter() - self._since - busy - self._counter.wall)

    def _check_early(self, label: str) -> None:
        """Right after the batch-level transforms ran (and before each forward): a device_transforms that saw its
        batch on the host is said now, before the model gets it."""
        if self._early is None:
            return
        watched, tap = self._early
        places = tap.window.places
        if places['host'] or places['mixed']:
            self._early = None
            self._complain(watched, 'host' if places['host'] else 'mixed', label)

    def _end(self, state: State, logger: Logger, step: int) -> None:
        if self._open is None:
            return
        label, watched = self._open
        wait = self._fetched() if self._wait is None else self._wait
        elapsed = time.perf_counter() - self._since  # the step's host wall time (``step`` is its number)
        self._open = self._early = None
        loop = self._loops.setdefault(label, _Loop())
        metrics: dict[str, float] = {}
        problem: Optional[str] = None
        for target in [] if watched is None else watched.targets:
            name = target.slot.name
            window = target.tap.take(0) if target.tap is not None else _recorder.Window()
            one = loop.transforms.setdefault(name, _Series(target.slot))
            one.calls.append(window.calls)
            one.places.update(window.places)
            key = f'data/{label}/{name}'
            metrics[f'{key}/calls'] = window.calls
            if window.calls:
                metrics[f'{key}/on_device'] = window.places['device'] / window.calls
            if window.timed_later:
                self._late[window.id] = (label, name, step)
            else:
                one.ms.append(window.seconds * 1e3)
                if window.calls:
                    metrics[f'{key}/time_ms'] = window.seconds * 1e3
            if name == 'device_transforms' and self._accelerator and window.where != 'device':
                problem = window.where
        moved = self._counter.take()
        total = sum(moved.values())
        loop.steps += 1
        loop.bytes.append(total)
        loop.dtypes.update(moved)
        self._steps_in_all[label] = self._steps_in_all.get(label, 0) + 1
        loop.waits.append(wait)
        loop.shares.append(wait / elapsed if elapsed > 0 else 0.0)
        metrics[f'data/{label}/wait_ms'] = wait * 1e3
        metrics[f'data/{label}/wait_share'] = loop.shares[-1]
        metrics[f'data/{label}/bytes_to_device'] = total
        metrics.update({f'data/{label}/bytes_to_device/{dtype}': n for dtype, n in moved.items() if n})
        if loop.steps % self.log_interval == 0:
            logger.log_metrics(metrics)
        self._read_late(logger)
        if problem is not None and watched is not None:
            self._complain(watched, problem, label)

    def _read_late(self, logger: Logger, final: bool = False) -> None:
        for window_id, seconds in self._clock.collect(final):
            label, name, step = self._late.pop(window_id, (None, None, 0))
            loop = self._loops.get(label) if label is not None else None
            if loop is None or name not in loop.transforms:
                continue
            loop.transforms[name].ms.append(seconds * 1e3)
            logger.log_metrics({f'data/{label}/{name}/time_ms': seconds * 1e3}, step=step)

    # --- loud when it matters -----------------------------------------------------------------------------------------

    def _complain(self, watched: _Watched, where: str, label: str) -> None:
        if id(watched.spec) in self._warned and not self.strict:
            return
        self._warned.add(id(watched.spec))
        what = (
            f"is never called in '{label}': Composer {self.composer} drops it"
            if where == 'never called'
            else f"saw its batch on the {where} in '{label}' (Composer {self.composer}), not on the device"
        )
        message = f"compatshim: {watched.spec_name}'s device_transforms {what}. {self._fix()}"
        if self.strict:
            raise TransformPlacementError(message)
        warnings.warn(message, CompatShimWarning, stacklevel=3)

    def _fix(self) -> str:
        version = self.composer or ''
        if version in AFFECTED:
            if _settings.kill_switch_on():
                return f'{_settings.KILL_SWITCH} is set, so the shim patches nothing: unset it.'
            if STATE.active:
                return 'The shim is on, but this DataSpec was built before compatshim.enable(): build it after.'
            return (
                'Add `import compatshim; compatshim.enable()` at the top of the training script (every rank), or '
                'start the job with `compatshim run -- ...`.'
            )
        if version in UNAFFECTED:
            return 'This release runs device_transforms on the device itself: please report this run.'
        family = family_of(version) if version else None
        return (
            f'This release is outside the support table ({AFFECTED}; family by version: '
            f'{getattr(family, "value", "none")}): try enable(allow_untested=True) or compatshim run --allow-untested.'
        )

    # --- summaries ----------------------------------------------------------------------------------------------------

    def _summarize(self, label: str, logger: Logger) -> None:
        self._read_late(logger, final=True)
        loop = self._loops.pop(label, None)
        if loop is None:
            return
        transforms = {}
        for name, one in loop.transforms.items():
            calls = sum(one.calls)
            stage = one.slot.stage or (STATE.stage if one.slot.fate is Fate.PLACED else None)
            transforms[name] = TransformSummary(
                where=_recorder.summarize_places(one.places),
                calls=calls,
                calls_per_step=statistics.median(one.calls),
                ms_per_step=statistics.median(one.ms) if one.ms and calls else None,
                stage=stage,
                fate=one.slot.fate,
                ms_in_all=sum(one.ms) if one.ms and calls else None,
            )
        steps = loop.steps
        summary = Summary(
            label=label,
            composer=self.composer,
            rank=_rank(),
            steps=steps,
            steps_in_all=self._steps_in_all.get(label, steps),
            transforms=transforms,
            bytes_per_step=statistics.median(loop.bytes) if loop.bytes else 0,
            bytes_by_dtype={dtype: n // max(steps, 1) for dtype, n in loop.dtypes.most_common() if n // max(steps, 1)},
            wait_ms_per_step=statistics.median(loop.waits) * 1e3 if loop.waits else None,
            wait_share=statistics.median(loop.shares) if loop.shares else None,
        )
        metrics: dict[str, float] = {f'data/{label}/steps': steps}
        for name, transform in transforms.items():
            metrics[f'data/{label}/{name}/total_calls'] = transform.calls
            metrics[f'data/{label}/{name}/median_calls'] = transform.calls_per_step
            if transform.ms_per_step is not None:
                metrics[f'data/{label}/{name}/median_time_ms'] = transform.ms_per_step
        metrics[f'data/{label}/median_bytes_to_device'] = summary.bytes_per_step
        if summary.wait_ms_per_step is not None and summary.wait_share is not None:
            metrics[f'data/{label}/median_wait_ms'] = summary.wait_ms_per_step
            metrics[f'data/{label}/median_wait_share'] = summary.wait_share
        logger.log_metrics(metrics)
        logger.log_traces({f'data/{label}/summary': summary.line})
        self.summaries.append(summary)
        log.info(summary.line)


@dataclasses.dataclass(frozen=True)
class TransformSummary:
    """What one transform did over a fit, an eval or a predict."""

    #: ``device``, ``host``, ``mixed`` or ``never called``.
    where: str
    calls: int
    calls_per_step: float
    #: The median time per step (``None``: never called, or not timed).
    ms_per_step: Optional[float]
    #: ``batch`` or ``microbatch`` (``None``: the shim's, while the shim is off; or nothing runs it).
    stage: Optional[str]
    #: What became of it (:class:`compatshim._dataspecs.Fate`): called by Composer, before the move, dropped, placed by
    #: the shim.
    fate: Fate = Fate.CALLED
    #: The time of every step kept (the last ones of a long loop), on the same clock as ``ms_per_step``.
    ms_in_all: Optional[float] = None

    def text(self, name: str) -> str:
        stage = f'stage {self.stage}' if self.stage else 'the shim is off' if self.fate is Fate.PLACED else ''
        if not self.calls:
            how = self.fate.value + (f', {stage}' if stage and self.fate is not Fate.DROPPED else '')
            return f'{name} never called ({how})'
        per_step = f'{self.calls_per_step:g} call{"" if self.calls_per_step == 1 else "s"}/step'
        time = '' if self.ms_per_step is None else f', {self.ms_per_step:.3g} ms/step'
        return f'{name} on the {self.where}, {per_step}{time}' + (f' ({stage})' if stage else '')


@dataclasses.dataclass(frozen=True)
class Summary:
    """The monitor's summary of one fit (``train``), one eval (the evaluator's label) or one predict, on one rank."""

    label: str
    composer: Optional[str]
    rank: int
    steps: int
    #: Steps of this label in all runs this monitor's state has seen (a checkpoint's included).
    steps_in_all: int
    transforms: dict[str, TransformSummary]
    bytes_per_step: float
    bytes_by_dtype: dict[str, int]
    #: The median host time per step the trainer waited for the dataloader's fetch, in ms (``None``: no step).
    wait_ms_per_step: Optional[float] = None
    #: The median share of a step (host wall time, fetch included) spent waiting for that fetch.
    wait_share: Optional[float] = None

    @property
    def text(self) -> str:
        """The summary in words: which loop, where each transform ran, what crossed to the device, how long the
        trainer waited for data."""
        parts = '; '.join(t.text(name) for name, t in self.transforms.items()) or 'no transforms given'
        dtypes = ', '.join(f'{dtype} {n:,}' for dtype, n in self.bytes_by_dtype.items()) or 'none'
        more = f' ({self.steps_in_all} with the runs before a resume)' if self.steps_in_all > self.steps else ''
        waited = (
            ''
            if self.wait_ms_per_step is None or self.wait_share is None
            else f'; waited {self.wait_ms_per_step:.3g} ms/step for data ({self.wait_share:.0%} of a step)'
        )
        return (
            f"'{self.label}' (Composer {self.composer}, rank {self.rank}): {parts}; "
            f'{self.bytes_per_step:,.0f} bytes/step to the device ({dtypes}){waited} over {self.steps} steps{more}'
        )

    @property
    def line(self) -> str:
        """The summary in one line of text, as logged."""
        return f'compatshim monitor, {self.text}'


# --- every Trainer of the run, with nothing to edit (compatshim run --monitor, COMPATSHIM_MONITOR) --------------------

#: The monitor's own patch set: ``Trainer.__init__``, while attaching.
ATTACHING = _patching.PatchSet('compatshim.monitor.unwatch()')
#: The arguments of the monitor ``Trainer.__init__`` adds, while attaching.
_ATTACH: dict[str, Any] = {}


def _make_trainer_init(original: Callable[..., None], record: _patching.Patch) -> Callable[..., None]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if not record.active:
            record.original(self, *args, **kwargs)
            return
        try:
            bound = signature.bind_partial(self, *args, **kwargs)
        except TypeError:  # let Composer report its own argument error
            record.original(self, *args, **kwargs)
            return
        callbacks = bound.arguments.get('callbacks')
        listed = [] if callbacks is None else [callbacks] if not isinstance(callbacks, (list, tuple)) else callbacks
        if not any(isinstance(cb, TransformMonitor) for cb in listed):
            bound.arguments['callbacks'] = [*listed, TransformMonitor(**_ATTACH)]
        record.original(*bound.args, **bound.kwargs)

    return __init__


def attach_to_every_trainer(**monitor_kwargs: Any) -> None:
    """Watch, and give every ``Trainer`` built from now on a ``TransformMonitor(**monitor_kwargs)`` (unless its
    callbacks already hold one). Idempotent; a second call changes the monitor's arguments."""
    from composer.trainer.trainer import Trainer

    watch()
    with STATE.lock:
        _ATTACH.clear()
        _ATTACH.update(monitor_kwargs)
        if (Trainer, '__init__') not in ATTACHING:
            ATTACHING.patch(Trainer, '__init__', _make_trainer_init)


def unwatch() -> None:
    """Undo :func:`watch` and :func:`attach_to_every_trainer` (DataSpecs already noted stay noted)."""
    with STATE.lock:
        _ATTACH.clear()
        ATTACHING.restore_all()
        _unwatch_dataspecs()


def run_record(strict: bool = False) -> dict[str, Any]:
    """compatshim's state in this process, as the hyperparameters :class:`TransformMonitor` logs once per run (at the
    Trainer's ``INIT``, through ``logger.log_hyperparameters``), so that every logger of the run keeps it beside the
    run's own: Composer's ``InMemoryLogger`` (``.hyperparameters``), ``FileLogger``, MLflow (params), W&B (config),
    TensorBoard. Every value is a string or a bool, as each of those takes.

    Keys: ``compatshim/version``, ``compatshim/composer`` (the release), ``compatshim/family`` (``host``,
    ``dropped``, ``rejected``, or ``none`` where the release is unaffected or outside the table), ``compatshim/verdict``
    (``patched``, ``affected``, ``unaffected``, ``unsupported``), ``compatshim/stage`` (the default stage, ``off``
    while nothing is patched), ``compatshim/patched`` (the patched targets, comma-separated; ``nothing``),
    ``compatshim/enabled_by`` (``compatshim.enable()``, ``compatshim run``, ``compatshim.auto``; ``nothing``) and
    ``compatshim/monitor_strict``.
    """
    from compatshim._status import status
    from compatshim._version import __version__

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


watch()  # importing the monitor is the opt-in: DataSpecs built from here on are known to it (see the docstring)
if STATE.attach_pending is not None:  # compatshim run's hook fired inside this module's own import of Composer
    attach_to_every_trainer(**STATE.attach_pending)
    STATE.attach_pending = None


def _rank() -> int:
    from composer.utils import dist

    return int(dist.get_global_rank())
