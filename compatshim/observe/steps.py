"""The monitor's recorder of steps (:class:`Steps`, on an injected clock) and its placement policy, beneath
:mod:`compatshim.monitor` (the keys it logs: docs/monitor.md). Imports torch, never Composer."""

from __future__ import annotations

import collections
import dataclasses
import functools
import statistics
import time
from typing import Any, Callable, Optional

from compatshim.config.settings import KILL_SWITCH
from compatshim.config.support import AFFECTED, UNAFFECTED, family_of
from compatshim.observe.placement import Placement
from compatshim.observe.recorder import MoveCounter, Tap, Window, clock_for, summarize_places
from compatshim.observe.slots import Fate, Slot

#: The last steps kept per label and transform for the medians of a summary (the totals count every step).
_recent: Callable[[], collections.deque[Any]] = functools.partial(collections.deque, maxlen=4096)


@dataclasses.dataclass(eq=False)
class Target:
    """One transform of one DataSpec: its slot, and its tap (``None``: nothing will ever call it)."""

    slot: Slot
    tap: Optional[Tap]


@dataclasses.dataclass
class _Open:
    label: str
    targets: list[Target]
    since: float  # host wall clock
    wait: Optional[float] = None


@dataclasses.dataclass
class Timed:
    """A transform's time, from events read after its step."""

    label: str
    name: str
    step: int
    ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class Ended:
    """A step that ended: its count in its loop, its metrics, and where each transform saw its batch."""

    label: str
    count: int
    metrics: dict[str, float]
    where: dict[str, Placement]


@dataclasses.dataclass
class _Series:  # one transform of one loop: per step its calls and times; every call's placement
    slot: Slot
    calls: collections.deque[int] = dataclasses.field(default_factory=_recent)
    ms: collections.deque[float] = dataclasses.field(default_factory=_recent)
    places: collections.Counter[Placement] = dataclasses.field(default_factory=collections.Counter)


@dataclasses.dataclass
class _Loop:  # one fit, eval or predict of one label until its summary
    steps: int = 0
    bytes: collections.deque[int] = dataclasses.field(default_factory=_recent)
    waits: collections.deque[float] = dataclasses.field(default_factory=_recent)
    shares: collections.deque[float] = dataclasses.field(default_factory=_recent)
    dtypes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    transforms: dict[str, _Series] = dataclasses.field(default_factory=dict)


class Steps:
    """Each label's loop of steps: told what each event says, it gives each step's metrics and each loop's summary.
    ``clock``: the host wall clock (a step's time, its wait for data)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock, self.transform_clock = clock, clock_for()  # the monitor sets the transforms' clock
        self.counter = MoveCounter()  # installed on the trainer's device by the monitor
        #: Whether placement and bytes to the device can be seen (not on plain ``DeviceCPU``): if not, neither is said.
        self.observable = True
        #: Steps per label over every run this recorder has seen (a checkpoint's included).
        self.steps_in_all: collections.Counter[str] = collections.Counter()
        self._open: Optional[_Open] = None
        self._loops: dict[str, _Loop] = {}
        self._timed: dict[int, Timed] = {}  # by window id, until their events have completed
        self._windows = 0

    def tap(self) -> Tap:
        """A tap on this recorder's transform clock."""
        return Tap(None, self.transform_clock, placed=self.counter.placement)

    def begin(self, label: str, targets: list[Target]) -> None:
        """A step of ``label`` begins, before its batch is fetched."""
        self._windows += 1
        for tap in (t.tap for t in targets if t.tap is not None):
            tap.take(self._windows)
        self.counter.take()
        self._open = _Open(label, targets, self.clock())

    def reached(self) -> None:
        """The open step's batch reached the trainer: its wait for data is known."""
        if self._open is not None and self._open.wait is None:
            self._open.wait = self._fetched(self._open)

    def _fetched(self, step: _Open) -> float:
        """Seconds ``step`` waited for the dataloader: its wall time less the taps' and the moves' that followed."""
        busy = sum(t.tap.window.wall for t in step.targets if t.tap is not None)
        return max(0.0, self.clock() - step.since - busy - self.counter.wall)

    def restart(self, label: str) -> None:
        """A loop of ``label`` starts: the steps of one that raised before its end are not this loop's."""
        self._loops.pop(label, None)

    def drop(self) -> None:
        """The loop ended: a step opened for a batch that never came is no step."""
        self._open = None

    def end(self, step: int) -> Optional[Ended]:
        """The open step ended, its number ``step`` (``None``: none was open)."""
        done, self._open = self._open, None
        if done is None:
            return None
        wait = self._fetched(done) if done.wait is None else done.wait
        elapsed, label = self.clock() - done.since, done.label
        loop = self._loops.setdefault(label, _Loop())
        metrics: dict[str, float] = {}
        where: dict[str, Placement] = {}
        for target in done.targets:
            name, key = target.slot.name, f'data/{label}/{target.slot.name}'
            window = target.tap.take(0) if target.tap is not None else Window()
            series = loop.transforms.setdefault(name, _Series(target.slot))
            series.calls.append(window.calls)
            series.places.update(window.places)
            where[name], metrics[f'{key}/calls'] = window.where, window.calls
            if window.calls and self.observable:
                metrics[f'{key}/on_device'] = window.places[Placement.DEVICE] / window.calls
            if window.timed_later:
                self._timed[window.id] = Timed(label, name, step)
            else:
                series.ms.append(window.seconds * 1e3)
                if window.calls:
                    metrics[f'{key}/time_ms'] = window.seconds * 1e3
        moved = self.counter.take()
        loop.steps += 1
        self.steps_in_all[label] += 1
        loop.bytes.append(sum(moved.values()))
        loop.dtypes.update(moved)
        loop.waits.append(wait)
        loop.shares.append(wait / elapsed if elapsed > 0 else 0.0)
        metrics[f'data/{label}/wait_ms'], metrics[f'data/{label}/wait_share'] = wait * 1e3, loop.shares[-1]
        if self.observable:
            metrics[f'data/{label}/bytes_to_device'] = loop.bytes[-1]
            metrics.update({f'data/{label}/bytes_to_device/{dtype}': n for dtype, n in moved.items() if n})
        return Ended(label, loop.steps, metrics, where)

    def collect(self, final: bool = False) -> list[Timed]:
        """The transform times whose events have completed (``final``: all, waiting for the last)."""
        found = []
        for window_id, seconds in self.transform_clock.collect(final):
            timed = self._timed.pop(window_id, None)
            loop = None if timed is None else self._loops.get(timed.label)
            if timed is not None and loop is not None and timed.name in loop.transforms:
                timed.ms = seconds * 1e3
                loop.transforms[timed.name].ms.append(timed.ms)
                found.append(timed)
        return found

    def summary(self, label: str, composer: Optional[str], rank: int, shim_stage: Optional[str]) -> Optional[Summary]:
        """The summary of ``label``'s loop, which ends here (``None``: it had no step)."""
        loop = self._loops.pop(label, None)
        if loop is None:
            return None
        transforms = {}
        for name, one in loop.transforms.items():
            calls, fate = sum(one.calls), one.slot.fate
            ms = one.ms if one.ms and calls else None
            stage = one.slot.stage or (shim_stage if fate is Fate.PLACED else None)
            where = summarize_places(one.places) if self.observable or not calls else Placement.UNOBSERVABLE
            per_step = statistics.median(one.calls)
            median, in_all = (None, None) if ms is None else (statistics.median(ms), sum(ms))
            transforms[name] = TransformSummary(where, calls, per_step, median, stage, fate, in_all)
        dtypes = {dtype: per for dtype, n in loop.dtypes.most_common() if (per := n // max(loop.steps, 1))}
        waits = statistics.median(loop.waits) * 1e3 if loop.waits else None
        shares = statistics.median(loop.shares) if loop.shares else None
        moved = statistics.median(loop.bytes) if loop.bytes else 0
        in_all = self.steps_in_all.get(label, loop.steps)
        return Summary(
            label, composer, rank, loop.steps, in_all, transforms, moved, dtypes, waits, shares, self.observable
        )


def summary_metrics(summary: Summary) -> dict[str, float]:
    """The metrics logged at the end of a loop."""
    key = f'data/{summary.label}'
    metrics: dict[str, float] = {f'{key}/steps': summary.steps}
    for name, transform in summary.transforms.items():
        metrics[f'{key}/{name}/total_calls'] = transform.calls
        metrics[f'{key}/{name}/median_calls'] = transform.calls_per_step
        if transform.ms_per_step is not None:
            metrics[f'{key}/{name}/median_time_ms'] = transform.ms_per_step
    if summary.observable:
        metrics[f'{key}/median_bytes_to_device'] = summary.bytes_per_step
    if summary.wait_ms_per_step is not None and summary.wait_share is not None:
        metrics[f'{key}/median_wait_ms'] = summary.wait_ms_per_step
        metrics[f'{key}/median_wait_share'] = summary.wait_share
    return metrics


# --- the policy: where a device_transforms is misplaced, and what is said of it ---------------------------------------


def early_problem(places: collections.Counter[Placement]) -> Optional[Placement]:
    """Right after the batch-level transforms: ``host`` (or ``mixed``) if a device_transforms call saw it there."""
    return Placement.HOST if places[Placement.HOST] else Placement.MIXED if places[Placement.MIXED] else None


def placement_warning(
    where: str, spec_name: str, label: str, composer: Optional[str], kill_switch: bool, shim_on: bool
) -> str:
    """What is said of a DataSpec whose device_transforms is ``where`` (``never called``, ``host``, ``mixed``) in
    ``label``'s loop on Composer ``composer``, and the fix, given whether the kill switch is set and the shim on."""
    what = (
        f"is never called in '{label}': Composer {composer} drops it"
        if where == Placement.NEVER_CALLED
        else f"saw its batch on the {where!s} in '{label}' (Composer {composer}), not on the device"
    )
    return f"compatshim: {spec_name}'s device_transforms {what}. {_fix(composer or '', kill_switch, shim_on)}"


def _fix(version: str, kill_switch: bool, shim_on: bool) -> str:
    if version in AFFECTED and kill_switch:
        return f'{KILL_SWITCH} is set, so the shim patches nothing: unset it.'
    if version in AFFECTED and shim_on:
        return 'The shim is on, but this DataSpec was built before compatshim.enable(): build it after.'
    if version in AFFECTED:
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


def unseen_warning(label: str, strict: bool, framed: bool = True) -> str:
    """What is said of a dataloader whose DataSpec the monitor cannot see: built unseen on a release that drops the
    argument, or (not ``framed``) run by a loop that is not the Trainer's own, so that no loop frame names it."""
    why = (
        'its DataSpec was built before compatshim.monitor was imported and while the shim was off, on a release that '
        'drops device_transforms without a trace (or unpickled from one built so). Import compatshim.monitor (or call '
        'compatshim.enable()) before building DataSpecs, or start the run with compatshim run --monitor.'
        if framed
        else "its loop is not one of the Trainer's own (a subclass's loop that does not call Composer's, or a Trainer "
        'run after compatshim.monitor.unwatch()), so nothing names its DataSpec to the monitor.'
    )
    tail = (
        ' (strict: a transform it cannot see is not verified)'
        if strict
        else ' Only the bytes moved are reported for it.'
    )
    return f"compatshim TransformMonitor: cannot see the transforms of the '{label}' dataloader: {why}{tail}"


@dataclasses.dataclass(frozen=True)
class TransformSummary:
    """What one transform did over a fit, an eval or a predict."""

    #: ``device``, ``host``, ``mixed`` or ``never called``.
    where: Placement
    calls: int
    calls_per_step: float
    #: The median time per step (``None``: never called, or not timed).
    ms_per_step: Optional[float]
    #: ``batch`` or ``microbatch`` (``None``: the shim's, while the shim is off; or nothing runs it).
    stage: Optional[str]
    #: What became of it (:class:`compatshim.observe.slots.Fate`): called by Composer, before the move, dropped,
    #: placed by the shim.
    fate: Fate = Fate.CALLED
    #: The time of every step kept (the last ones of a long loop), on the same clock as ``ms_per_step``.
    ms_in_all: Optional[float] = None

    def text(self, name: str, observable: bool = True) -> str:
        """``name`` and what it did, in words (``observable``: whether its placement could be seen)."""
        stage = f'stage {self.stage}' if self.stage else 'the shim is off' if self.fate is Fate.PLACED else ''
        if not self.calls:
            how = self.fate.value + (f', {stage}' if stage and self.fate is not Fate.DROPPED else '')
            return f'{name} never called ({how})'
        per_step = f'{self.calls_per_step:g} call{"" if self.calls_per_step == 1 else "s"}/step'
        time = '' if self.ms_per_step is None else f', {self.ms_per_step:.3g} ms/step'
        where = 'called' if self.where is Placement.UNOBSERVABLE or not observable else f'on the {self.where!s}'
        return f'{name} {where}, {per_step}{time}' + (f' ({stage})' if stage else '')


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
    #: Whether placement and bytes to the device could be seen (not on Composer's plain ``DeviceCPU``, where host and
    #: device are one): where they could not, ``where`` and the bytes are not figures, and the text says so.
    observable: bool = True

    @property
    def text(self) -> str:
        """The summary in words: which loop, where each transform ran, what crossed to the device, how long the
        trainer waited for data."""
        parts = '; '.join(t.text(name, self.observable) for name, t in self.transforms.items()) or 'no transform seen'
        dtypes = ', '.join(f'{dtype} {n:,}' for dtype, n in self.bytes_by_dtype.items()) or 'none'
        moved = (
            f'{self.bytes_per_step:,.0f} bytes/step to the device ({dtypes})'
            if self.observable
            else "placement and bytes to the device not observable (Composer's DeviceCPU: host and device are one)"
        )
        more = f' ({self.steps_in_all} over all its runs and any it resumed)' if self.steps_in_all > self.steps else ''
        waited = (
            ''
            if self.wait_ms_per_step is None or self.wait_share is None
            else f'; waited {self.wait_ms_per_step:.3g} ms/step for data ({self.wait_share:.0%} of a step)'
        )
        return (
            f"'{self.label}' (Composer {self.composer}, rank {self.rank}): {parts}; "
            f'{moved}{waited} over {self.steps} steps{more}'
        )

    @property
    def line(self) -> str:
        """The summary in one line of text, as logged."""
        return f'compatshim monitor, {self.text}'
