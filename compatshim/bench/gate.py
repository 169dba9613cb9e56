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
from compatshim.bench import results, rule
from compatshim.bench.metrics import COMPARABLE_BY, METRICS
from compatshim.bench.results import BenchResult, PathLike, Result, baseline_for, reference_store

__all__ = ['Judged', 'Judging', 'against_baselines', 'gate', 'judge_all', 'judge_env', 'record_baselines', 'refused']


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
