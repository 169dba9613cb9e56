"""The legs and the metrics, in two tables: the one place that names a leg or a metric.

:data:`LEGS` is the leg vocabulary of both benches and the docs: each name is one ``DataSpec`` argument, with or
without the shim at a stage, on every release. :data:`METRICS` are the reference bench's metrics,
:func:`pipeline_metrics` a pipeline's; each has a *kind* (:mod:`compatshim.bench.rule`) that reads, judges and shows
its samples. Imports nothing heavy.
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

__all__ = ['COMPARABLE_BY', 'LEGS', 'METRICS', 'PIPELINE_COMPARABLE_BY', 'Gate', 'Leg', 'Metric', 'metric']

#: Composer's own ``batch_transforms`` and ``microbatch_transforms`` exist from 0.27.0.
NATIVE = (Family.DROPPED, Family.REJECTED)


@dataclasses.dataclass(frozen=True)
class Leg:
    """One way of passing the transform: as the DataSpec argument ``argument`` (``None``: no transform, the ceiling),
    with the shim enabled at ``stage`` (``None``: off)."""

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
#: The overhead probes (:mod:`compatshim.bench.reference`), sampled in every round.
PROBES: tuple[str, ...] = ('hook-batch', 'hook-microbatch', 'monitor')
#: The fingerprint keys that must match for two reference results to measure the same workload.
COMPARABLE_BY: tuple[str, ...] = ('size', 'workload_version')
#: What must match for a pipeline baseline to compare: the same pipeline (MODULE:CALLABLE), bench size, device,
#: samples per step, microbatch size and engine; not the Composer or torch release (an upgrade is what it is for).
PIPELINE_COMPARABLE_BY = ('pipeline', 'size', 'device', 'samples_per_step', 'microbatch_size', 'workload_version')


class Gate(Word):
    """Where a metric is judged: where the shim patches, where it must patch nothing, everywhere, nowhere."""

    AFFECTED = 'affected'
    UNAFFECTED = 'unaffected'
    ALWAYS = 'always'
    NEVER = 'never'


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric: its id (in judgements, reports, the last line of a failed run), its kind, where its numbers are,
    where it is gated, on which devices, and its column in the report's headline ('': none)."""

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
        """Whether this metric means something on ``result``'s release (gated there, or reported)."""
        return {Gate.AFFECTED: result.affected, Gate.UNAFFECTED: not result.affected}.get(self.gate, True)

    def gated_for(self, result: Result) -> bool:
        """Whether this metric is judged on ``result`` (its release, device and size)."""
        size = result.fingerprint.get('size', {}).get('name')
        where = self.gate is not Gate.NEVER and self.applies(result) and result.device in self.devices
        return where and (self.kind.sizes is None or size in self.kind.sizes)

    def read(self, result: Optional[Result]) -> list[Any]:
        """Its samples in ``result`` (empty: not measured there)."""
        return [] if result is None else self.kind.read(self.source, result)

    def show(self, result: Optional[Result]) -> str:
        return self.kind.show(self.read(result))


def _ratio(name: str, partner: str, gate: Gate, devices: tuple[str, ...] = DEVICES) -> Metric:
    return Metric(f'{name}/{partner}', rule.RATIO, SampleSource(name, partner), gate, devices, f'{name} / {partner}')


def _cost(path: str, tail: str, probe: str, name: str, limit: Kind, gate: Gate, title: str) -> tuple[Metric, ...]:
    """A path of compatshim's: its share of a step of the leg ``name`` in the same round, held to its limit (gated), its
    path over the direct path (unlike work) and its µs per batch (figures)."""
    return (
        Metric(f'{path} share of a step{tail}', limit, SampleSource(name, probe=probe), gate, title=title),
        Metric(f'{path} path / direct{tail}', rule.OVERHEAD, SampleSource(probe=probe), Gate.NEVER),
        Metric(f'{path} µs/batch{tail}', rule.FIGURE, SampleSource(probe=probe), Gate.NEVER),
    )


#: compatshim's own cost, probe by probe: what it is, and its three metrics (the report's table).
COSTS: tuple[tuple[str, tuple[Metric, ...]], ...] = (
    *((f'hook, stage {stage}', _cost('hook', f' ({stage})', f'hook-{stage}', f'shim-{stage}', rule.HOOK_SHARE,
                                     Gate.AFFECTED, f'hook share ({short})'))
      for stage, short in (('batch', 'batch'), ('microbatch', 'mb'))),
    ('monitor, one train step',
     _cost('monitor', '', 'monitor', 'shim-batch', rule.MONITOR_SHARE, Gate.ALWAYS, 'monitor share')),
)  # fmt: skip
METRICS: tuple[Metric, ...] = (
    # Same work, same rounds: only the shim can move these. shim-batch's partner is the host path of the release:
    # plain device_transforms on 0.25-0.26 (which runs it on the host), the batch_transforms workaround on 0.27+. On
    # cuda/mps that is different work (the device against the host): the speed-up, reported there.
    _ratio('shim-batch', 'unpatched', Gate.AFFECTED, ('cpu',)),
    _ratio('shim-batch', 'native-batch', Gate.AFFECTED, ('cpu',)),
    _ratio('shim-microbatch', 'native-microbatch', Gate.AFFECTED),
    *(metric for _, cost in COSTS for metric in cost),
    # Counts: what crosses on the recipe workload; checks, whatever the timings.
    *(Metric(f'bytes per step (recipe {name})', rule.BYTES, SampleSource(name, recipe=True), Gate.AFFECTED,
             title=f'recipe bytes ({t})') for name, t in (('shim-batch', 'shim-batch'), ('shim-microbatch', 'mb'))),
    *(Metric(f'placement ({"recipe " if recipe else ""}{name})', rule.ON_DEVICE, SampleSource(name, recipe=recipe),
             Gate.ALWAYS) for recipe in (False, True) for name in ('shim-batch', 'shim-microbatch')),
    Metric('patches on an unaffected release', rule.NOTHING_PATCHED, SampleSource(), Gate.UNAFFECTED),
    # The transforms' work per call, counted: the shim makes them do what 0.24.1 did (at stage microbatch the same
    # work in two calls of half the batch).
    *(Metric(f'work per call ({"recipe" if recipe else "augment"} {name})', rule.WORK,
             SampleSource(name, recipe=recipe), Gate.AFFECTED)
      for recipe in (True, False) for name in ('shim-batch', 'shim-microbatch')),
)  # fmt: skip


def metric(metric_id: str) -> Metric:
    """The metric of that id (``KeyError`` naming the ids there are)."""
    found = next((m for m in METRICS if m.id == metric_id), None)
    if found is None:
        raise KeyError(f'no metric {metric_id!r}; the registry has {", ".join(m.id for m in METRICS)}')
    return found


@dataclasses.dataclass(frozen=True)
class Pair:
    """Two legs the engine times back to back in every round: ``leg``'s ratio is ``partner``'s window beside it over its
    own, kept under the partner's name (a leg may have more than one partner)."""

    leg: str
    partner: str


def pairs(metrics: Iterable[Metric]) -> list[Pair]:
    """The pairs of the same-run ratios among ``metrics``: what the engine runs back to back."""
    return [Pair(m.source.leg, m.source.partner) for m in metrics if m.kind.paired]


def pipeline_metrics(names: Iterable[str]) -> tuple[Metric, ...]:
    """The metrics of a pipeline's legs ``names`` (those of the run and of its baseline): per leg its placement, calls
    and bytes per step, exactly, and, timed, its throughput against the ceiling leg of the same rounds."""
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
