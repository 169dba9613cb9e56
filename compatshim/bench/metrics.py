"""The legs and the metrics: the one place that names either. :data:`LEGS` is the leg vocabulary of both benches;
:data:`METRICS` are the reference bench's metrics, :func:`pipeline_metrics` a pipeline's, each of a *kind*
(:mod:`compatshim.bench.rule`). Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Optional

from compatshim.bench import rule
from compatshim.bench.results import Result
from compatshim.bench.rule import Kind, SampleSource
from compatshim.config.support import DEVICES, Family
from compatshim.observe.placement import Word

__all__ = [
    'COMPARABLE_BY', 'IDIOMS', 'LEGS', 'METRICS', 'PIPELINE_COMPARABLE_BY', 'Gate', 'Leg', 'Metric', 'metric',
    'tensors_of',
]  # fmt: skip

#: Composer's own ``batch_transforms`` and ``microbatch_transforms`` exist from 0.27.0.
NATIVE = (Family.DROPPED, Family.REJECTED)


@dataclasses.dataclass(frozen=True)
class Leg:
    """One way of passing the transform: the DataSpec argument ``argument`` (``None``: none, the ceiling), with the
    shim at ``stage`` (``None``: off)."""

    name: str
    argument: Optional[str]
    stage: Optional[str]
    description: str

    def absent_on(self, family: Optional[Family]) -> str:
        """Why this leg does not exist on a release of ``family`` (``''``: it does)."""
        if self.argument in ('batch_transforms', 'microbatch_transforms') and family not in NATIVE:
            return f'{self.argument} exists from Composer 0.27.0'
        if self.stage == 'microbatch' and family is None:
            return 'this release runs device_transforms on the device itself: the shim patches nothing, no stage'
        return ''


#: The legs, in report order.
LEGS: dict[str, Leg] = {
    leg.name: leg
    for leg in (
        Leg('unpatched', 'device_transforms', None, 'device_transforms=fn, no shim'),
        Leg('native-batch', 'batch_transforms', None, 'batch_transforms=fn, no shim (host; the workaround, 0.27+)'),
        Leg('native-microbatch', 'microbatch_transforms', None, 'microbatch_transforms=fn, no shim (device, 0.27+)'),
        Leg('shim-batch', 'device_transforms', 'batch', 'device_transforms=fn, enable(stage="batch")'),
        Leg('shim-microbatch', 'device_transforms', 'microbatch', 'device_transforms=fn, enable(stage="microbatch")'),
        Leg('ceiling', None, None, 'batches already transformed and on the device (data for free)'),
    )
}
#: The reference bench's legs: every leg but the ceiling.
REFERENCE_LEGS: tuple[str, ...] = tuple(name for name in LEGS if name != 'ceiling')
#: The detection-style batches the probes also run on (a list of per-sample dicts: an image, its boxes, their labels;
#: three tensors a sample), by samples: the last is gated, all show how a cost grows with the tensors of a batch.
SAMPLES: tuple[int, ...] = (1, 16, 64, 256)
#: The transform idioms the monitor's probe also runs, as ``monitor@<samples>/<idiom>``, on the gated detection-style
#: batch with uint8 images (the probes above run a transform that returns its batch): one that keeps its containers
#: (each sample's image replaced in its own dict), one that builds new ones (a list of new dicts), a torchvision v2
#: one (``ToDtype`` on tv_tensors, which rebuilds every container).
IDIOMS: tuple[str, ...] = ('in-place', 'rebuilt', 'v2')
#: The overhead probes (:mod:`compatshim.bench.reference`): each path on the image batch of the workload, then
#: ``<path>@<samples>`` on a detection-style batch (the hook at stage microbatch on the gated one only), then the
#: monitor on the gated one with each idiom.
PROBES: tuple[str, ...] = (
    'hook-batch', 'hook-microbatch', 'monitor',
    *(f'{path}@{n}' for n in SAMPLES for path in ('hook-batch', 'monitor')), f'hook-microbatch@{SAMPLES[-1]}',
    *(f'monitor@{SAMPLES[-1]}/{idiom}' for idiom in IDIOMS),
)  # fmt: skip


def tensors_of(probe: str) -> int:
    """How many tensors the batch of ``probe`` holds: the image batch two, a detection-style batch three a sample."""
    samples = probe.partition('@')[2].partition('/')[0]
    return 3 * int(samples) if samples else 2


#: The fingerprint keys that must match for two reference results to measure the same workload.
COMPARABLE_BY: tuple[str, ...] = ('size', 'workload_version')
#: What must match for a pipeline baseline to compare; not the Composer or torch release (an upgrade is what it is for).
PIPELINE_COMPARABLE_BY = ('pipeline', 'size', 'device', 'samples_per_step', 'microbatch_size', 'workload_version')


class Gate(Word):
    """Where a metric is judged: where the shim patches, where it must patch nothing, everywhere, nowhere."""

    AFFECTED = 'affected'
    UNAFFECTED = 'unaffected'
    ALWAYS = 'always'
    NEVER = 'never'


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric: its id, its kind, where its numbers are, where and on which devices it is gated, and its column in
    the report's headline ('': none)."""

    id: str
    kind: Kind
    source: SampleSource
    gate: Gate
    devices: tuple[str, ...] = DEVICES
    title: str = ''

    def __post_init__(self) -> None:
        if self.gate is not Gate.NEVER and not self.kind.sentence:
            raise ValueError(f'metric {self.id!r}: a {self.kind.name} is reported, never gated')

    def applies(self, result: Result) -> bool:
        return {Gate.AFFECTED: result.affected, Gate.UNAFFECTED: not result.affected}.get(self.gate, True)

    def gated_for(self, result: Result) -> bool:
        size = result.fingerprint.get('size', {}).get('name')
        where = self.gate is not Gate.NEVER and self.applies(result) and result.device in self.devices
        return where and (self.kind.sizes is None or size in self.kind.sizes)

    def read(self, result: Optional[Result]) -> list[Any]:
        return [] if result is None else self.kind.read(self.source, result)

    def show(self, result: Optional[Result]) -> str:
        return self.kind.show(self.read(result))


def _ratio(name: str, partner: str, gate: Gate, devices: tuple[str, ...] = DEVICES) -> Metric:
    return Metric(f'{name}/{partner}', rule.RATIO, SampleSource(name, partner), gate, devices, f'{name} / {partner}')


def _cost(path: str, tail: str, probe: str, name: str, limit: Kind, gate: Gate, title: str) -> tuple[Metric, ...]:
    """A path of compatshim's: its share of a step of the leg ``name`` (gated), over the direct path, its µs."""
    return (
        Metric(f'{path} share of a step{tail}', limit, SampleSource(name, probe=probe), gate, title=title),
        Metric(f'{path} path / direct{tail}', rule.OVERHEAD, SampleSource(probe=probe), Gate.NEVER),
        Metric(f'{path} µs/batch{tail}', rule.FIGURE, SampleSource(probe=probe), Gate.NEVER),
    )


#: compatshim's own cost, probe by probe, and its three metrics.
COSTS: tuple[tuple[str, tuple[Metric, ...]], ...] = (
    *((f'hook, stage {stage}', _cost('hook', f' ({stage})', f'hook-{stage}', f'shim-{stage}', rule.HOOK_SHARE,
                                     Gate.AFFECTED, f'hook share ({short})'))
      for stage, short in (('batch', 'batch'), ('microbatch', 'mb'))),
    ('monitor, one train step',
     _cost('monitor', '', 'monitor', 'shim-batch', rule.MONITOR_SHARE, Gate.ALWAYS, 'monitor share')),
)  # fmt: skip


def _beyond(path: str, tail: str, probe: str, limit: Kind, gate: Gate, title: str) -> tuple[Metric, ...]:
    """A path of compatshim's on the gated detection-style batch: beyond the move (gated), over it, its µs."""
    tail = f'{tail}, {SAMPLES[-1]} samples'
    return (
        Metric(f'{path} beyond the move{tail}', limit, SampleSource(probe=probe), gate, title=title),
        Metric(f'{path} path / direct{tail}', rule.OVERHEAD, SampleSource(probe=probe), Gate.NEVER),
        Metric(f'{path} µs/batch{tail}', rule.FIGURE, SampleSource(probe=probe), Gate.NEVER),
    )


#: compatshim's own cost on the gated detection-style batch, probe by probe, and its three metrics.
DETECTION_COSTS: tuple[tuple[str, tuple[Metric, ...]], ...] = (
    *((f'hook, stage {stage}', _beyond('hook', f' ({stage})', f'hook-{stage}@{SAMPLES[-1]}', rule.HOOK_BEYOND,
                                       Gate.AFFECTED, f'hook / move, det. ({short})'))
      for stage, short in (('batch', 'batch'), ('microbatch', 'mb'))),
    ('monitor, one train step', _beyond('monitor', '', f'monitor@{SAMPLES[-1]}', rule.MONITOR_BEYOND, Gate.ALWAYS,
                                        'monitor / move, det.')),
)  # fmt: skip
#: The monitor on the gated detection-style batch with each transform idiom (:data:`IDIOMS`): gated beyond the move.
IDIOM_COSTS: tuple[Metric, ...] = tuple(
    metric for idiom in IDIOMS for metric in _beyond(
        'monitor', f' ({idiom})', f'monitor@{SAMPLES[-1]}/{idiom}', rule.MONITOR_BEYOND, Gate.ALWAYS, ''))  # fmt: skip
_DETECTED = {metric.id: metric for _, cost in DETECTION_COSTS for metric in cost}
#: How the move (the monitor probe's direct path), the hook and the monitor grow with a detection-style batch.
GROWTH: tuple[tuple[int, tuple[Metric, ...]], ...] = tuple(
    (n, tuple(_DETECTED.get(i) or Metric(i, kind, SampleSource(probe=probe), Gate.NEVER) for i, kind, probe in (
        (f'move µs/batch, {n} samples', rule.DIRECT, f'monitor@{n}'),
        (f'hook µs/batch (batch), {n} samples', rule.FIGURE, f'hook-batch@{n}'),
        (f'monitor µs/batch, {n} samples', rule.FIGURE, f'monitor@{n}'))))
    for n in SAMPLES
)  # fmt: skip
METRICS: tuple[Metric, ...] = (
    # Same work, same rounds: only the shim moves these. shim-batch beside the host path of its release: on cuda/mps
    # different work, the speed-up, reported there.
    _ratio('shim-batch', 'unpatched', Gate.AFFECTED, ('cpu',)),
    _ratio('shim-batch', 'native-batch', Gate.AFFECTED, ('cpu',)),
    _ratio('shim-microbatch', 'native-microbatch', Gate.AFFECTED),
    *(metric for _, cost in COSTS for metric in cost),
    *(metric for _, cost in DETECTION_COSTS for metric in cost),
    *IDIOM_COSTS,
    *(metric for _, grown in GROWTH for metric in grown if metric.id not in _DETECTED),
    *(Metric(f'bytes per step (recipe {name})', rule.BYTES, SampleSource(name, recipe=True), Gate.AFFECTED,
             title=f'recipe bytes ({t})') for name, t in (('shim-batch', 'shim-batch'), ('shim-microbatch', 'mb'))),
    *(Metric(f'placement ({"recipe " if recipe else ""}{name})', rule.ON_DEVICE, SampleSource(name, recipe=recipe),
             Gate.ALWAYS) for recipe in (False, True) for name in ('shim-batch', 'shim-microbatch')),
    Metric('patches on an unaffected release', rule.NOTHING_PATCHED, SampleSource(), Gate.UNAFFECTED),
    *(Metric(f'work per call ({"recipe" if recipe else "augment"} {name})', rule.WORK,
             SampleSource(name, recipe=recipe), Gate.AFFECTED)
      for recipe in (True, False) for name in ('shim-batch', 'shim-microbatch')),
)  # fmt: skip


def metric(metric_id: str) -> Metric:
    """The metric of that id (``KeyError`` naming those there are)."""
    found = next((m for m in METRICS if m.id == metric_id), None)
    if found is None:
        raise KeyError(f'no metric {metric_id!r}; the registry has {", ".join(m.id for m in METRICS)}')
    return found


@dataclasses.dataclass(frozen=True)
class Pair:
    """Two legs timed back to back in every round: ``leg``'s ratio is ``partner``'s window over its own."""

    leg: str
    partner: str


def pairs(metrics: Iterable[Metric]) -> list[Pair]:
    return [Pair(m.source.leg, m.source.partner) for m in metrics if m.kind.paired]


def pipeline_metrics(names: Iterable[str]) -> tuple[Metric, ...]:
    """A pipeline's metrics for its legs ``names``: placement, calls, bytes, work, and against the ceiling."""
    out: list[Metric] = []
    for name in (name for name in LEGS if name in set(names)):
        source, transformed = SampleSource(name), name != 'ceiling'
        out += [Metric(f'{name}: placement', rule.PLACEMENT_AS_BEFORE, source, Gate.ALWAYS)] if transformed else []
        out += [Metric(f'{name}: calls per step', rule.CALLS, source, Gate.ALWAYS)] if transformed else []
        out += [Metric(f'{name}: bytes per step', rule.BYTES, source, Gate.ALWAYS)]
        out += [Metric(f'{name}: work per call', rule.WORK, source, Gate.ALWAYS)] if transformed else []
        beside = SampleSource(name, 'ceiling')
        out += [Metric(f'{name}/ceiling', rule.BESIDE, beside, Gate.ALWAYS)] if transformed else []
    return tuple(out)
