"""Every rule of the bench: the gate's (:data:`RULE`; the kinds of metric and :func:`judge`) and the pipeline
bench's verdicts (:data:`VERDICT_RULE`). Why two numbers: docs/harness.md. The p-value is the normal approximation of
the Mann-Whitney U statistic (tie and continuity corrected): 3 rounds a side never reach :data:`ALPHA`, so ``--quick``
never gates a timing. Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable
from typing import Any, Callable, Optional

from compatshim.bench.results import LegResult, PipelineResult, Result
from compatshim.bench.work import Work, amount
from compatshim.observe.placement import Placement, Word

__all__ = [
    'ALPHA', 'AS_FAST_WITHIN', 'RULE', 'UNSTABLE', 'VERDICT_RULE', 'WORK_RULE', 'Judgement', 'Kind', 'Outcome',
    'SampleSource', 'Told', 'comparable', 'counted_apart', 'judge', 'mann_whitney_p', 'quartiles', 'spread', 'tell',
    'unsteady', 'verdicts', 'worst'
]  # fmt: skip

#: Significance level of the one-sided Mann-Whitney U test behind a regression or an improvement.
ALPHA = 0.01


class Outcome(Word):
    """The outcome of a metric, worst first."""

    REGRESSION = 'regression'
    NOT_COMPARABLE = 'not comparable'
    INCONCLUSIVE = 'inconclusive'
    IMPROVED = 'improved'
    OK = 'ok'


#: Per-round samples whose interquartile range is over this share of their median are unsteady (:func:`unsteady`).
UNSTABLE = 0.25


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    """Lower quartile, median and upper quartile of a non-empty sample (inclusive method)."""
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    q1, _, q3 = statistics.quantiles(samples, n=4, method='inclusive')
    return q1, statistics.median(samples), q3


def spread(samples: list[float], fmt: str = '.3f') -> str:
    """Samples as their median ± interquartile range (``—``: none): the one way a spread is shown."""
    if not samples:
        return '—'
    q1, median, q3 = quartiles(samples)
    return f'{median:{fmt}} ± {q3 - q1:{fmt}}'


def unsteady(samples: list[float]) -> str:
    """How per-round samples spread where past :data:`UNSTABLE` of their median (``''``: not, or under two): a pair's
    ratios (both legs of a round meet the same machine; one leg's rounds may scatter and its pairs hold), a leg's."""
    q1, median, q3 = quartiles(samples) if len(samples) > 1 else (0.0, 1.0, 0.0)
    width = (q3 - q1) / median if median > 0 else 0.0  # a clock too coarse for the window: nothing to judge by
    return f'spread by {width:.0%} across rounds ({min(samples):.3g} to {max(samples):.3g})' if width > UNSTABLE else ''


def comparable(fingerprint: dict[str, Any], baseline: dict[str, Any], keys: tuple[str, ...]) -> Optional[str]:
    """Why ``baseline`` measured another workload than ``fingerprint`` by ``keys`` (``None``: the same); a size is
    named by its name, and by the fields that differ where the names are the same."""

    def shown(value: Any, other: Any) -> Any:
        if not isinstance(value, dict):
            return value
        if not isinstance(other, dict) or other.get('name') != value.get('name'):
            return value.get('name', value)
        differ = [f'{k} {v}' for k, v in value.items() if k != 'name' and k in other and other[k] != v]
        return f'{value.get("name")} ({", ".join(differ)})' if differ else value.get('name')

    differ = [
        f'{key.replace("_", " ")} {shown(baseline.get(key), fingerprint.get(key))} in the baseline, '
        f'{shown(fingerprint.get(key), baseline.get(key))} now'
        for key in keys
        if fingerprint.get(key) != baseline.get(key)
    ]
    return '; '.join(differ) or None


def counted_apart(now: Optional[int], then: Optional[int]) -> Optional[str]:
    """Why work counted by method ``then`` cannot be compared with ``now``'s (``None``: it can)."""
    apart = None not in (now, then) and now != then
    return f'work counted by method {then} in the baseline, {now} now' if apart else None


@dataclasses.dataclass(frozen=True)
class Judgement:
    """The outcome of one metric, with the numbers behind it."""

    metric: str
    outcome: Outcome
    reason: str
    baseline: Optional[float] = None
    current: Optional[float] = None
    threshold: str = ''  # e.g. '-10%', 'exact', '≤ 1%'
    p: Optional[float] = None
    unit: str = ''  # what follows a number ('×', '%', ' bytes/step')
    #: A count that rose, judged or not: it never cancels a timing that saw the same rise (:func:`_like_for_like`).
    rose: bool = False

    def line(self, name: str) -> str:
        numbers = ''
        if self.current is not None:
            before = '' if self.baseline is None else f'baseline {_fmt(self.baseline)}{self.unit}, '
            numbers = f': {before}now {_fmt(self.current)}{self.unit}'
        limit = f', threshold {self.threshold}' if self.threshold else ''
        test = f' (rank test p = {self.p:.1g})' if self.p is not None else ''
        return f'{self.outcome.value.upper()} {name} {self.metric}{numbers}{limit}{test}: {self.reason}'


def _fmt(value: float) -> str:
    """A count (or a mean of counts) as :func:`~compatshim.bench.work.amount` shows it, a ratio or a share to four
    significant digits."""
    return amount(value) if abs(value) >= 1000 or float(value).is_integer() else f'{value:.4g}'


def mann_whitney_p(lower: list[float], higher: list[float]) -> float:
    """One-sided Mann-Whitney U test: the p-value for "``lower`` tends to be smaller than ``higher``"."""
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


def worst(judgements: Iterable[Judgement]) -> Outcome:
    order = list(Outcome)
    return min((j.outcome for j in judgements), key=order.index, default=Outcome.OK)


@dataclasses.dataclass(frozen=True)
class SampleSource:
    """Where a metric's samples are: a leg (of the recipe with ``recipe``), its partner, a probe."""

    leg: str = ''
    partner: str = ''
    probe: str = ''
    recipe: bool = False

    def leg_of(self, result: Result) -> Optional[LegResult]:
        return result.legs_of(self.recipe).get(self.leg)


class Kind:
    """What a metric is: how it reads, judges and shows its samples; ``sentence``: its part of :data:`RULE` (``''``:
    never judged); ``holds``: what can move it; ``sizes``: judged at (``None``: all); ``paired``: two legs back to back;
    ``stable_rounds``: judged only where its per-round samples held steady in both runs (:func:`unsteady`)."""

    name, unit, digits, sentence, holds = '', '', '.3f', '', ''
    against_baseline, paired = True, False
    stable_rounds = False
    min_effect: Optional[float] = None
    sizes: Optional[tuple[str, ...]] = None

    def read(self, source: SampleSource, result: Result) -> list[Any]:
        raise NotImplementedError

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        raise NotImplementedError(f'{self.name}: reported, never judged')

    def central(self, samples: list[Any]) -> Optional[float]:
        return float(statistics.median(samples)) if samples else None

    def show(self, samples: list[Any]) -> str:
        return spread(samples, self.digits)


class Ratio(Kind):
    """A leg's throughput over its partner's, per round: its median's change and a rank test; higher is better."""

    name, unit, paired = 'same-run ratio', '×', True

    #: What an improvement says: like work's ratio rose only with the code; unlike work's moves with a runner's phase.
    improved = 'the baseline is stale, re-record it'

    def __init__(self, min_effect: float, what: str, holds: str) -> None:
        self.min_effect, self.holds = min_effect, holds
        self.sentence = f'{what} that falls by more than {min_effect:.0%}'

    def read(self, source: SampleSource, result: Result) -> list[Any]:
        measured = source.leg_of(result)
        if measured is None:
            return []
        beside = measured.beside.get(source.partner, [])
        return [partner_s / own_s for own_s, partner_s in zip(measured.round_s, beside)]

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        assert before and self.min_effect is not None, 'judged against a baseline'
        new, old = statistics.median(now), statistics.median(before)
        change = new / old - 1
        threshold, shift = f'-{self.min_effect:.0%}', f'{change:+.1%}'
        if abs(change) <= self.min_effect:
            return Judgement(metric, Outcome.OK, f'{shift}, within the minimum effect', old, new, threshold, None, '×')
        p = mann_whitney_p(before, now) if change > 0 else mann_whitney_p(now, before)
        if p >= ALPHA:
            outcome, reason = Outcome.INCONCLUSIVE, f'{shift}, but the samples do not support it'
        elif change < 0:
            outcome, reason = Outcome.REGRESSION, shift
        else:
            outcome, reason = Outcome.IMPROVED, f'{shift}: {self.improved}'
        return Judgement(metric, outcome, reason, old, new, threshold, p, '×')


class Reported(Kind):
    """A probe's figure, never judged: ``figure(path_s, direct_s, calls)`` per sample."""

    def __init__(self, name: str, unit: str, digits: str, figure: Callable[[float, float, int], float]) -> None:
        self.name, self.unit, self.digits, self._figure = name, unit, digits, figure

    def read(self, source: SampleSource, result: Result) -> list[Any]:
        found = result.probe(source.probe)
        return [] if found is None else [self._figure(p, d, found.calls) for p, d in zip(found.path_s, found.direct_s)]


class Share(Kind):
    """A probe's path as a share (%) of a step of a leg in the same round, held to a fixed limit."""

    name, unit, against_baseline = 'share of a step', '%', False

    def __init__(self, what: str, limit: float, sizes: tuple[str, ...]) -> None:
        self.limit, self.sizes = limit, sizes
        self.sentence = f'{what} above {limit:g}% of a step of the same round (at the {" and ".join(sizes)} size'
        self.sentence += 's)' if len(sizes) > 1 else ')'
        self.holds = 'a limit, not a baseline: measured far below it on every machine, quiet and loaded'

    def read(self, source: SampleSource, result: Result) -> list[Any]:
        found, measured = result.probe(source.probe), source.leg_of(result)
        if found is None or measured is None or not measured.round_s:
            return []
        step_s = [window / float(result.fingerprint['size']['steps']) for window in measured.round_s]
        extra = [[(p - d) / found.calls for p, d, r in zip(found.path_s, found.direct_s, found.rounds) if r == n]
                 for n in range(1, len(step_s) + 1)]  # fmt: skip
        return [100 * statistics.mean(us) / step for us, step in zip(extra, step_s) if us]

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        share, over = statistics.median(now), statistics.median(now) > self.limit
        outcome, reason = (Outcome.REGRESSION, 'over the limit') if over else (Outcome.OK, 'within the limit')
        return Judgement(metric, outcome, reason, None, share, f'≤ {self.limit:g}%', None, '%')

    def show(self, samples: list[Any]) -> str:
        return f'{statistics.median(samples):.3f}%' if samples else '—'


class Beyond(Share):
    """A probe's path beyond its direct path (Composer's own move of the same batch, and the transform), as a share (%)
    of the direct path per round, held to a fixed limit: at most that share of any step, which moves its batch."""

    name = 'share of the move'

    def __init__(self, what: str, limit: float, sizes: tuple[str, ...], batch: str) -> None:
        super().__init__(what, limit, sizes)
        self.sentence = (
            f"{what} beyond Composer's own move of {batch} above {limit:g}% of that move, in the same rounds (at the "
            f'{" and ".join(sizes)} size{"s" if len(sizes) > 1 else ""})'
        )

    def read(self, source: SampleSource, result: Result) -> list[Any]:
        found = result.probe(source.probe)
        if found is None:
            return []
        rounds = sorted(set(found.rounds))
        paired = [[(p, d) for p, d, r in zip(found.path_s, found.direct_s, found.rounds) if r == n] for n in rounds]
        return [100 * sum(p - d for p, d in one) / sum(d for _, d in one) for one in paired if one]

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        judged = super().judge(metric, now, before)
        return dataclasses.replace(judged, threshold=f'≤ {self.limit:g}% of the move', unit='% of the move')

    def show(self, samples: list[Any]) -> str:
        return f'{statistics.median(samples):.0f}%' if samples else '—'


class Exact(Kind):
    """A leg's ``field`` (a count with a ``unit``, or its placement) exactly as before: a change is a regression, or
    an improvement where ``improves(before, now)``."""

    holds = 'only the code: a count'

    def __init__(self, name: str, field: str, improves: Callable[[Any, Any], bool], unit: str, sentence: str):
        self.name, self.field, self.improves, self.sentence, self.unit = name, field, improves, sentence, unit

    def read(self, source: SampleSource, result: Result) -> list[Any]:
        measured = source.leg_of(result)
        if measured is None:
            return []
        if not self.unit:  # the placement, or why the leg did not run
            return [measured.missing or measured.placement]
        return [float(getattr(measured, self.field))] if measured.available else []

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        assert before, 'judged against a baseline'
        new, old = now[0], before[0]
        change = (
            f'{"+" if new > old else "-"}{amount(abs(new - old))}{self.unit}'
            if self.unit
            else f'{old} in the baseline, {new} now'
        )
        if new == old:
            outcome, reason = Outcome.OK, 'the same'
        elif self.improves(old, new):
            outcome, reason = Outcome.IMPROVED, f'{change}: the baseline is stale, re-record it'
        else:
            outcome, reason = Outcome.REGRESSION, change
        if not self.unit:
            return Judgement(metric, outcome, reason)
        return Judgement(metric, outcome, reason, old, new, 'exact', None, self.unit, rose=new > old)

    def central(self, samples: list[Any]) -> Optional[float]:
        return float(samples[0]) if samples and self.unit else None

    def show(self, samples: list[Any]) -> str:
        if not samples or not self.unit:
            return str(samples[0]) if samples else '—'
        return f'{samples[0] / 1024:.1f} KiB' if 'bytes' in self.unit else f'{samples[0]:g}'


class WorkDone(Kind):
    """A transform's work per call, by :data:`WORK_RULE`: every count of :meth:`Work.counts` on one torch release;
    across torch releases those of :meth:`Work.across_torch`, and where the ops that write are not the same ones, the
    ops both releases ran, each op by its calls and bytes (the user's code is what the counts describe; the Composer
    release does not change what torch runs for it)."""

    name, unit, holds = 'work', ' B/call', 'only the code: a count (and the torch release, by the rule)'
    sentence = (
        "a transform's work per call above its baseline's in any count (ops, bytes written, FLOPs, elements leaving "
        'torch by a route) while no other count falls; across torch releases, views not counted and, where the ops '
        'that write differ, in the ops both ran'
    )

    def read(self, source: SampleSource, result: Result) -> list[Any]:
        measured = source.leg_of(result)
        if measured is None or measured.work is None:
            return []
        return [(measured.work, result.torch)]

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        assert before, 'judged against a baseline'
        (new, torch_now), (old, torch_then) = now[0], before[0]
        if torch_now.split('+')[0] == torch_then.split('+')[0]:  # one release, whatever its build (+cpu, +cu121)
            return self._counts(metric, old, new, old.counts(), new.counts(), '')
        upgrade = f'torch {torch_then} -> {torch_now}'
        if old.by_op is None or new.by_op is None:  # saved before each op was kept: bytes, FLOPs and routes alone
            a, b = ({k: v for k, v in w.counts().items() if k != 'ops'} for w in (old, new))
            unsaid = f'{upgrade} (ops not judged: the baseline does not say which ops torch ran; save it again): '
            return self._counts(metric, old, new, a, b, unsaid)
        then, here = old.writes(), new.writes()
        appeared, vanished = sorted(set(here) - set(then)), sorted(set(then) - set(here))
        if not appeared and not vanished:
            return self._counts(metric, old, new, old.across_torch(), new.across_torch(), f'{upgrade}, the same ops: ')
        a, b = _in_both(old, then, here), _in_both(new, here, then)
        other = '; '.join(
            f'torch {release} ran {", ".join(_op_text(op, w[op]) for op in ops)} where torch {elsewhere} did not'
            for release, elsewhere, ops, w in ((torch_now, torch_then, appeared, here),
                                               (torch_then, torch_now, vanished, then)) if ops
        )  # fmt: skip
        said, rose, fell = _changes(a, b), _rose(a, b), _rose(b, a)
        if rose and not fell:
            reason = f'more work per call in the ops both torch releases ran: {said} ({upgrade}; {other})'
            return Judgement(metric, Outcome.REGRESSION, reason, old.bytes, new.bytes, 'exact', None, self.unit, True)
        both_did = f'in the ops both ran, {said}' if said else 'the ops both ran did the same work'
        reason = (
            f"{upgrade}: {other}; {both_did}: your work or another dispatch of torch's, which the counts cannot tell "
            'apart; not judged, the timing decides'
        )
        return Judgement(
            metric, Outcome.INCONCLUSIVE, reason, old.bytes, new.bytes, 'exact', None, self.unit, rose or bool(appeared)
        )

    def _counts(
        self, metric: str, old: Work, new: Work, a: dict[str, float], b: dict[str, float], upgrade: str
    ) -> Judgement:
        """``a`` (the baseline's counts) against ``b`` (this run's), exactly."""
        said, rose, fell = _changes(a, b), _rose(a, b), _rose(b, a)
        left = f' (its work leaves torch now, through {new.outside_text()})' if new.outside and not old.outside else ''
        if not said:
            outcome, reason = Outcome.OK, f'{upgrade}the same work'
        elif rose and fell:
            outcome = Outcome.INCONCLUSIVE
            reason = (
                f'{upgrade}{said}{left}: one count fell while another rose (work moved, between torch and numpy say)'
            )
        elif rose:
            outcome, reason = Outcome.REGRESSION, f'{upgrade}more work per call: {said} ({new.text()})'
        elif old.fully_counted:
            outcome, reason = Outcome.IMPROVED, f'{upgrade}less work per call: {said}: the baseline is stale'
        else:
            outcome = Outcome.INCONCLUSIVE
            where = new.outside_text() or old.outside_text()
            reason = (
                f'{upgrade}{said}: less counted work, never an improvement where work leaves torch (through {where})'
            )
        return Judgement(metric, outcome, reason, old.bytes, new.bytes, 'exact', None, self.unit, rose)

    def central(self, samples: list[Any]) -> Optional[float]:
        return float(samples[0][0].bytes) if samples else None

    def show(self, samples: list[Any]) -> str:
        return samples[0][0].text() if samples else '—'


def _in_both(
    work: Work, ops: dict[str, tuple[float, float]], other: dict[str, tuple[float, float]]
) -> dict[str, float]:
    """``work``'s counts in the ops that write that ``other`` ran too, each op's calls and bytes, and its routes."""
    both = {f'{op} {what}': ops[op][i] for op in sorted(set(ops) & set(other)) for i, what in enumerate(('calls', 'B'))}
    return {**both, **{k: v for k, v in work.counts().items() if k.endswith(' elements')}}


def _op_text(op: str, counted: tuple[float, float]) -> str:
    """``aten.mul_.Tensor (1 per call, 8,192 B)``."""
    return f'{op} ({amount(counted[0])} per call, {amount(counted[1])} B)'


def _changes(a: dict[str, float], b: dict[str, float]) -> str:
    """The counts that differ, ``ops 1,221 -> 2,405; bytes ...`` (``''``: none)."""
    return '; '.join(f'{what} {_fmt(a.get(what, 0.0))} -> {_fmt(b.get(what, 0.0))}' for what in {**a, **b}
                     if a.get(what, 0.0) != b.get(what, 0.0))  # fmt: skip


def _rose(a: dict[str, float], b: dict[str, float]) -> bool:
    """Whether any count of ``b`` is above ``a``'s."""
    return any(b.get(what, 0.0) > a.get(what, 0.0) for what in {**a, **b})


class Check(Kind):
    """A fact that must hold: ``find`` gives the problem ('': it holds, ``None``: not checkable here)."""

    name, against_baseline, holds = 'check', False, 'only the code: a fact of the run'

    def __init__(self, what: str, find: Callable[[SampleSource, Result], Optional[str]]) -> None:
        self._find, self.sentence = find, f'a check that fails ({what})'

    def read(self, source: SampleSource, result: Result) -> list[Any]:
        problem = self._find(source, result)
        return [] if problem is None else [problem]

    def judge(self, metric: str, now: list[Any], before: Optional[list[Any]]) -> Judgement:
        return Judgement(metric, Outcome.REGRESSION if now[0] else Outcome.OK, now[0] or 'ok')

    def central(self, samples: list[Any]) -> Optional[float]:
        return None

    def show(self, samples: list[Any]) -> str:
        return '—' if not samples else samples[0] or 'ok'


def _on_device(source: SampleSource, result: Result) -> Optional[str]:
    measured = source.leg_of(result)
    if measured is None or not measured.available:
        return None
    if measured.placement is not Placement.DEVICE:
        return f'the transform ran on the {measured.placement}, expected the device'
    if source.leg == 'shim-batch' and measured.calls_per_step != 1:
        return f'stage batch is {measured.coherence}, expected one call per step'
    return ''


def _nothing_patched(source: SampleSource, result: Result) -> Optional[str]:
    patched = result.patched()
    return None if patched is None else f'enable() patched {", ".join(patched)}' if patched else ''


def _unsteady(now: list[float], before: list[float]) -> str:
    """Why a pair's timing cannot be judged (``''``: it can): its ratio unsteady in the baseline or in this run."""
    then, here = unsteady(before), unsteady(now)
    if then:
        return f'not judged: in the baseline, its ratio {then}; a baseline saved again in steadier rounds judges it'
    return f'not judged: in this run, its ratio {here}; run again, or with more --rounds' if here else ''


#: Three sessions of unchanged code moved these ratios by up to 10.3%, a 20% slower transform by 11.4-18.7%.
RATIO = Ratio(
    0.10,
    'a same-run ratio (two legs doing the same work, back to back in every round)',
    "the shim's code; a slower machine or a slow phase touches both legs alike",
)
#: Unlike work: unchanged runs moved it by up to 19%, a 2x slower transform at 40% of the step by 25-35%.
BESIDE = Ratio(
    0.20,
    'a pipeline leg against the ceiling window beside it in every round (the same steps on data already transformed '
    'and on the device)',
    "the pipeline's code, and another kind of runner by about its minimum effect: compare on the same kind",
)
BESIDE.stable_rounds = True
BESIDE.improved = 'faster than the baseline (or a quieter phase of the runner); save it again to gate from here'
OVERHEAD = Reported('overhead ratio', '×', '.3f', lambda path, direct, calls: path / direct)
FIGURE = Reported('figure', ' µs/batch', '.1f', lambda path, direct, calls: (path - direct) / calls * 1e6)
DIRECT = Reported('figure', ' µs/batch', '.1f', lambda path, direct, calls: direct / calls * 1e6)
#: Measured (docs/harness.md): the monitor 0.13-0.35% of a step, the hook 0.018-0.043%; the hook's limit holds at the
#: cpu size only (a GPU's shorter step was never measured against it).
MONITOR_SHARE = Share('the monitor', limit=1.0, sizes=('cpu', 'gpu'))
HOOK_SHARE = Share("the shim's hook", limit=0.1, sizes=('cpu',))
#: On a detection-style batch of 768 tensors (docs/harness.md), DeviceCPU: the monitor 43-56% of the move on every
#: release in two runs (267-281% before it counted where the move walks), the hook 0-5%, in a slow phase of a 2-core
#: machine (samples/s 35-57% below the baselines'); 1 µs more per tensor counted adds 40-100% of the move.
MONITOR_BEYOND = Beyond('the monitor', limit=75.0, sizes=('cpu', 'gpu'), batch='a detection-style batch')
HOOK_BEYOND = Beyond("the shim's hook", limit=25.0, sizes=('cpu',), batch='a detection-style batch')
BYTES = Exact('count', 'h2d_bytes_per_step', lambda old, new: new < old, ' bytes/step',
              "a leg's bytes per step above its baseline's by any amount (a count, not a timing)")  # fmt: skip
CALLS = Exact('calls', 'calls_per_step', lambda old, new: False, ' calls/step',
              "a pipeline leg's calls per step that differ from its baseline's")  # fmt: skip
PLACEMENT_AS_BEFORE = Exact(
    'placement', 'placement', lambda old, new: new is Placement.DEVICE, '',
    "a pipeline leg's placement that changes from its baseline's, other than to the device")  # fmt: skip
WORK = WorkDone()
ON_DEVICE = Check('the shim legs transform on the device, stage batch once per step', _on_device)
NOTHING_PATCHED = Check('enable() patches nothing on a release that needs no patch', _nothing_patched)

#: The work rule, as docs/pipeline.md and a compare state it. Across torch releases (measured on the transforms of
#: tests/ and the reference workload, 31 in all): torch 2.4.0 and 2.7.0 counted all 31 alike; torch 2.15.0 counted the
#: same bytes, FLOPs and ops that write for all 31, and fewer views in 24 (``aten.slice.Tensor`` of a whole dimension,
#: ``x[:, :, a:b]``, is no longer dispatched).
WORK_RULE = (
    'Work per call is gated exactly: more of any count (ops, bytes written, FLOPs, or elements leaving torch by a '
    'route such as Tensor.tolist) with none fewer is a regression naming it; one count fewer while another is more '
    '(work moved between torch and numpy, say) is inconclusive and decides nothing; fewer of every count is improved '
    'where no work left torch in the baseline, else inconclusive. Across a Composer upgrade the same; across torch '
    'releases views are not counted (torch 2.15 dispatches fewer for the same code), and where the ops that write '
    'are not the same ones, the ops both releases ran are judged by their calls and bytes, and an op that appeared or '
    "vanished is named: your work or another dispatch of torch's, which the counts cannot tell apart, so the timing "
    'decides.'
)
#: The whole rule, as the report and the docs quote it.
RULE = (
    "A gated metric is a *regression* when its median is worse than its baseline's by more than its minimum effect "
    f'and a one-sided Mann-Whitney U test of the samples says worse with p < {ALPHA:g}: {RATIO.sentence}, or '
    f'{BESIDE.sentence}; *improved* in the mirror case (the baseline is stale: re-record it); *inconclusive* when '
    'the change is beyond the minimum effect but the test does not support it, or there is no baseline; *not '
    'comparable* when the baseline measured another workload or counted work another way; *ok* otherwise. A '
    f'regression without a test: {HOOK_SHARE.sentence}; {MONITOR_SHARE.sentence}; {HOOK_BEYOND.sentence}; '
    f'{MONITOR_BEYOND.sentence}; {BYTES.sentence}; '
    f'{ON_DEVICE.sentence}; {NOTHING_PATCHED.sentence}; {PLACEMENT_AS_BEFORE.sentence}; {CALLS.sentence}; '
    f'{WORK.sentence}. What can '
    "move each: nothing but the code moves a count or a check; a same-run ratio's two legs do the same work by "
    'different routes in the same rounds, so neither a slower machine nor a slow phase moves it; a share is held to '
    'a stated limit, not to a baseline, and the limit lies far above what any machine measured; a pipeline leg '
    'against its ceiling is unlike work, which another machine can move by about its minimum effect, so a pipeline '
    'is compared with a baseline saved on the same kind of runner, and only where its per-round ratio held steady in '
    f'both (interquartile range within {UNSTABLE:.0%} of the median). '
    'Overhead ratios (unlike work) and absolute times (samples/s, µs per batch) are reported, never judged. Any '
    'regression exits 1, and so does a release without a baseline where its device has some; a baseline that is not '
    'comparable is refused (exit 2: re-record it).'
)


def unlike_baseline(result: Result, baseline: Result, keys: tuple[str, ...]) -> Optional[str]:
    """Why ``baseline`` cannot be compared with ``result`` (``None``: it can): another workload, or work counted
    another way."""
    unlike = comparable(result.fingerprint, baseline.fingerprint, keys)
    return unlike or counted_apart(result.work_counting, baseline.work_counting)


def judge(result: Result, baseline: Optional[Result], metrics: Iterable[Any], keys: tuple[str, ...]) -> list[Judgement]:
    """Every gated metric of ``metrics`` in ``result``, against ``baseline`` (``None``: none) alike in ``keys``."""
    unlike = None if baseline is None else unlike_baseline(result, baseline, keys)
    out: list[tuple[Any, Judgement]] = []
    for metric in metrics:
        now = metric.read(result) if metric.gated_for(result) else []
        if not now:
            continue
        kind = metric.kind
        before = metric.read(baseline) if baseline is not None and not unlike else []
        shaky = _unsteady(now, before) if kind.stable_rounds and before else ''
        if shaky:
            unsure = Judgement(metric.id, Outcome.INCONCLUSIVE, shaky, kind.central(before), kind.central(now))
            out.append((metric, unsure))
            continue
        if not kind.against_baseline or before:
            out.append((metric, kind.judge(metric.id, now, before or None)))
            continue
        outcome = Outcome.NOT_COMPARABLE if unlike else Outcome.INCONCLUSIVE
        why = 'no baseline' if baseline is None else 'not measured in the baseline'
        why = f'not comparable: {unlike}' if unlike else why
        out.append((metric, Judgement(metric.id, outcome, why, current=kind.central(now), unit=kind.unit)))
    return _like_for_like(_stopped(out, result))


def _stopped(judged: list[tuple[Any, Judgement]], result: Result) -> list[tuple[Any, Judgement]]:
    """A leg whose transform is never called now, though its placement was another in the baseline: its counts fell
    because the transform no longer runs, which is no improvement (its placement is the regression)."""
    stopped = {
        m.source.leg for m, j in judged
        if m.kind is PLACEMENT_AS_BEFORE and j.outcome is not Outcome.OK
        and getattr(m.source.leg_of(result), 'placement', None) is Placement.NEVER_CALLED
    }  # fmt: skip
    return [
        (m, dataclasses.replace(j, outcome=Outcome.INCONCLUSIVE, reason=f'{j.reason.split(":")[0]}: fell because the '
                                'transform is never called now (its placement says so), not an improvement'))
        if m.source.leg in stopped and j.outcome is Outcome.IMPROVED and not m.kind.paired else (m, j)
        for m, j in judged
    ]  # fmt: skip


def _like_for_like(judged: list[tuple[Any, Judgement]]) -> list[Judgement]:
    """A leg against its ceiling (unlike work: ``stable_rounds``) is no longer like for like where a count of its legs,
    or the transform's work (which made the ceiling's batches), changed: never improved (a transform that grows its
    batch slows the ceiling), and no regression where no count rose (a smaller batch speeds the ceiling up more). A
    count that rose, judged or not (across torch releases it may not be), leaves the timing's regression standing."""
    counted = ('B/call', 'bytes/step', 'calls/step')
    changed = [(j.metric, j.rose) for _, j in judged if j.unit.strip() in counted and j.outcome is not Outcome.OK]
    out = []
    for metric, j in judged:
        legs = (metric.source.leg, metric.source.partner)
        moved = [(m, r) for m, r in changed if m.split(':')[0] in legs or m.endswith(': work per call')]
        rose = any(r for _, r in moved)  # judged or not: a count that rose is the regression the timing saw
        if metric.kind.stable_rounds and moved and (j.outcome is Outcome.IMPROVED or
                                                    (j.outcome is Outcome.REGRESSION and not rose)):  # fmt: skip
            why = f'but the counted work changed ({", ".join(m for m, _ in moved)}): not like for like, not judged'
            j = dataclasses.replace(j, outcome=Outcome.INCONCLUSIVE, reason=f'{j.reason.split(":")[0]}, {why}')
        out.append(j)
    return out


# --- The pipeline bench's verdicts: what its figures tell, never gated -------------------------------------------

#: The share of a step waiting for data above which a run is input-bound (as the PyTorch profiler advises).
WAIT_LIMIT = 0.05
#: The legs a transform's timing is read from, in order of preference (the first a result has).
TIMED_FIRST = ('shim-batch', 'native-microbatch', 'unpatched')
#: Rounds below which no timing verdict is given (as many as the gate's rank test needs).
VERDICT_ROUNDS = 5
#: *As fast as*: within the gate's minimum effect for like work. The extreme rounds are left out: a shared machine's
#: odd round (x0.88, x1.18) decided the words otherwise.
AS_FAST_WITHIN = RATIO.min_effect or 0.0
VERDICT_RULE = (
    "Each verdict reads the ratio of two legs' step times round by round (both legs of a round meet the same machine) "
    'and its factor is the median of those ratios, the lowest and the highest round left out of the range: *as fast '
    f'as* when the range lies within {AS_FAST_WITHIN:.0%} of x1, *faster* or *slower* by the factor when it lies '
    'beyond it on the same side, and *cannot tell* otherwise.'
)


class Told(Word):
    AS_FAST = 'as fast as'
    FASTER = 'faster'
    SLOWER = 'slower'
    CANNOT_TELL = 'cannot tell'


@dataclasses.dataclass(frozen=True)
class Comparison:
    """``factor``: how many times as fast the fast leg is (the median of the per-round ratios, ``per_round``, sorted):
    always within the range it came from."""

    told: Told
    factor: float
    per_round: tuple[float, ...]

    @property
    def middle(self) -> tuple[float, float]:
        inner = self.per_round[1:-1] if len(self.per_round) > 2 else self.per_round
        return inner[0], inner[-1]

    def rounds(self, slower: bool = False) -> str:
        (low, high), (lowest, highest) = self.middle, (self.per_round[0], self.per_round[-1])
        if slower:
            low, high, lowest, highest = 1 / high, 1 / low, 1 / highest, 1 / lowest
        n = len(self.per_round)
        return (
            f'the median of {n} rounds, per round x{low:.2f} to x{high:.2f}, leaving out the extreme rounds '
            f'x{lowest:.2f} and x{highest:.2f}'
        )


def tell(result: PipelineResult, slow: str, fast: str) -> Optional[Comparison]:
    """:data:`VERDICT_RULE` on how many times as fast ``fast`` is as ``slow`` (``None``: a leg not timed)."""
    a, b = result.step_ms(slow), result.step_ms(fast)
    if not a or not b:
        return None
    per_round = tuple(sorted(x / y for x, y in zip(a, b)))
    compared = Comparison(Told.CANNOT_TELL, statistics.median(per_round), per_round)
    read, band = compared.middle, 1 + AS_FAST_WITHIN
    if all(1 / band <= x <= band for x in read):
        return dataclasses.replace(compared, told=Told.AS_FAST)
    if all(x > band for x in read):
        return dataclasses.replace(compared, told=Told.FASTER)
    if all(x < 1 / band for x in read):
        return dataclasses.replace(compared, told=Told.SLOWER)
    return compared


def partly_counted(result: PipelineResult) -> list[str]:
    """The transform named where its work left torch (numpy, Python lists): not fully counted."""
    legs = [name for name, measured in result.legs.items() if measured.work is not None and measured.work.outside]
    if not legs:
        return []
    work = result.legs[legs[0]].work
    assert work is not None
    return [
        f'work: the transform of {result.pipeline} is not fully counted — its work leaves torch through '
        f'{work.outside_text()} ({", ".join(legs)}): those elements are counted per route and gated like its other '
        'counts; the work done with them outside torch is not'
    ]


def verdicts(result: PipelineResult) -> list[str]:
    """The shim's factor, stage batch against microbatch, input-bound or not: each by :data:`VERDICT_RULE`."""
    out, legs = [], result.legs
    unpatched, shim, mb = legs['unpatched'], legs['shim-batch'], legs['shim-microbatch']
    if not unpatched.available:
        out.append(f'unpatched cannot run here: {unpatched.reason}')
    elif unpatched.placement is Placement.NEVER_CALLED:
        out.append(
            'unpatched never calls the transform here (Composer drops device_transforms): its steps skip the work '
            'and feed the model raw batches'
        )
    if not result.affected:
        out.append('the shim: this release runs device_transforms on the device itself; the shim patches nothing')
    out += partly_counted(result)
    rounds = result.fingerprint['size']['rounds']
    if rounds < VERDICT_ROUNDS:
        return out + [
            f'timing: no verdict from {rounds} rounds (--quick gates placement, calls, bytes and work only); run with '
            f'{VERDICT_ROUNDS} rounds or more for the factors'
        ]
    ran = {name for name, measured in legs.items() if measured.available}
    best = next((n for n in TIMED_FIRST if n in ran), '')
    waits = legs[best].wait_share if best else None
    if waits is not None:
        bound = 'yes' if waits > WAIT_LIMIT else 'no'
        out.append(f'input-bound: {bound} — {waits:.0%} of a {best} step waits for data (threshold {WAIT_LIMIT:.0%})')
    plain = result.affected and 'unpatched' in ran and unpatched.placement is not Placement.NEVER_CALLED
    split, both = mb.calls_per_step != shim.calls_per_step, {'shim-microbatch', 'shim-batch'} <= ran
    out += [] if split or not both else ['stage batch vs microbatch: one microbatch per step here, so both stages '
                                         'make the same call (give microbatch_size to compare them)']  # fmt: skip
    factors = [  # (slow leg, fast leg, when, what it is about, the words before the factor, against what, after)
        ('unpatched', 'shim-batch', plain, 'the shim against unpatched',
         f'the shim on this release (unpatched: {unpatched.placement}): a step', 'unpatched',
         ''),
        ('native-batch', 'shim-batch', {'native-batch', 'shim-batch'} <= ran, 'the shim against batch_transforms',
         'against the workaround batch_transforms=fn (host), the shim: a step', 'the workaround', ''),
        ('shim-microbatch', 'shim-batch', both and split, 'stage batch vs microbatch',
         'stage batch vs microbatch: stage batch is', 'stage microbatch',
         f'; {mb.calls_per_step:g} calls/step instead of {shim.calls_per_step:g} at stage microbatch (batch-level '
         'draws and statistics per microbatch), which holds one microbatch on the device instead of the whole batch'),
        (best, 'ceiling', waits is not None, 'data for free (the ceiling leg)',
         'with data for free (the ceiling leg) a step would be', best, ''),
    ]  # fmt: skip
    for slow, fast, when, about, head, other, tail in factors:
        compared = tell(result, slow, fast) if when else None
        if compared is None:
            continue
        factor, told = compared.factor, compared.told
        if told is Told.AS_FAST:
            out.append(f'{head} as fast as {other} (x{factor:.2f}; {compared.rounds()}){tail}')
        elif told is Told.FASTER:
            out.append(f'{head} x{factor:.2f} faster than {other} ({compared.rounds()}){tail}')
        elif told is Told.SLOWER:
            out.append(f'{head} x{1 / factor:.2f} slower than {other} ({compared.rounds(slower=True)}){tail}')
        else:
            out.append(
                f'{about}: cannot tell — x{compared.factor:.2f}; {compared.rounds()}: neither all within '
                f'{AS_FAST_WITHIN:.0%} of x1 nor all beyond it on one side'
            )
    return out
