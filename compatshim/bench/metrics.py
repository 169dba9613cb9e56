"""The harness's metrics, in one table: what each one is, where its numbers come from, and where it is gated.

:data:`METRICS` is the only place that names a metric. ``measure`` schedules its back-to-back pairs from it and
computes its ratios from it, ``judge`` iterates it, and ``report`` and ``compatshim bench`` render from it: a renamed
or added metric is one row here. :data:`LEGS` names the bench's legs, :data:`CHECKED_LEGS` the ones whose placement
and coherence are checked, and :func:`comparable` says whether a baseline measured the same workload. Imports nothing
heavy.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from compatshim.bench.results import BenchResult

__all__ = [
    'CHECKED_LEGS',
    'COMPARABLE_BY',
    'DEVICES',
    'LEGS',
    'METRICS',
    'MIN_EFFECT',
    'MIN_EFFECT_US',
    'MONITOR_RATIO',
    'MONITOR_US',
    'Metric',
    'comparable',
    'metric',
]

#: The bench's legs, in report order: what a user gets without the shim (``device_transforms`` where the release still
#: calls it, else the ``batch_transforms`` workaround, on the host), the shim at each stage, Composer's own
#: ``microbatch_transforms`` (0.27+), and stage batch with the in-run monitor attached.
LEGS: tuple[str, ...] = ('unpatched', 'shim-batch', 'shim-microbatch', 'native-microbatch', 'shim-batch+monitor')
#: The legs whose placement (on the device) and coherence (stage batch: one call per step) are checked everywhere.
CHECKED_LEGS: tuple[str, ...] = ('shim-batch', 'shim-microbatch')
DEVICES: tuple[str, ...] = ('cpu', 'cuda', 'mps')
#: The smallest relative change of a ratio (or of bytes per step) that can be a regression.
MIN_EFFECT = 0.05
#: The smallest change of an overhead, in µs per batch, that can be a regression.
MIN_EFFECT_US = 20.0
#: The fingerprint keys that must match for two results to measure the same workload (else: *not comparable*).
COMPARABLE_BY: tuple[str, ...] = ('size', 'workload_version')


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric of a bench result.

    Attributes:
        id: Its name, in judgements, reports and the last line of a failed run.
        kind: ``ratio`` (per-round throughput of ``source[0]`` over ``source[1]``, higher is better), ``us`` (µs per
            batch from the result's field ``source[0]``, key ``source[1]`` if any; lower is better, judged only
            against a baseline of the same machine) or ``bytes`` (host→device bytes per step of the recipe leg
            ``source[0]``; deterministic, lower is better).
        source: Where its numbers come from (see ``kind``).
        gated: ``affected`` (where the shim patches), ``always``, or ``never`` (reported only).
        devices: The devices it is gated on.
        paired: Its two legs run back to back, A B B A, in every round (gated ratios of like work).
        title: Its column in the report's headline.
    """

    id: str
    kind: str
    source: tuple[str, ...]
    gated: str
    devices: tuple[str, ...] = DEVICES
    paired: bool = False
    title: str = ''

    @property
    def unit(self) -> str:
        return {'ratio': '×', 'us': 'µs/batch', 'bytes': 'bytes/step'}[self.kind]

    @property
    def min_effect(self) -> float:
        return MIN_EFFECT_US if self.kind == 'us' else MIN_EFFECT

    def gated_for(self, result: BenchResult) -> bool:
        """Whether this metric is judged on ``result`` (its release and device)."""
        where = self.gated == 'always' or (self.gated == 'affected' and result.affected)
        return where and result.device in self.devices

    def samples(self, result: Optional[BenchResult]) -> list[float]:
        """Its values in ``result`` (empty: not measured there)."""
        if result is None:
            return []
        if self.kind == 'ratio':
            return list(result.ratios.get(self.id, []))
        if self.kind == 'bytes':
            leg = result.recipe.legs.get(self.source[0])
            return [float(leg.h2d_bytes_per_step)] if leg is not None and leg.available else []
        found = getattr(result, self.source[0])
        return list(found.get(self.source[1], []) if len(self.source) > 1 else found)


METRICS: tuple[Metric, ...] = (
    # Same work, same rounds: only the shim can move these. On cuda/mps the unpatched leg transforms on the host and
    # shim-batch on the device: different work, that ratio is the speed-up (reported there).
    Metric(
        'shim-batch/unpatched',
        'ratio',
        ('shim-batch', 'unpatched'),
        'affected',
        ('cpu',),
        True,
        'shim-batch / unpatched',
    ),
    Metric(
        'shim-microbatch/native-microbatch',
        'ratio',
        ('shim-microbatch', 'native-microbatch'),
        'affected',
        paired=True,
        title='shim-microbatch / native-microbatch',
    ),
    Metric(
        'shim-microbatch/unpatched',
        'ratio',
        ('shim-microbatch', 'unpatched'),
        'never',
        title='shim-microbatch / unpatched',
    ),
    Metric(
        'shim-batch+monitor/shim-batch', 'ratio', ('shim-batch+monitor', 'shim-batch'), 'never', title='monitor leg'
    ),
    Metric('hook overhead µs/batch (batch)', 'us', ('hook_overhead_us', 'batch'), 'affected', title='hook µs (batch)'),
    Metric(
        'hook overhead µs/batch (microbatch)',
        'us',
        ('hook_overhead_us', 'microbatch'),
        'affected',
        title='hook µs (mb)',
    ),
    Metric('monitor overhead µs/batch', 'us', ('monitor_overhead_us',), 'always', title='monitor µs'),
    Metric('bytes per step (shim-batch)', 'bytes', ('shim-batch',), 'affected', title='recipe bytes (shim-batch)'),
    Metric('bytes per step (shim-microbatch)', 'bytes', ('shim-microbatch',), 'affected', title='recipe bytes (mb)'),
)


def metric(metric_id: str) -> Metric:
    """The metric of that id (``KeyError`` naming the ids there are)."""
    for found in METRICS:
        if found.id == metric_id:
            return found
    raise KeyError(f'no metric {metric_id!r}; the registry has {", ".join(m.id for m in METRICS)}')


#: What the in-run monitor costs: its µs per batch, and its timed leg against the same leg without it (reported).
MONITOR_US, MONITOR_RATIO = metric('monitor overhead µs/batch'), metric('shim-batch+monitor/shim-batch')


def _short(value: Any) -> Any:
    return value.get('name', value) if isinstance(value, dict) else value


def comparable(result: BenchResult, baseline: BenchResult) -> Optional[str]:
    """Why ``baseline`` did not measure the same workload as ``result`` (``None``: it did). A fingerprint from before
    ``workload_version`` existed measured version 1."""
    differ = []
    for key in COMPARABLE_BY:
        now, then = result.fingerprint.get(key, 1), baseline.fingerprint.get(key, 1)
        if now != then:
            differ.append(f'{key.replace("_", " ")} {_short(then)} in the baseline, {_short(now)} now')
    return '; '.join(differ) or None
