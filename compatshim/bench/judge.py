"""The judge: every gated metric of a bench result (:data:`~compatshim.bench.metrics.METRICS`) against its baseline,
each by its kind's rule (:mod:`compatshim.bench.rule`, whose :data:`~compatshim.bench.rule.RULE` states it).

Why two numbers, as asv compare does (a factor and a rank test): the rank test is what makes a gate quiet on a shared
machine — a run of noisy rounds can look far off and mean nothing, and the test says so; the minimum effect is what
makes it quiet on a calm one — two sessions of unchanged code differ, significantly, by a little. Neither makes a
gate quiet on *another* machine: only measuring every gated timing against something in the same rounds does that,
which is why no absolute time is judged. Imports nothing heavy.
"""

from __future__ import annotations

from typing import Optional, Union

from compatshim.bench.metrics import COMPARABLE_BY, METRICS, Metric, comparable
from compatshim.bench.results import BenchResult, PipelineResult
from compatshim.bench.rule import ALPHA, OUTCOMES, RULE, Judgement, mann_whitney_p, worst

__all__ = ['ALPHA', 'OUTCOMES', 'RULE', 'Judgement', 'judge', 'mann_whitney_p', 'worst']


def judge(
    result: Union[BenchResult, PipelineResult],
    baseline: Optional[Union[BenchResult, PipelineResult]],
    metrics: tuple[Metric, ...] = METRICS,
    comparable_by: tuple[str, ...] = COMPARABLE_BY,
) -> list[Judgement]:
    """Every gated metric of ``result`` that was measured (``metrics``: the bench's registry, or a pipeline's), against
    ``baseline`` (``None``: no baseline), which must match ``result`` in the fingerprint keys ``comparable_by``."""
    unlike = None if baseline is None else comparable(result, baseline, comparable_by)
    out = []
    for metric in metrics:
        now = metric.read(result) if metric.gated_for(result) else []
        if not now:
            continue
        kind, current = metric.kind, metric.kind.central(now)
        if not kind.against_baseline:
            out.append(kind.judge(metric.id, now, None))
        elif baseline is None:
            out.append(Judgement(metric.id, 'inconclusive', 'no baseline', current=current, unit=kind.unit))
        elif unlike:
            reason = f'another workload: {unlike}'
            out.append(Judgement(metric.id, 'not comparable', reason, current=current, unit=kind.unit))
        else:
            before = metric.read(baseline)
            if before:
                out.append(kind.judge(metric.id, now, before))
            else:
                reason = 'not measured in the baseline'
                out.append(Judgement(metric.id, 'inconclusive', reason, current=current, unit=kind.unit))
    return out
