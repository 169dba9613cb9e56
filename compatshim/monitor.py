"""``TransformMonitor``: a Composer callback that shows, in your own run, where the data transforms ran.

Per step and per dataloader label (``train``, each evaluator's label, ``predict``), for every transform a DataSpec was
given — ``device_transforms`` (with or without the shim) and, on Composer 0.27+, its own ``batch_transforms`` and
``microbatch_transforms`` — it logs where the transform's input was, how many calls a step made, how long they took,
and the bytes that crossed host → device through the trainer's ``Device``, by dtype::

    from composer import Trainer
    from compatshim.monitor import TransformMonitor

    monitor = TransformMonitor()          # before building DataSpecs (or after compatshim.enable())
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
  host in that step.

At the end of each fit, eval and predict a summary: ``data/LABEL/NAME/total_calls``, ``.../median_calls``,
``.../median_time_ms``, ``data/LABEL/median_bytes_to_device``, ``data/LABEL/steps``, and one line of text (logged as
a trace ``data/LABEL/summary``, through the ``compatshim.monitor`` logger, and kept, with its figures, in
:attr:`TransformMonitor.summaries`).

On an accelerator, a ``device_transforms`` whose input was on the host, or that was never called, gives one
:class:`~compatshim.errors.CompatShimWarning` per DataSpec naming it, the release and the fix; with ``strict=True`` the
step raises :class:`~compatshim.errors.TransformPlacementError` instead. With the shim working, nothing is warned.
Every rank logs its own figures; the monitor makes no collective call.

It never asks the device to finish per step and never reads tensor data (placement and bytes come from tensor
metadata). Importing this module (and creating a monitor) arms the watch (:func:`compatshim.patches.watch.watch`), an
observe-only wrapper of ``DataSpec.__init__`` that changes nothing Composer does: DataSpecs built from then on are
known to the monitor, also where Composer drops an argument — so ``Trainer(train_dataloader=DataSpec(...),
callbacks=[TransformMonitor()])`` works, though it builds the DataSpec first. :func:`unwatch` takes it off. This
module imports Composer.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.metadata
import logging
import statistics
import warnings
import weakref
from typing import Any, Optional

from composer.core import Callback, State
from composer.loggers import Logger

from compatshim import _dataspecs, _recorder, _settings
from compatshim._recorder import MoveCounter, Tap
from compatshim._state import STATE
from compatshim._support import AFFECTED, UNAFFECTED, family_of
from compatshim.errors import CompatShimWarning, TransformPlacementError
from compatshim.patches import watch as _watch

__all__ = ['Summary', 'TransformMonitor', 'TransformSummary', 'attach_to_every_trainer', 'unwatch', 'watch']

log = logging.getLogger(__name__)

watch, unwatch, attach_to_every_trainer = _watch.watch, _watch.unwatch, _watch.attach_to_every_trainer

#: Steps kept per label and transform for the medians of a summary (the totals count every step).
KEEP_STEPS = 4096


def _describe(spec: Any) -> str:
    from compatshim.patches.data_spec import _describe as describe

    return describe(spec)


def _is_default(spec: Any, value: Any) -> bool:
    """Composer's own no-op transforms are methods of the DataSpec itself."""
    return getattr(value, '__self__', None) is spec


@dataclasses.dataclass(eq=False)
class _Target:
    """One transform of one DataSpec: its tap (``None``: given, but nothing will ever call it) and its stage."""

    name: str
    tap: Optional[Tap]
    stage: str


class _Watched:
    """The taps the monitor put on one DataSpec, and how to take them off."""

    def __init__(self, spec: Any, given: frozenset[str], clock: Any) -> None:
        from compatshim._transforms import BatchHook, MicrobatchHook

        self.spec, self.owner, self.targets = spec, _describe(spec), []
        self._swapped: list[tuple[Any, str, Any, Tap]] = []
        attrs = {name: vars(spec).get(name) for name in _dataspecs.TRANSFORM_NAMES}
        hook = next(
            (h for h in (attrs['batch_transforms'], attrs['device_transforms']) if isinstance(h, BatchHook)), None
        )
        micro = attrs['microbatch_transforms'] if isinstance(attrs['microbatch_transforms'], MicrobatchHook) else None
        for name in _dataspecs.TRANSFORM_NAMES:
            if name not in given:
                continue
            if name == 'device_transforms':
                if hook is not None:  # the shim's: tap the user's transform inside its hooks (one tap for both)
                    tap = self._swap(hook, 'transform', Tap(hook.transform, clock))
                    if micro is not None:
                        self._swap(micro, 'transform', tap)
                    stage = hook.stage or STATE.stage or 'shim disabled'
                    self.targets.append(_Target(name, tap, stage))
                elif callable(attrs[name]) and not _is_default(spec, attrs[name]):  # 0.24.x, or 0.25–0.26 unpatched
                    self.targets.append(_Target(name, self._swap(spec, name, Tap(attrs[name], clock)), 'batch'))
                else:  # 0.27–0.28 without the shim: assigned, then overwritten
                    self.targets.append(_Target(name, None, 'dropped by Composer'))
                continue
            holder, attr = (spec, name)
            if name == 'batch_transforms' and hook is not None and hook.native is not None:
                holder, attr = hook, 'native'
            elif name == 'microbatch_transforms' and micro is not None:
                holder, attr = micro, 'native'
            stage = 'microbatch' if name == 'microbatch_transforms' else 'batch'
            self.targets.append(_Target(name, self._swap(holder, attr, Tap(getattr(holder, attr), clock)), stage))

    def _swap(self, holder: Any, attr: str, tap: Tap) -> Tap:
        self._swapped.append((holder, attr, getattr(holder, attr), tap))
        setattr(holder, attr, tap)
        return tap

    def remove(self) -> None:
        for holder, attr, original, tap in reversed(self._swapped):
            if getattr(holder, attr, None) is tap:
                setattr(holder, attr, original)
        self._swapped.clear()


def _recent() -> collections.deque[Any]:
    return collections.deque(maxlen=KEEP_STEPS)


@dataclasses.dataclass
class _Series:
    """One transform of one loop: its per-step calls and times, and every call's placement."""

    stage: str
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


class TransformMonitor(Callback):
    """Logs, per step and dataloader label, where each data transform ran, its calls, its time and the bytes moved.

    Args:
        log_interval: Log the per-step metrics every this many steps of a label (the summaries count every step).
        strict: Raise :class:`~compatshim.errors.TransformPlacementError` at the first step whose
            ``device_transforms`` ran on the host or was never called on an accelerator, instead of warning.

    Create it before building your DataSpecs (or enable the shim first): it knows the DataSpecs built since then.
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
        try:
            self.composer: Optional[str] = importlib.metadata.version('mosaicml')
        except importlib.metadata.PackageNotFoundError:
            self.composer = None
        #: One summary per fit, eval and predict, in order (``summary.line``: as logged).
        self.summaries: list[Summary] = []
        self._counter = MoveCounter()
        self._clock: Any = _recorder.clock_for('cpu')
        self._accelerator = False
        self._watched: dict[int, _Watched] = {}
        self._open: Optional[tuple[str, Optional[_Watched]]] = None
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

    def before_dataloader(self, state: State, logger: Logger) -> None:
        self._begin(state, 'train')

    def batch_end(self, state: State, logger: Logger) -> None:
        self._end(state, logger, int(state.timestamp.batch))

    def fit_end(self, state: State, logger: Logger) -> None:
        self._summarize('train', logger)

    def eval_start(self, state: State, logger: Logger) -> None:
        self._begin(state, state.dataloader_label or 'eval')

    def eval_batch_end(self, state: State, logger: Logger) -> None:
        self._end(state, logger, int(state.eval_timestamp.batch))
        self._begin(state, state.dataloader_label or 'eval')  # the next batch is transformed before its start event

    def eval_end(self, state: State, logger: Logger) -> None:
        self._open = None
        self._summarize(state.dataloader_label or 'eval', logger)

    def predict_start(self, state: State, logger: Logger) -> None:
        self._begin(state, 'predict')

    def predict_batch_end(self, state: State, logger: Logger) -> None:
        self._end(state, logger, int(state.predict_timestamp.batch))
        self._begin(state, 'predict')

    def predict_end(self, state: State, logger: Logger) -> None:
        self._open = None
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

    # --- windows ------------------------------------------------------------------------------------------------------

    def _spec(self, state: State, label: str) -> Optional[_Watched]:
        loader = state.dataloader
        found = _dataspecs.find(loader)
        if found is None and label not in ('train', 'predict'):
            specs = [e.dataloader for e in getattr(state, 'evaluators', []) or [] if e.label == label]
            if specs and getattr(specs[0], 'dataloader', None) is loader:  # built before the monitor: what it holds
                spec, held = specs[0], vars(specs[0])
                given = (
                    n for n in _dataspecs.TRANSFORM_NAMES if callable(held.get(n)) and not _is_default(spec, held[n])
                )
                found = (spec, _dataspecs.Note(weakref.ref(spec), frozenset(given)))
        if found is None:
            if label not in self._blind:
                self._blind.add(label)
                message = (
                    f"compatshim TransformMonitor: cannot see the transforms of the '{label}' dataloader: its DataSpec "
                    'was built before the monitor was created and while the shim was off. Create the TransformMonitor '
                    '(or call compatshim.enable()) before building DataSpecs, or start the run with compatshim run '
                    '--monitor.'
                )
                if self.strict:
                    raise TransformPlacementError(message + ' (strict: a transform it cannot see is not verified)')
                warnings.warn(message + ' Only the bytes moved are reported for it.', CompatShimWarning, stacklevel=2)
            return None
        spec, note = found
        watched = self._watched.get(id(spec))
        if watched is None or watched.spec is not spec:
            watched = self._watched[id(spec)] = _Watched(spec, note.given, self._clock)
        return watched

    def _begin(self, state: State, label: str) -> None:
        watched = self._spec(state, label)
        self._window += 1
        for target in [] if watched is None else watched.targets:
            if target.tap is not None:
                target.tap.take(self._window)
        self._counter.take()
        self._open = (label, watched)

    def _end(self, state: State, logger: Logger, step: int) -> None:
        if self._open is None:
            return
        label, watched = self._open
        self._open = None
        loop = self._loops.setdefault(label, _Loop())
        metrics: dict[str, float] = {}
        problem: Optional[str] = None
        for target in [] if watched is None else watched.targets:
            window = target.tap.take(0) if target.tap is not None else _recorder.Window()
            one = loop.transforms.setdefault(target.name, _Series(target.stage))
            one.calls.append(window.calls)
            one.places.update(window.places)
            key = f'data/{label}/{target.name}'
            metrics[f'{key}/calls'] = window.calls
            if window.calls:
                metrics[f'{key}/on_device'] = window.places['device'] / window.calls
            if window.timed_later:
                self._late[window.id] = (label, target.name, step)
            else:
                one.ms.append(window.seconds * 1e3)
                if window.calls:
                    metrics[f'{key}/time_ms'] = window.seconds * 1e3
            if target.name == 'device_transforms' and self._accelerator and window.where != 'device':
                problem = window.where
        moved = self._counter.take()
        total = sum(moved.values())
        loop.steps += 1
        loop.bytes.append(total)
        loop.dtypes.update(moved)
        self._steps_in_all[label] = self._steps_in_all.get(label, 0) + 1
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
        what = 'was never called' if where == 'never called' else f'saw its batch on the {where}'
        message = (
            f"compatshim: {watched.owner}'s device_transforms {what} in '{label}' (Composer {self.composer}), "
            f'not on the device. {self._fix(watched)}'
        )
        if self.strict:
            raise TransformPlacementError(message)
        warnings.warn(message, CompatShimWarning, stacklevel=2)

    def _fix(self, watched: _Watched) -> str:
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
            transforms[name] = TransformSummary(
                where=_recorder.summarize_places(one.places),
                calls=calls,
                calls_per_step=statistics.median(one.calls),
                ms_per_step=statistics.median(one.ms) if one.ms and calls else None,
                stage=one.stage,
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
        )
        metrics: dict[str, float] = {f'data/{label}/steps': steps}
        for name, transform in transforms.items():
            metrics[f'data/{label}/{name}/total_calls'] = transform.calls
            metrics[f'data/{label}/{name}/median_calls'] = transform.calls_per_step
            if transform.ms_per_step is not None:
                metrics[f'data/{label}/{name}/median_time_ms'] = transform.ms_per_step
        metrics[f'data/{label}/median_bytes_to_device'] = summary.bytes_per_step
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
    stage: str

    def text(self, name: str) -> str:
        if not self.calls:
            return f'{name} {self.where} (stage {self.stage})'
        per_step = f'{self.calls_per_step:g} call{"" if self.calls_per_step == 1 else "s"}/step'
        time = '' if self.ms_per_step is None else f', {self.ms_per_step:.3g} ms/step'
        return f'{name} on the {self.where}, {per_step}{time} (stage {self.stage})'


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

    @property
    def line(self) -> str:
        """The summary in one line of text."""
        parts = '; '.join(t.text(name) for name, t in self.transforms.items()) or 'no transforms given'
        dtypes = ', '.join(f'{dtype} {n:,}' for dtype, n in self.bytes_by_dtype.items()) or 'none'
        more = f' ({self.steps_in_all} in all, checkpoints included)' if self.steps_in_all != self.steps else ''
        return (
            f"compatshim monitor, '{self.label}' (Composer {self.composer}, rank {self.rank}): {parts}; "
            f'{self.bytes_per_step:,.0f} bytes/step to the device ({dtypes}) over {self.steps} steps{more}'
        )


watch()  # importing the monitor is the opt-in: DataSpecs built from here on are known to it (see the docstring)


def _rank() -> int:
    from composer.utils import dist

    return int(dist.get_global_rank())
