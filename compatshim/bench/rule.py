"""The comparison rule: the kinds of metric, each with how it reads its samples, its minimum effect or limit, and its
test.

Only what another machine cannot move is gated: counts (bytes, calls, placement) exactly; same-run ratios of *like*
work (two legs doing the same work by different routes, back to back in the same rounds); and compatshim's own cost
as a share of a step held to a stated limit (the product's promise), set far above what any machine measured. Ratios
of unlike work (a path of compatshim's over the direct path) and absolute times are figures: reported, never judged.
The one exception is the pipeline bench's leg against its ceiling, which judges a user's pipeline against the
baseline the user saved on their own runner. :data:`RULE` states the whole rule in one paragraph; the judge applies
it, the report and the docs quote it. Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import TYPE_CHECKING, Any, Optional

from compatshim.bench.results import BenchResult, Overheads, quartiles

if TYPE_CHECKING:
    from compatshim.bench.results import Result

__all__ = [
    'ALPHA',
    'KINDS',
    'OUTCOMES',
    'RULE',
    'Beside',
    'Bytes',
    'Check',
    'Count',
    'Figure',
    'Judgement',
    'Kind',
    'Overhead',
    'Placement',
    'Ratio',
    'Share',
    'mann_whitney_p',
    'worst',
]

#: Significance level of the one-sided Mann-Whitney U test behind a regression or an improvement.
ALPHA = 0.01
#: The outcomes of a metric, worst first.
OUTCOMES: tuple[str, ...] = ('regression', 'not comparable', 'inconclusive', 'improved', 'ok')


@dataclasses.dataclass(frozen=True)
class Judgement:
    """The outcome of one metric, with the numbers behind it (for the report and the last line of a failed run)."""

    metric: str
    outcome: str
    reason: str
    baseline: Optional[float] = None
    current: Optional[float] = None
    threshold: str = ''  # e.g. '-5%', '+25%', '≤ 1%'
    p: Optional[float] = None
    unit: str = ''  # what follows a number in :meth:`line` ('×', '%', ' bytes/step')

    def line(self, env: str) -> str:
        """One line that names the env, the metric, the baseline, the current value and the rule's threshold."""
        numbers = ''
        if self.current is not None:
            before = '' if self.baseline is None else f'baseline {_fmt(self.baseline)}{self.unit}, '
            numbers = f': {before}now {_fmt(self.current)}{self.unit}'
        limit = f', threshold {self.threshold}' if self.threshold else ''
        test = f' (rank test p = {self.p:.1g})' if self.p is not None else ''
        return f'{self.outcome.upper()} {env} {self.metric}{numbers}{limit}{test}: {self.reason}'


def _fmt(value: float) -> str:
    """A count as a whole number (``393,508``), anything else to four significant digits."""
    return f'{value:,.0f}' if float(value).is_integer() and abs(value) >= 1000 else f'{value:.4g}'


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


def worst(judgements: list[Judgement]) -> str:
    """The worst outcome of ``judgements`` (``ok`` for none)."""
    return min((j.outcome for j in judgements), key=OUTCOMES.index, default='ok')


def _spread(samples: list[float], fmt: str) -> str:
    if not samples:
        return '—'
    q1, median, q3 = quartiles(samples)
    return f'{median:{fmt}} ± {q3 - q1:{fmt}}'


class Kind:
    """What a metric is: how it reads its samples from a result, how it is judged, how it is shown.

    Attributes:
        name: The kind's name in the registry and the docs.
        unit: What follows its numbers.
        against_baseline: Judged against a baseline (a relative change); ``False``: on the result alone (a check, a
            limit).
        min_effect: The relative change that can be a regression (``None``: not a relative comparison).
        sizes: The workload sizes it is judged at (``None``: every size).
    """

    name = ''
    unit = ''
    against_baseline = True
    min_effect: Optional[float] = None
    sizes: Optional[tuple[str, ...]] = None

    def sentence(self) -> str:
        """Its part of :data:`RULE` (empty: never judged)."""
        return ''

    def read(self, source: tuple[str, ...], result: Result) -> list[Any]:
        """The metric's samples in ``result`` (empty: not measured there)."""
        raise NotImplementedError

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        """The outcome of samples ``now`` against ``before`` (``None`` for a kind not judged against a baseline)."""
        raise NotImplementedError(f'{self.name}: reported, never judged')

    def central(self, samples: list[Any]) -> Optional[float]:
        """The one number a judgement quotes (the median)."""
        return float(statistics.median(samples)) if samples else None

    def show(self, samples: list[Any]) -> str:
        """The samples in a report cell: median ± IQR."""
        return _spread(samples, '.3f')


class _Relative(Kind):
    """A timing judged by the relative change of its median against the baseline's, and a rank test."""

    higher_is_better = True
    digits = '.3f'

    def __init__(self, min_effect: float) -> None:
        self.min_effect = min_effect

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        assert before, 'judged against a baseline'
        new, old = statistics.median(now), statistics.median(before)
        change = new / old - 1
        effect = self.min_effect or 0.0
        up, down = change > effect, change < -effect
        worse, better = (down, up) if self.higher_is_better else (up, down)
        sign = '-' if self.higher_is_better else '+'
        threshold, shift = f'{sign}{effect:.0%}', f'{change:+.1%}'
        # The one-sided test in the direction of the change: "current tends higher" or "current tends lower".
        p: Optional[float] = mann_whitney_p(before, now) if change > 0 else mann_whitney_p(now, before)
        if not (worse or better):
            outcome, reason, p = 'ok', f'{shift}, within the minimum effect', None
        elif p is not None and p >= ALPHA:
            outcome, reason = 'inconclusive', f'{shift}, but the samples do not support it'
        elif worse:
            outcome, reason = 'regression', shift
        else:
            outcome, reason = 'improved', f'{shift}: the baseline is stale, re-record it'
        return Judgement(metric, outcome, reason, old, new, threshold, p, self.unit)

    def show(self, samples: list[Any]) -> str:
        return _spread(samples, self.digits)


class Ratio(_Relative):
    """Throughput of leg ``source[0]`` over leg ``source[1]``, one sample per round (each leg's mean window in that
    round): two legs doing the same work, back to back, so that whatever the machine does touches both. Higher is
    better."""

    name = 'same-run ratio'
    unit = '×'

    def read(self, source: tuple[str, ...], result: Result) -> list[Any]:
        a, b = result.legs.get(source[0]), result.legs.get(source[1])
        if a is None or b is None:
            return []
        return [tb / ta for ta, tb in zip(a.round_s, b.round_s)]

    def sentence(self) -> str:
        return (
            f'a same-run ratio (two legs doing the same work, back to back in every round) that falls by more than '
            f'{self.min_effect:.0%}'
        )


class Beside(Ratio):
    """A pipeline leg's throughput over the ceiling leg's (``source[0]``), one sample per round: the ceiling's window
    taken right beside the leg's. Higher is better."""

    name = 'ratio to the ceiling'

    def read(self, source: tuple[str, ...], result: Result) -> list[Any]:
        leg = result.legs.get(source[0])
        return [] if leg is None else [c / t for t, c in zip(leg.round_s, leg.beside_s)]

    def sentence(self) -> str:
        return (
            f'a pipeline leg against the ceiling window beside it in every round (the same steps on data already '
            f'transformed and on the device) that falls by more than {self.min_effect:.0%}'
        )


class Overhead(Kind):
    """Time of a path of compatshim's (the shim's hooks, the monitor's events) over the direct path it stands in for
    (the move and the transform alone), alternated in the same samples, ``calls`` calls each: reported, never judged.
    The two sides are unlike work (compatshim's Python bookkeeping over the direct path's tensor calls), so a processor
    whose interpreter is slower against its vector units moves it: on a second 2-core machine reporting the same CPU
    model the monitor's rose from 9.3-10.1x to 11.0-13.6x on unchanged code. What is gated of compatshim's cost is its
    share of a step, against a stated limit (:class:`Share`)."""

    name = 'overhead ratio'
    unit = '×'

    def read(self, source: tuple[str, ...], result: Result) -> list[Any]:
        found = _probe(source[0], result)
        return [] if found is None else [p / d for p, d in zip(found.path_s, found.direct_s)]

    def show(self, samples: list[Any]) -> str:
        return _spread(samples, '.3f')


class Figure(Kind):
    """Microseconds per batch a path of compatshim's adds beyond the direct path: an absolute time. Reported as a
    figure, never judged (another machine, or a slow phase of this one, moves it)."""

    name = 'figure'
    unit = ' µs/batch'

    def read(self, source: tuple[str, ...], result: Result) -> list[Any]:
        found = _probe(source[0], result)
        if found is None:
            return []
        return [(p - d) / found.calls * 1e6 for p, d in zip(found.path_s, found.direct_s)]

    def show(self, samples: list[Any]) -> str:
        return _spread(samples, '.1f')


class Share(Kind):
    """A path of compatshim's (``source[0]``) as a share of a step of a leg (``source[1]``), in percent, one sample per
    round: the path's µs per batch in that round over the leg's step in the same round. Judged against a fixed
    limit, not a baseline: the limit is the product's promise (what the path may cost), set far above what any machine
    measured and below what a real regression costs.

    Args:
        what: The path, in the rule's sentence ("the monitor", "the shim's hook").
        limit: The most it may cost, in percent of a step.
        sizes: The workload sizes it is judged at (the limit is stated for a step of the real workload).
    """

    name = 'share of a step'
    unit = '%'
    against_baseline = False
    sizes: tuple[str, ...]

    def __init__(self, what: str, limit: float, sizes: tuple[str, ...]) -> None:
        self.what, self.limit, self.sizes = what, limit, sizes

    def read(self, source: tuple[str, ...], result: Result) -> list[Any]:
        found, leg = _probe(source[0], result), result.legs.get(source[1])
        if found is None or leg is None or not leg.round_s:
            return []
        steps = float(result.fingerprint['size']['steps'])
        out = []
        samples = list(zip(found.path_s, found.direct_s, found.rounds))
        for round_, window_s in enumerate(leg.round_s, start=1):
            extra = [(p - d) / found.calls for p, d, r in samples if r == round_]
            if extra:
                out.append(100 * statistics.mean(extra) / (window_s / steps))
        return out

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        share = statistics.median(now)
        over = share > self.limit
        reason = f'{"over" if over else "within"} the limit'
        return Judgement(metric, 'regression' if over else 'ok', reason, None, share, f'≤ {self.limit:g}%', None, '%')

    def show(self, samples: list[Any]) -> str:
        return f'{statistics.median(samples):.3f}%' if samples else '—'

    def sentence(self) -> str:
        sizes = ' and '.join(self.sizes)
        plural = 's' if len(self.sizes) > 1 else ''
        return f'{self.what} above {self.limit:g}% of a step of the same round (at the {sizes} size{plural})'


def _leg(source: tuple[str, ...], result: Any) -> Any:
    """The leg ``source`` names, ``(workload, leg)``: the recipe workload's (``recipe``), else the result's own
    (the bench's augment workload, a pipeline's legs)."""
    workload, name = source
    return (result.recipe.legs if workload == 'recipe' else result.legs).get(name)


class Bytes(Kind):
    """Host→device bytes per step of the leg ``source`` (``(workload, leg)``): a count, the same on any machine. Any
    byte more is a regression; fewer, an improvement (re-record)."""

    name = 'count'
    unit = ' bytes/step'

    def read(self, source: tuple[str, ...], result: Result) -> list[Any]:
        leg = _leg(source, result)
        return [float(leg.h2d_bytes_per_step)] if leg is not None and leg.available else []

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        assert before, 'judged against a baseline'
        new, old = now[0], before[0]
        outcome = 'regression' if new > old else 'improved' if new < old else 'ok'
        reason = {'ok': 'the same', 'regression': f'{new - old:+.0f} bytes/step'}.get(
            outcome, f'{new - old:+.0f} bytes/step: the baseline is stale, re-record it'
        )
        return Judgement(metric, outcome, reason, old, new, 'exact', None, self.unit)

    def show(self, samples: list[Any]) -> str:
        return f'{samples[0] / 1024:.1f} KiB' if samples else '—'

    def sentence(self) -> str:
        return "a shim leg's bytes per step above its baseline's by any amount (a count, not a timing)"


class Placement(Kind):
    """Where a leg's transform saw its batch (``device``, ``host``, ``mixed``, ``never called``; a leg that could not
    run: ``unavailable (why)``), against its baseline: the same is ok, reaching the device an improvement, any other
    change a regression. A fact of the run, the same on any machine."""

    name = 'placement'

    def read(self, source: tuple[str, ...], result: Result) -> list[Any]:
        leg = _leg(source, result)
        return [] if leg is None else [leg.placement if leg.available else f'unavailable ({leg.reason})']

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        assert before, 'judged against a baseline'
        new, old = now[0], before[0]
        outcome = 'ok' if new == old else 'improved' if new == 'device' else 'regression'
        return Judgement(metric, outcome, 'the same' if new == old else f'{old} in the baseline, {new} now')

    def central(self, samples: list[Any]) -> Optional[float]:
        return None

    def show(self, samples: list[Any]) -> str:
        return str(samples[0]) if samples else '—'

    def sentence(self) -> str:
        return "a pipeline leg's placement that changes from its baseline's, other than to the device"


class Count(Kind):
    """A leg's transform calls per step, against its baseline: a count, so any change is a regression (one call per
    step is what keeps stage batch coherent)."""

    name = 'calls'
    unit = ' calls/step'

    def read(self, source: tuple[str, ...], result: Result) -> list[Any]:
        leg = _leg(source, result)
        return [float(leg.calls_per_step)] if leg is not None and leg.available else []

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        assert before, 'judged against a baseline'
        same = now[0] == before[0]
        reason = 'the same' if same else 'changed (one call per step keeps stage batch coherent)'
        return Judgement(metric, 'ok' if same else 'regression', reason, before[0], now[0], 'exact', None, self.unit)

    def show(self, samples: list[Any]) -> str:
        return f'{samples[0]:g}' if samples else '—'

    def sentence(self) -> str:
        return "a pipeline leg's calls per step that differ from its baseline's"


class Check(Kind):
    """A fact of the run that must hold whatever the timings: ``read`` gives the problem in words ('' when it holds);
    any problem is a regression."""

    name = 'check'
    against_baseline = False

    def __init__(self, what: str, find: Any) -> None:
        self.what = what
        self._find = find

    def sentence(self) -> str:
        return f'a check that fails ({self.what})'

    def read(self, source: tuple[str, ...], result: Result) -> list[Any]:
        problem = self._find(source, result)
        return [] if problem is None else [problem]

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        return Judgement(metric, 'regression' if now[0] else 'ok', now[0] or 'ok')

    def central(self, samples: list[Any]) -> Optional[float]:
        return None

    def show(self, samples: list[Any]) -> str:
        return 'ok' if samples and not samples[0] else samples[0] if samples else '—'


def _placement(source: tuple[str, ...], result: Result) -> Optional[str]:
    """A checked leg (``source``: workload, leg) ran on the device, and stage batch once per step."""
    leg, name = _leg(source, result), source[1]
    if leg is None or not leg.available:
        return None
    if leg.placement != 'device':
        return f'the transform ran on the {leg.placement}, expected the device'
    if name == 'shim-batch' and leg.coherence != 'coherent':
        return f'stage batch is {leg.coherence}, expected one call per step'
    return ''


def _probe(name: str, result: Result) -> Optional[Overheads]:
    """An overhead probe's samples: only the reference bench has probes (a pipeline run measures none)."""
    return result.overheads.get(name) if isinstance(result, BenchResult) else None


def _nothing_patched(source: tuple[str, ...], result: Result) -> Optional[str]:
    if not isinstance(result, BenchResult):
        return None  # a pipeline run does not record what enable() patched: not checked there
    patched = ', '.join(result.patched_by_enable)
    return f'enable() patched {patched}' if patched else ''


#: The minimum effects and the limit (see :data:`RULE`).
#: Two legs of like work in one process still differ from session to session: the offset is the process's (two
#: Trainers of one leg in one process agree within 1%), shared by every round, so the rank test cannot see it. On the
#: 2-core machine, three sessions of unchanged code moved these ratios by up to 10.3% (once +9.2% at p = 0.0005),
#: while a planted 20% slower transform moved shim-batch/unpatched by 11.4% to 18.7%: the minimum effect lies between.
RATIO = Ratio(min_effect=0.10)
#: A pipeline leg against its ceiling is unlike work (the leg transforms, the ceiling does not): unchanged runs on the
#: 2-core machine moved it by up to 19% (a slow phase touches the two differently), a 2x slower transform at 40% of
#: the step moves it by 25-35%. It judges a user's pipeline against a baseline the user saved, on their own runner.
BESIDE = Beside(min_effect=0.20)
PLACEMENT_AS_BEFORE, CALLS_AS_BEFORE = Placement(), Count()
OVERHEAD = Overhead()
FIGURE = Figure()
#: The limits are stated for a step of the real workload (a step of the tiny test size is no such step). Measured on
#: unchanged code, quiet and beside two CPU-bound processes, on two 2-core machines whose speed differs by up to 1.7x:
#: the monitor 0.13-0.35% of a step (limit 1%), the shim's hook 0.018-0.043% (limit 0.1%); 50 µs more per hook call
#: made the hook 0.19-0.38% of a step. The hook's limit is stated at the cpu size only: a GPU's shorter step
#: has not been measured against it (there it is reported).
MONITOR_SHARE = Share('the monitor', limit=1.0, sizes=('cpu', 'gpu'))
HOOK_SHARE = Share("the shim's hook", limit=0.1, sizes=('cpu',))
BYTES = Bytes()
PLACEMENT = Check('the shim legs transform on the device, stage batch once per step', _placement)
NOTHING_PATCHED = Check('enable() patches nothing on a release that needs no patch', _nothing_patched)
KINDS: tuple[Kind, ...] = (
    RATIO,
    BESIDE,
    HOOK_SHARE,
    MONITOR_SHARE,
    BYTES,
    PLACEMENT_AS_BEFORE,
    CALLS_AS_BEFORE,
    PLACEMENT,
    NOTHING_PATCHED,
    OVERHEAD,
    FIGURE,
)

#: The whole rule, in one paragraph: what the judge applies, the report and the docs quote.
RULE = (
    "A gated metric is a *regression* when its median is worse than its baseline's by more than its minimum effect "
    f'and a one-sided Mann-Whitney U test of the samples says worse with p < {ALPHA:g}: {RATIO.sentence()}, or '
    f'{BESIDE.sentence()}; *improved* in the mirror case (the baseline is stale: re-record it); *inconclusive* when '
    'the change is beyond the minimum effect but the test does not support it, or there is no baseline; *not '
    'comparable* when the baseline measured another workload (size or version); *ok* otherwise. A regression without '
    f'a test: {HOOK_SHARE.sentence()}; {MONITOR_SHARE.sentence()}; {BYTES.sentence()}; {PLACEMENT.sentence()}; '
    f'{NOTHING_PATCHED.sentence()}; {PLACEMENT_AS_BEFORE.sentence()}; {CALLS_AS_BEFORE.sentence()}. What can move '
    "each: nothing but the code moves a count or a check; a same-run ratio's two legs do the same work by different "
    'routes in the same rounds, so neither a slower machine nor a slow phase moves it; a share is held to a stated '
    'limit, not to a baseline, and the limit lies far above what any machine measured; a pipeline leg against its '
    'ceiling is unlike work, which another machine can move by about its minimum effect, so a pipeline is compared '
    'with a baseline saved on the same kind of runner. Overhead ratios (unlike work) and absolute times (samples/s, '
    'µs per batch) are reported, never judged. Any regression exits 1, and so does a release without a baseline where '
    'its device has some.'
)
