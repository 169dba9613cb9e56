"""The harness's metrics, in one table: what each one is, where its numbers come from, and where it is gated.

:data:`METRICS` is the only place that names a metric. Each row has a *kind* (:mod:`compatshim.bench.rule`), which
knows how to read the metric's samples from a result, how to judge them and how to show them: ``measure`` schedules
its back-to-back pairs from the registry, ``judge`` iterates it, and ``report`` and ``compatshim bench`` render from
it; a renamed or added metric is one row here. :data:`LEGS` names the bench's legs, :data:`CHECKED_LEGS` the ones
whose placement and coherence are checked, :data:`PROBES` the overhead probes measured in every round, and
:func:`comparable` says whether a baseline measured the same workload. Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional

from compatshim._support import DEVICES
from compatshim.bench import rule
from compatshim.bench.rule import Kind

if TYPE_CHECKING:
    from compatshim.bench.results import Result

__all__ = [
    'CHECKED_LEGS',
    'COMPARABLE_BY',
    'COSTS',
    'GATES',
    'LEGS',
    'METRICS',
    'MONITOR_OVERHEAD',
    'MONITOR_SHARE',
    'MONITOR_US',
    'PIPELINE_COMPARABLE_BY',
    'PIPELINE_LEGS',
    'PROBES',
    'Metric',
    'comparable',
    'metric',
    'pipeline_metrics',
]

#: The bench's legs, in report order: what a user gets without the shim (``device_transforms`` where the release still
#: calls it, else the ``batch_transforms`` workaround, on the host), the shim at each stage, and Composer's own
#: ``microbatch_transforms`` (0.27+). (What the in-run monitor costs is the ``monitor`` probe's.)
LEGS: tuple[str, ...] = ('unpatched', 'shim-batch', 'shim-microbatch', 'native-microbatch')
#: The legs whose placement (on the device) and coherence (stage batch: one call per step) are checked everywhere.
CHECKED_LEGS: tuple[str, ...] = ('shim-batch', 'shim-microbatch')
#: The overhead probes (:mod:`compatshim.bench.overhead`), sampled in every round: the shim's hook path at each stage
#: (where the shim patches) and the monitor's events, each against the direct path.
PROBES: tuple[str, ...] = ('hook-batch', 'hook-microbatch', 'monitor')
#: The fingerprint keys that must match for two results to measure the same workload (else: *not comparable*).
COMPARABLE_BY: tuple[str, ...] = ('size', 'workload_version')
#: Where a metric can be gated: where the shim patches, where it must patch nothing, everywhere, nowhere (reported).
GATES: tuple[str, ...] = ('affected', 'unaffected', 'always', 'never')


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric of a bench result.

    Attributes:
        id: Its name, in judgements, reports and the last line of a failed run.
        kind: What it is (:mod:`compatshim.bench.rule`): how its samples are read from ``source``, judged and shown.
        source: Where its numbers come from, as its kind reads them (legs, a probe, a workload and a leg).
        gated: One of :data:`GATES`.
        devices: The devices it is gated on.
        paired: Its two legs run back to back, A B B A, in every round (gated ratios of like work).
        title: Its column in the report's headline ('' : not in the headline).
    """

    id: str
    kind: Kind
    source: tuple[str, ...]
    gated: str
    devices: tuple[str, ...] = DEVICES
    paired: bool = False
    title: str = ''

    def __post_init__(self) -> None:
        if self.gated not in GATES:
            raise ValueError(f'metric {self.id!r}: gated={self.gated!r}; choose one of {", ".join(GATES)}')
        if self.gated != 'never' and not self.kind.sentence():
            raise ValueError(f'metric {self.id!r}: a {self.kind.name} is reported, never gated')

    def applies(self, result: Result) -> bool:
        """Whether this metric means something on ``result``'s release (gated there, or reported)."""
        return {'affected': result.affected, 'unaffected': not result.affected}.get(self.gated, True)

    def gated_for(self, result: Result) -> bool:
        """Whether this metric is judged on ``result`` (its release, device and size)."""
        size = result.fingerprint.get('size', {}).get('name')
        where = self.gated != 'never' and self.applies(result) and result.device in self.devices
        return where and (self.kind.sizes is None or size in self.kind.sizes)

    def read(self, result: Optional[Result]) -> list[Any]:
        """Its samples in ``result`` (empty: not measured there)."""
        return [] if result is None else self.kind.read(self.source, result)

    def show(self, result: Optional[Result]) -> str:
        """Its samples in ``result`` as a report cell."""
        return self.kind.show(self.read(result))


def _ratio(a: str, b: str, gated: str, devices: tuple[str, ...] = DEVICES, title: str = '') -> Metric:
    return Metric(f'{a}/{b}', rule.RATIO, (a, b), gated, devices, paired=gated != 'never', title=title)


METRICS: tuple[Metric, ...] = (
    # Same work, same rounds: only the shim can move these. On cuda/mps the unpatched leg transforms on the host and
    # shim-batch on the device: different work, that ratio is the speed-up (reported there).
    _ratio('shim-batch', 'unpatched', 'affected', ('cpu',), 'shim-batch / unpatched'),
    _ratio('shim-microbatch', 'native-microbatch', 'affected', title='shim-microbatch / native-microbatch'),
    _ratio('shim-microbatch', 'unpatched', 'never'),
    # compatshim's own cost: its share of a step of the same round, held to a limit (gated); its path against the
    # direct path (unlike work) and its µs: figures.
    Metric(
        'hook share of a step (batch)',
        rule.HOOK_SHARE,
        ('hook-batch', 'shim-batch'),
        'affected',
        title='hook share (batch)',
    ),
    Metric(
        'hook share of a step (microbatch)',
        rule.HOOK_SHARE,
        ('hook-microbatch', 'shim-microbatch'),
        'affected',
        title='hook share (mb)',
    ),
    Metric('monitor share of a step', rule.MONITOR_SHARE, ('monitor', 'shim-batch'), 'always', title='monitor share'),
    Metric('hook path / direct (batch)', rule.OVERHEAD, ('hook-batch',), 'never'),
    Metric('hook path / direct (microbatch)', rule.OVERHEAD, ('hook-microbatch',), 'never'),
    Metric('monitor path / direct', rule.OVERHEAD, ('monitor',), 'never'),
    Metric('hook µs/batch (batch)', rule.FIGURE, ('hook-batch',), 'never'),
    Metric('hook µs/batch (microbatch)', rule.FIGURE, ('hook-microbatch',), 'never'),
    Metric('monitor µs/batch', rule.FIGURE, ('monitor',), 'never'),
    # Counts.
    *(
        Metric(f'bytes per step ({leg})', rule.BYTES, ('recipe', leg), 'affected', title=f'recipe bytes ({short})')
        for leg, short in (('shim-batch', 'shim-batch'), ('shim-microbatch', 'mb'))
    ),
    # Checks, whatever the timings.
    *(
        Metric(f'placement ({workload}{leg})', rule.PLACEMENT, (workload.strip() or 'augment', leg), 'always')
        for workload in ('', 'recipe ')
        for leg in CHECKED_LEGS
    ),
    Metric('patches on an unaffected release', rule.NOTHING_PATCHED, (), 'unaffected'),
)


def metric(metric_id: str) -> Metric:
    """The metric of that id (``KeyError`` naming the ids there are)."""
    for found in METRICS:
        if found.id == metric_id:
            return found
    raise KeyError(f'no metric {metric_id!r}; the registry has {", ".join(m.id for m in METRICS)}')


#: What the in-run monitor costs: its share of a step (gated, a limit), its path against the direct path and its µs per
#: batch (figures).
MONITOR_SHARE, MONITOR_OVERHEAD, MONITOR_US = (
    metric('monitor share of a step'),
    metric('monitor path / direct'),
    metric('monitor µs/batch'),
)
#: compatshim's own cost, probe by probe: what it is, its gated share of a step, its path over the direct path, its
#: µs per batch (the report's table).
COSTS: tuple[tuple[str, Metric, Metric, Metric], ...] = (
    (
        'hook, stage batch',
        metric('hook share of a step (batch)'),
        metric('hook path / direct (batch)'),
        metric('hook µs/batch (batch)'),
    ),
    (
        'hook, stage microbatch',
        metric('hook share of a step (microbatch)'),
        metric('hook path / direct (microbatch)'),
        metric('hook µs/batch (microbatch)'),
    ),
    ('monitor, one train step', MONITOR_SHARE, MONITOR_OVERHEAD, MONITOR_US),
)


#: A pipeline's legs (``compatshim bench --pipeline``), in report order: what the release does with plain
#: ``device_transforms``, Composer's own transforms a user would migrate to (0.27+), the shim at each stage, and the
#: ceiling: the same steps on batches already transformed and on the device.
PIPELINE_LEGS: tuple[str, ...] = (
    'unpatched',
    'native-batch',
    'native-microbatch',
    'shim-batch',
    'shim-microbatch',
    'ceiling',
)
#: What must match for a pipeline baseline to compare: the same pipeline (MODULE:CALLABLE), bench size, device,
#: samples per step and microbatch size; not the Composer or torch release (an upgrade is what the gate is for).
PIPELINE_COMPARABLE_BY: tuple[str, ...] = ('pipeline', 'size', 'device', 'samples_per_step', 'microbatch_size')


def pipeline_metrics(legs: Iterable[str]) -> tuple[Metric, ...]:
    """The metrics of a pipeline's legs (those of the run and of its baseline): per leg its placement, calls and
    bytes per step, exactly, and, timed, its throughput against the ceiling leg of the same rounds."""
    named = [leg for leg in PIPELINE_LEGS if leg in set(legs)]
    out: list[Metric] = []
    for leg in named:
        source = ('pipeline', leg)
        if leg != 'ceiling':
            out += [
                Metric(f'{leg}: placement', rule.PLACEMENT_AS_BEFORE, source, 'always'),
                Metric(f'{leg}: calls per step', rule.CALLS_AS_BEFORE, source, 'always'),
            ]
        out.append(Metric(f'{leg}: bytes per step', rule.BYTES, source, 'always'))
        if leg != 'ceiling':
            out.append(Metric(f'{leg}/ceiling', rule.BESIDE, (leg,), 'always'))
    return tuple(out)


def _short(value: Any) -> Any:
    return value.get('name', value) if isinstance(value, dict) else value


def comparable(result: Any, baseline: Any, keys: tuple[str, ...] = COMPARABLE_BY) -> Optional[str]:
    """Why ``baseline`` did not measure the same workload as ``result`` (``None``: it did), by the fingerprint
    ``keys``."""
    differ = []
    for key in keys:
        now, then = result.fingerprint.get(key), baseline.fingerprint.get(key)
        if now != then:
            differ.append(f'{key.replace("_", " ")} {_short(then)} in the baseline, {_short(now)} now')
    return '; '.join(differ) or None
