"""The comparison rule: each gated metric of a bench result against its baseline, one statistic, one minimum effect.

    A metric's change is that of its median: current / baseline - 1 for a ratio or bytes, current - baseline for an
    overhead in µs per batch. It is a *regression* when it is worse by more than the minimum effect (MIN_EFFECT, 5%;
    MIN_EFFECT_US, 20 µs) and a one-sided Mann-Whitney U test of the samples says worse with p < ALPHA (0.01);
    *improved* in the mirror case (the baseline is stale: re-record it); *inconclusive* when the change is beyond the
    minimum effect but the test does not support it, or there is no baseline; *not comparable* when the baseline
    measured another workload (size or version): not judged; *ok* otherwise. Bytes per step are deterministic: beyond
    the minimum effect is enough. Gated (compatshim/bench/metrics.py), where the shim patches: the ratios of two legs
    doing the same work in the same rounds (shim-microbatch / native-microbatch; shim-batch / unpatched on cpu), the
    hook overhead, the bytes moved by the shim legs; everywhere: the monitor's overhead, the shim legs on the device and
    stage batch coherent, nothing patched on an unaffected release. µs compare only on the machine that recorded them.
    Absolute throughput is reported, never judged. Any regression exits 1, and so does a release without a baseline
    where its device has some.

Why these two numbers (as asv compare does: a factor and a rank test): the rank test is what makes a gate quiet on
a shared machine — a run of noisy rounds can look far off and mean nothing, and the test says so; the minimum effect
is what makes it quiet on a calm one — two sessions of unchanged code differ, significantly, by a little (here, with
windows timed in CPU time: within 1% of the baselines, also under a load of 7-9 on 2 cores). 5% is above that and
below what a real regression moves: a planted 20% slower transform moved the ratios by 12%.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Optional

from compatshim.bench.metrics import CHECKED_LEGS, METRICS, MIN_EFFECT, MIN_EFFECT_US, Metric, comparable
from compatshim.bench.results import BenchResult

__all__ = [
    'ALPHA',
    'MATCH_KEYS',
    'MIN_EFFECT',
    'MIN_EFFECT_US',
    'OUTCOMES',
    'Judgement',
    'compare_samples',
    'judge',
    'mann_whitney_p',
    'worst',
]

#: Significance level of the one-sided Mann-Whitney U test behind a regression or an improvement.
ALPHA = 0.01
#: The outcomes of a metric, worst first.
OUTCOMES: tuple[str, ...] = ('regression', 'not comparable', 'inconclusive', 'improved', 'ok')
#: Fingerprint keys that must match for microseconds to compare (the machine, not the software under test).
MATCH_KEYS: tuple[str, ...] = ('cpu_model', 'cpu_count', 'torch_threads', 'gpu', 'device')


@dataclasses.dataclass(frozen=True)
class Judgement:
    """The outcome of one metric, with the numbers behind it (for the report and the last line of a failed run)."""

    metric: str
    outcome: str
    reason: str
    baseline: Optional[float] = None
    current: Optional[float] = None
    threshold: str = ''  # e.g. '-10%' or '+20 µs'
    p: Optional[float] = None

    def line(self, env: str) -> str:
        """One line that names the env, the metric, the baseline, the current value and the rule's threshold."""
        numbers = '' if self.current is None else f': baseline {_fmt(self.baseline)}, now {_fmt(self.current)}'
        limit = f', threshold {self.threshold}' if self.threshold else ''
        test = f' (rank test p = {self.p:.1g})' if self.p is not None else ''
        return f'{self.outcome.upper()} {env} {self.metric}{numbers}{limit}{test}: {self.reason}'


def _fmt(value: Optional[float]) -> str:
    return 'none' if value is None else f'{value:.4g}'


def mann_whitney_p(lower: list[float], higher: list[float]) -> float:
    """One-sided Mann-Whitney U test: the p-value for "``lower`` tends to be smaller than ``higher``".

    Normal approximation with the tie and continuity corrections (conservative for small samples: 3 values a side
    can never reach :data:`ALPHA`, so a tiny run is never a regression by itself).
    """
    n1, n2 = len(lower), len(higher)
    pooled = sorted([(value, 0) for value in lower] + [(value, 1) for value in higher])
    rank_sum, ties, i = 0.0, 0.0, 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank_sum += (i + j + 2) / 2 * sum(1 for _, side in pooled[i : j + 1] if side == 0)  # mid-rank of a tie group
        ties += (j - i + 1) ** 3 - (j - i + 1)
        i = j + 1
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:
        return 1.0  # every value equal: no evidence either way
    u = rank_sum - n1 * (n1 + 1) / 2  # small when ``lower`` ranks low
    return 0.5 * math.erfc(-((u - n1 * n2 / 2 + 0.5) / math.sqrt(variance)) / math.sqrt(2))


def compare_samples(
    metric: str, current: list[float], baseline: Optional[list[float]], *, microseconds: bool = False
) -> Judgement:
    """Apply the rule (module docstring) to one metric's samples: a ratio (higher is better), or, with
    ``microseconds``, the hook overhead (lower is better)."""
    now = statistics.median(current)
    if not baseline:
        return Judgement(metric, 'inconclusive', 'no baseline', current=now)
    then = statistics.median(baseline)
    if microseconds:  # lower is better
        change, threshold, shift = now - then, f'+{MIN_EFFECT_US:g} µs', f'{now - then:+.1f} µs/batch'
        worse, better = change > MIN_EFFECT_US, change < -MIN_EFFECT_US
    else:
        change, threshold, shift = now / then - 1, f'-{MIN_EFFECT:.0%}', f'{now / then - 1:+.1%}'
        worse, better = change < -MIN_EFFECT, change > MIN_EFFECT
    # The one-sided test in the direction of the change: "current tends higher" or "current tends lower".
    rose = worse if microseconds else better
    p: Optional[float] = mann_whitney_p(baseline, current) if rose else mann_whitney_p(current, baseline)
    if not (worse or better):
        outcome, reason, p = 'ok', f'{shift}, within the minimum effect', None
    elif p is not None and p >= ALPHA:
        outcome, reason = 'inconclusive', f'{shift}, but the samples do not support it'
    elif worse:
        outcome, reason = 'regression', shift
    else:
        outcome, reason = 'improved', f'{shift}: the baseline is stale, re-record it'
    return Judgement(metric, outcome, reason, then, now, threshold, p)


def _placement(result: BenchResult) -> list[Judgement]:
    """The checked legs ran on the device, and stage batch once per step — in both workloads, whatever the timings."""
    out = []
    for workload, legs in (('', result.legs), ('recipe ', result.recipe.legs)):
        for name in CHECKED_LEGS:
            leg = legs.get(name)
            if leg is None or not leg.available:
                continue
            problem = ''
            if leg.placement != 'device':
                problem = f'the transform ran on the {leg.placement}, expected the device'
            elif name == 'shim-batch' and leg.coherence != 'coherent':
                problem = f'stage batch is {leg.coherence}, expected one call per step'
            out.append(Judgement(f'placement ({workload}{name})', 'regression' if problem else 'ok', problem or 'ok'))
    return out


def _judge(metric: Metric, result: BenchResult, baseline: Optional[BenchResult], unlike: Optional[str]) -> Judgement:
    now = metric.samples(result)
    if baseline is None:
        return Judgement(metric.id, 'inconclusive', 'no baseline', current=statistics.median(now))
    if unlike:
        return Judgement(metric.id, 'not comparable', f'another workload: {unlike}', current=statistics.median(now))
    other = [k for k in MATCH_KEYS if result.fingerprint.get(k) != baseline.fingerprint.get(k)]
    if metric.kind == 'us' and other:
        reason = f'baseline from another machine ({", ".join(other)}): µs do not compare'
        return Judgement(metric.id, 'inconclusive', reason, current=statistics.median(now))
    before = metric.samples(baseline)
    if metric.kind != 'bytes':
        return compare_samples(metric.id, now, before or None, microseconds=metric.kind == 'us')
    if not before:
        return Judgement(metric.id, 'inconclusive', 'no baseline', current=now[0])
    worse = now[0] > before[0] * (1 + MIN_EFFECT)  # deterministic: one value, no test
    reason = f'{now[0] - before[0]:+.0f} bytes/step' if worse else 'within the minimum effect'
    return Judgement(metric.id, 'regression' if worse else 'ok', reason, before[0], now[0], f'+{MIN_EFFECT:.0%}')


def judge(result: BenchResult, baseline: Optional[BenchResult]) -> list[Judgement]:
    """Every gated metric of ``result`` (:data:`~compatshim.bench.metrics.METRICS`) against ``baseline`` (``None``: no
    baseline), by the rule above."""
    out = _placement(result)
    if not result.affected:  # the shim legs run Composer's own code here: what the shim could do wrong is patch
        patched = ', '.join(result.patched_by_enable)
        outcome, reason = ('regression', f'enable() patched {patched}') if patched else ('ok', 'nothing patched')
        out.append(Judgement('patches on an unaffected release', outcome, reason))
    unlike = None if baseline is None else comparable(result, baseline)
    gated = [m for m in METRICS if m.gated_for(result) and m.samples(result)]
    return out + [_judge(m, result, baseline, unlike) for m in gated]


def worst(judgements: list[Judgement]) -> str:
    """The worst outcome of ``judgements`` (``ok`` for none)."""
    return min((j.outcome for j in judgements), key=OUTCOMES.index, default='ok')
