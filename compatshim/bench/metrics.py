"""The legs and the metrics, in two tables: the one place that names a leg or a metric.

:data:`LEGS` is the leg vocabulary of both benches and the docs: each name is one ``DataSpec`` argument, with or
without the shim at a stage, on every release (``compatshim bench`` runs them all but the ceiling; ``compatshim bench
--pipeline`` all). :data:`METRICS` are the reference bench's metrics, :func:`pipeline_metrics` a pipeline's; each has a
*kind* (:mod:`compatshim.bench.rule`) that reads its samples from a result, judges and shows them; the engine pairs
legs from them, the judge iterates them, the report and the CLI render them. Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Optional

from compatshim._placement import Word
from compatshim._support import DEVICES, Family
from compatshim.bench import rule
from compatshim.bench.results import Result
from compatshim.bench.rule import Kind, Source

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

    def missing(self, family: Optional[Family]) -> str:
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
#: The overhead probes (:mod:`compatshim.bench.overhead`), sampled in every round.
PROBES: tuple[str, ...] = ('hook-batch', 'hook-microbatch', 'monitor')
#: The fingerprint keys that must match for two reference results to measure the same workload.
COMPARABLE_BY: tuple[str, ...] = ('size', 'workload_version')
#: What must match for a pipeline baseline to compare: the same pipeline (MODULE:CALLABLE), bench size, device,
#: samples per step, microbatch size and engine; not the Composer or torch release (an upgrade is what it is for).
PIPELINE_COMPARABLE_BY: tuple[str, ...] = (
    'pipeline',
    'size',
    'device',
    'samples_per_step',
    'microbatch_size',
    'workload_version',
)


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
    source: Source
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


def _ratio(leg: str, partner: str, gate: Gate, devices: tuple[str, ...] = DEVICES) -> Metric:
    return Metric(f'{leg}/{partner}', rule.RATIO, Source(leg, partner), gate, devices, f'{leg} / {partner}')


def _cost(what: str, probe: str, leg: str, kind: Kind, gate: Gate, title: str = '') -> Metric:
    return Metric(what, kind, Source(leg, probe=probe), gate, title=title)


METRICS: tuple[Metric, ...] = (
    # Same work, same rounds: only the shim can move these. shim-batch's partner is the host path of the release:
    # plain device_transforms on 0.25-0.26 (which runs it on the host), the batch_transforms workaround on 0.27+. On
    # cuda/mps that is different work (the device against the host): the speed-up, reported there.
    _ratio('shim-batch', 'unpatched', Gate.AFFECTED, ('cpu',)),
    _ratio('shim-batch', 'native-batch', Gate.AFFECTED, ('cpu',)),
    _ratio('shim-microbatch', 'native-microbatch', Gate.AFFECTED),
    # compatshim's own cost: its share of a step of the same round, held to a limit (gated); its path over the direct
    # path (unlike work) and its µs (figures).
    *(
        metric
        for stage, short in (('batch', 'batch'), ('microbatch', 'mb'))
        for metric in (
            _cost(
                f'hook share of a step ({stage})',
                f'hook-{stage}',
                f'shim-{stage}',
                rule.HOOK_SHARE,
                Gate.AFFECTED,
                f'hook share ({short})',
            ),
            _cost(f'hook path / direct ({stage})', f'hook-{stage}', '', rule.OVERHEAD, Gate.NEVER),
            _cost(f'hook µs/batch ({stage})', f'hook-{stage}', '', rule.FIGURE, Gate.NEVER),
        )
    ),
    _cost('monitor share of a step', 'monitor', 'shim-batch', rule.MONITOR_SHARE, Gate.ALWAYS, 'monitor share'),
    _cost('monitor path / direct', 'monitor', '', rule.OVERHEAD, Gate.NEVER),
    _cost('monitor µs/batch', 'monitor', '', rule.FIGURE, Gate.NEVER),
    # Counts: what crosses on the recipe workload.
    *(
        Metric(
            f'bytes per step ({leg})',
            rule.BYTES,
            Source(leg, recipe=True),
            Gate.AFFECTED,
            title=f'recipe bytes ({short})',
        )
        for leg, short in (('shim-batch', 'shim-batch'), ('shim-microbatch', 'mb'))
    ),
    # Checks, whatever the timings.
    *(
        Metric(
            f'placement ({"recipe " if recipe else ""}{leg})', rule.ON_DEVICE, Source(leg, recipe=recipe), Gate.ALWAYS
        )
        for recipe in (False, True)
        for leg in ('shim-batch', 'shim-microbatch')
    ),
    Metric('patches on an unaffected release', rule.NOTHING_PATCHED, Source(), Gate.UNAFFECTED),
)


def metric(metric_id: str) -> Metric:
    """The metric of that id (``KeyError`` naming the ids there are)."""
    for found in METRICS:
        if found.id == metric_id:
            return found
    raise KeyError(f'no metric {metric_id!r}; the registry has {", ".join(m.id for m in METRICS)}')


#: compatshim's own cost, probe by probe: what it is, its gated share of a step, its path over the direct path, its
#: µs per batch (the report's table).
COSTS: tuple[tuple[str, Metric, Metric, Metric], ...] = tuple(
    (
        what,
        metric(f'{path} share of a step{tail}'),
        metric(f'{path} path / direct{tail}'),
        metric(f'{path} µs/batch{tail}'),
    )
    for what, path, tail in (
        ('hook, stage batch', 'hook', ' (batch)'),
        ('hook, stage microbatch', 'hook', ' (microbatch)'),
        ('monitor, one train step', 'monitor', ''),
    )
)


def pairs(metrics: Iterable[Metric]) -> list[tuple[str, str]]:
    """The (leg, partner) pairs of the same-run ratios among ``metrics``: what the engine runs back to back."""
    return [(m.source.leg, m.source.partner) for m in metrics if m.kind.paired]


def pipeline_metrics(legs: Iterable[str]) -> tuple[Metric, ...]:
    """The metrics of a pipeline's legs (those of the run and of its baseline): per leg its placement, calls and
    bytes per step, exactly, and, timed, its throughput against the ceiling leg of the same rounds."""
    named = [leg for leg in LEGS if leg in set(legs)]
    out: list[Metric] = []
    for leg in named:
        source = Source(leg)
        if leg != 'ceiling':
            out += [
                Metric(f'{leg}: placement', rule.PLACEMENT_AS_BEFORE, source, Gate.ALWAYS),
                Metric(f'{leg}: calls per step', rule.CALLS, source, Gate.ALWAYS),
            ]
        out.append(Metric(f'{leg}: bytes per step', rule.BYTES, source, Gate.ALWAYS))
        if leg != 'ceiling':
            out.append(Metric(f'{leg}/ceiling', rule.BESIDE, Source(leg, 'ceiling'), Gate.ALWAYS))
    return tuple(out)
