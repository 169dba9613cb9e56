"""The one gate of both benches (:func:`gate`): a result judged against its baseline, and the exit code (2: not
comparable, 1: a regression, else 0); the reference flows add its store and a release without a baseline (exit 1).
It decides and says; the command line prints. Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable
from typing import Any, Optional

from compatshim import _exits
from compatshim.bench import metrics, results, rule
from compatshim.bench.metrics import COMPARABLE_BY, LEGS, METRICS, PIPELINE_COMPARABLE_BY
from compatshim.bench.results import BenchResult, Cause, PathLike, PipelineResult, Result, baseline_for, reference_store
from compatshim.shim.registry import STATE

__all__ = [
    'Judged', 'Judging', 'against_baselines', 'compare', 'gate', 'judge_all', 'judge_env', 'record_baselines',
    'refused'
]  # fmt: skip


@dataclasses.dataclass
class Judged:
    """A result, its baseline (and path), the outcomes, and why the baseline is not comparable (``None``: it is)."""

    result: Any  # a BenchResult, or a PipelineResult
    baseline: Optional[Any]
    baseline_path: Optional[str]
    judgements: list[rule.Judgement]
    unlike: Optional[str] = None

    @property
    def worst(self) -> rule.Outcome:
        return rule.worst(self.judgements)

    @property
    def code(self) -> int:
        if self.unlike:
            return _exits.NOT_DONE
        return _exits.REGRESSION if self.worst is rule.Outcome.REGRESSION else _exits.OK

    def lines(self, name: str) -> list[str]:
        return [j.line(name) for j in self.judgements if j.outcome is not rule.Outcome.OK]

    def outcome(self, metric: str) -> str:
        return next((str(j.outcome) for j in self.judgements if j.metric == metric), '—')

    def machine_change(self) -> Optional[float]:
        """How much faster shim-batch ran than in the baseline's run (another machine or phase: never judged)."""
        now, then = self.result.legs['shim-batch'].samples_per_s, None
        then = self.baseline.legs['shim-batch'].samples_per_s if self.baseline is not None else then
        return statistics.median(now) / statistics.median(then) - 1 if now and then else None

    def to_json(self) -> dict[str, Any]:
        judgements = [dataclasses.asdict(j) for j in self.judgements]
        return {**self.result.to_json(), 'baseline': self.baseline_path, 'judgements': judgements}


def gate(result: Result, baseline: Optional[Result], metrics: Iterable[Any], keys: tuple[str, ...]) -> Judged:
    """Every gated metric of ``metrics`` in ``result`` judged against ``baseline`` (``None``: none)."""
    unlike = None if baseline is None else rule.unlike_baseline(result, baseline, keys)
    return Judged(result, baseline, None, rule.judge(result, baseline, metrics, keys), unlike)


def judge_env(result: BenchResult, baselines: PathLike) -> tuple[Judged, Optional[str]]:
    """``result`` judged against its baseline under ``baselines``, and the line that fails the run where it has none
    (:func:`~compatshim.bench.results.baseline_for`)."""
    baseline, missing = baseline_for(baselines, result)
    judged = gate(result, baseline, METRICS, COMPARABLE_BY)
    judged.baseline_path = reference_store(baselines, result.device).path(result.env).as_posix() if baseline else None
    return judged, missing


def refused(found: list[BenchResult], baselines: PathLike) -> list[str]:
    """The results whose baseline is not comparable, one line per reason with what to do."""
    unlike: dict[str, list[str]] = {}
    for result in found:
        baseline = baseline_for(baselines, result)[0]
        why = baseline and rule.unlike_baseline(result, baseline, COMPARABLE_BY)
        if why:
            unlike.setdefault(why, []).append(result.env)
    return [f'not comparable with its baseline: {envs[0]}{f" (and {len(envs) - 1} more)" if envs[1:] else ""}: '
            f'{why}; measure again with this compatshim, or re-record: tox -m report -- --record --replace'
            for why, envs in unlike.items()]  # fmt: skip


def against_baselines(result: BenchResult, baselines: PathLike) -> tuple[int, list[str]]:
    """``compatshim bench --baselines``, by the rule of ``compatshim report``: the exit code and the lines."""
    judged, missing = judge_env(result, baselines)
    if judged.unlike:
        return judged.code, refused([result], baselines)
    return (_exits.REGRESSION if missing else judged.code), judged.lines(result.env) + ([missing] if missing else [])


@dataclasses.dataclass
class Judging:
    """What ``compatshim report`` judged, by device, and the lines of the releases without a baseline."""

    judged: dict[str, list[Judged]]
    missing: list[str]

    @property
    def failures(self) -> list[str]:
        entries = [entry for device in self.judged.values() for entry in device]
        return [j.line(e.result.env) for e in entries for j in e.judgements if j.outcome is rule.Outcome.REGRESSION]

    @property
    def code(self) -> int:
        return _exits.REGRESSION if self.failures or self.missing else _exits.OK

    def summary(self) -> list[str]:
        entries = [entry for device in self.judged.values() for entry in device]
        absent = f'; {len(self.missing)} without a baseline (exit 1)' if self.missing else ''
        worst = rule.worst([j for entry in entries for j in entry.judgements])
        return [f'{len(entries)} env(s), worst outcome {worst}{absent}', *self.failures, *self.missing]


def judge_all(found: list[BenchResult], baselines: PathLike, record: bool, replace: bool) -> Judging:
    """Every result judged; a release without a baseline fails the run unless ``record`` is to write it."""
    judged: dict[str, list[Judged]] = {}
    missing: list[str] = []
    for result in found:
        entry, absent = judge_env(result, baselines)
        path = reference_store(baselines, result.device).path(result.env)
        if absent and not (record and (replace or not path.exists())):
            missing.append(absent)
        judged.setdefault(result.device, []).append(entry)
    return Judging(judged, missing)


def record_baselines(found: list[BenchResult], baselines: PathLike, replace: bool) -> list[str]:
    """``compatshim report --record``: each result recorded as its env's baseline, one line each."""
    lines = []
    for result in found:
        try:
            lines.append(f'recorded {results.record_baseline(result, baselines, replace=replace)}')
        except (results.BaselineExistsError, ValueError) as exc:
            lines.append(f'not recorded: {exc}')
    return lines


# --- The pipeline gate's compare: a user's run against the baseline they saved, across an upgrade too -------------

#: Composer's own legs: what the release does with the transform, without the shim.
COMPOSERS_LEGS = tuple(name for name, leg in LEGS.items() if leg.stage is None and leg.argument)


def _does(r: PipelineResult, leg: str) -> str:
    """What happened in ``leg`` on ``r``'s release: ``Composer 0.26.1: host (1 call/step)``, ``Composer 0.28.0: never
    called (0 calls/step)``, or why it did not run."""
    measured = r.legs.get(leg)
    if measured is None or measured.missing is not None:
        return f'Composer {r.composer}: {"no such leg" if measured is None else measured.reason}'
    calls = measured.calls_per_step
    return f'Composer {r.composer}: {measured.placement} ({calls:g} call{"" if calls == 1 else "s"}/step)'


def _behaviour(r: PipelineResult, leg: str) -> tuple[Any, ...]:
    measured = r.legs.get(leg)
    if measured is None or measured.missing is not None:  # a leg a result does not hold was not on its release
        return (Cause.NOT_HERE if measured is None else measured.missing.cause,)  # type: ignore[union-attr]
    return (measured.placement, measured.calls_per_step)


def compare(result: PipelineResult, baseline: PipelineResult, name: str) -> tuple[int, list[str]]:
    """``result`` judged against its baseline ``name``: the exit code and the lines that say it, in one pass.

    What the gate judges is what the user runs: the shim's legs that ran before (gone now: their placement says so),
    the ceiling, and Composer's own legs where they do what they did. Where the Composer release changed what one of
    its own legs does (ran on the host -> never called -> rejected, or a leg that appeared), that is a fact of the
    release, the same for every pipeline: said once, never judged. A leg that ran and fails now on the same release
    is a regression; timings only from :data:`rule.VERDICT_ROUNDS` rounds.
    """
    ran, ran_before = ({n for n, m in r.legs.items() if m.available} for r in (result, baseline))
    relied_on = {leg for leg in ran_before if leg in LEGS and LEGS[leg].stage}
    released = result.composer != baseline.composer
    by_release = [  # a leg failing now is the pipeline's, not the release's
        leg for leg in COMPOSERS_LEGS
        if released and _behaviour(result, leg) not in (_behaviour(baseline, leg), (Cause.FAILED,))
    ]  # fmt: skip
    judged_legs = [leg for leg in result.legs if leg in (ran & ran_before) | relied_on and leg not in by_release]
    timed = min(r.fingerprint['size']['rounds'] for r in (result, baseline)) >= rule.VERDICT_ROUNDS
    judged_metrics = [m for m in metrics.pipeline_metrics(judged_legs) if timed or m.kind is not rule.BESIDE]
    unlike = rule.unlike_baseline(result, baseline, PIPELINE_COMPARABLE_BY)
    judged = Judged(
        result, baseline, None, rule.judge(result, baseline, judged_metrics, PIPELINE_COMPARABLE_BY), unlike
    )
    if judged.unlike:
        return judged.code, [f'NOT COMPARABLE with {name!r}: {judged.unlike}; save a new baseline with --save {name}']
    what, accounted = result.pipeline, set(by_release) | set(judged_legs)
    fails = {leg for leg in result.legs if _behaviour(result, leg) == (Cause.FAILED,)}
    gone = sorted(ran_before - ran - accounted)
    judged.judgements += [rule.Judgement(f'{leg}: runs', rule.Outcome.REGRESSION, f'ran in the baseline; now '
                                         f'{_does(result, leg)}') for leg in gone if leg in fails]  # fmt: skip
    lines = [f'RELEASE {what} {leg}: without the shim, {_does(baseline, leg)}; {_does(result, leg)} '
             '(what the release does, the same for every pipeline: reported, not judged)'
             for leg in by_release]  # fmt: skip
    lines += [f'NEW {what} {leg}: runs now; in the baseline, {_does(baseline, leg)} (reported, not judged)'
              for leg in sorted(ran - ran_before - accounted)]  # fmt: skip
    lines += [f'GONE {what} {leg}: ran in the baseline; now, {_does(result, leg)} (reported, not judged)'
              for leg in gone if leg not in fails]  # fmt: skip
    never = [leg for leg in result.legs if leg not in ran | ran_before | set(by_release)]
    lines += [f'FAILS {what} {leg}: now, {_does(result, leg)}; in the baseline, {_does(baseline, leg)} (reported, not '
              'judged)' for leg in never if leg in fails]  # fmt: skip
    lines += judged.lines(what)
    work = {j.metric.split(':')[0]: j.outcome for j in judged.judgements if j.metric.endswith('work per call')}
    if set(work.values()) - {rule.Outcome.OK} and 'work rule' not in STATE.warned:  # once a process (a fixture's
        STATE.warned.add('work rule')  # session compares many times)
        lines.append(f'work: {rule.WORK_RULE}')
    lines += timing_sight(result, baseline, work, judged.judgements) if timed else []
    outcomes = [j.outcome for j in judged.judgements]
    worse, unsure = outcomes.count(rule.Outcome.REGRESSION), outcomes.count(rule.Outcome.INCONCLUSIVE)
    said = [f'{worse} worsened' if worse else 'no regression among what was judged' if unsure else 'nothing worsened']
    said += [f'{unsure} inconclusive, which decide{"s" if unsure == 1 else ""} nothing'] if unsure else []
    upgrade = [f'{r} {getattr(baseline, r)} -> {getattr(result, r)}' for r in ('composer', 'torch')
               if getattr(baseline, r) != getattr(result, r)]  # fmt: skip
    over = [f'{baseline.measured_at}, Composer {baseline.composer}']
    over += [f'upgraded: {", ".join(upgrade)}'] if upgrade else []
    over += [f'legs judged: {", ".join(judged_legs)}']
    over += [f'not measured in either run: {", ".join(never)}'] if never else []
    over += [] if timed else [f'timings not gated: fewer than {rule.VERDICT_ROUNDS} rounds']
    lines.append(f'compared with {name!r} ({"; ".join(over)}): {"; ".join(said)}')
    return judged.code, lines


def timing_sight(
    result: PipelineResult, baseline: PipelineResult, work: dict[str, rule.Outcome], judged: list[rule.Judgement]
) -> list[str]:
    """The transform's time per call now and then, and how much slower it must get for the timing gate to see it (its
    share of a step sets that; ``judged``: whether it could here); what the counts see of it (``work``: by leg)."""
    name = next((n for n in rule.TIMED_FIRST if n in result.legs), '')
    now, before = result.legs.get(name), baseline.legs.get(name)
    if now is None or before is None or not (now.transform_ms and before.transform_ms and now.transform_share):
        return []
    per_call = [m.transform_ms / max(m.calls_per_step, 1) for m in (now, before) if m.transform_ms is not None]
    step_change = 1 / (1 - (rule.BESIDE.min_effect or 0)) - 1  # a step this much longer: the minimum effect
    slower = 1 + step_change / now.transform_share
    unjudged = any(j.metric == f'{name}/ceiling' and 'not judged' in j.reason for j in judged)
    sight = f'the timing gate sees it from about {slower:.1f}x slower' + (' (not in this run)' if unjudged else '')
    if now.work is None or work.get(name) in (None, rule.Outcome.INCONCLUSIVE):
        counted = f'{sight}, and only the timing gate: its work was not judged here'
    elif now.work.outside:
        outside = now.work.outside_text()
        counted = f'its work in torch is counted exactly; outside torch (through {outside}) only {sight}'
    else:
        counted = f'{sight}; the work counts see any growth'
    return [
        f'{name}: the transform {per_call[0]:.3g} ms per call, {per_call[1]:.3g} ms in the baseline '
        f'({per_call[0] / per_call[1] - 1:+.0%}); it is {now.transform_share:.0%} of a step: {counted}'
    ]
