"""The reference gate, for ``compatshim report`` and ``compatshim bench --baselines`` alike: each result judged by the
rule (:func:`compatshim.bench.rule.judge`) against its baseline (:func:`~compatshim.bench.results.reference_store`),
and what fails the run: a regression, or a release without its baseline where its device has some. It decides and
says; the command line prints. (A pipeline's gate is :func:`compatshim.bench.pipeline.gate_pipeline`.) Imports
nothing heavy.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Optional

from compatshim import _exits
from compatshim.bench import rule
from compatshim.bench.metrics import COMPARABLE_BY, METRICS
from compatshim.bench.results import (
    BaselineExistsError,
    BenchResult,
    PathLike,
    baseline_for,
    record_baseline,
    reference_store,
)

__all__ = ['Judged', 'Judging', 'against_baselines', 'judge_all', 'judge_env', 'record_baselines', 'refused']


@dataclasses.dataclass
class Judged:
    """One env's result, the baseline it was judged against (its path, or ``None``), and the outcomes."""

    result: BenchResult
    baseline: Optional[BenchResult]
    baseline_path: Optional[str]
    judgements: list[rule.Judgement]

    @property
    def worst(self) -> rule.Outcome:
        return rule.worst(self.judgements)

    def outcome(self, metric: str) -> str:
        return next((str(j.outcome) for j in self.judgements if j.metric == metric), '—')

    def machine_change(self) -> Optional[float]:
        """How much faster the shim-batch leg ran than in the baseline's run: another machine, or another phase of
        this one (reported, never judged)."""
        now, then = self.result.legs['shim-batch'].samples_per_s, None
        then = self.baseline.legs['shim-batch'].samples_per_s if self.baseline is not None else then
        return statistics.median(now) / statistics.median(then) - 1 if now and then else None

    def to_json(self) -> dict[str, Any]:
        judgements = [dataclasses.asdict(j) for j in self.judgements]
        return {**self.result.to_json(), 'baseline': self.baseline_path, 'judgements': judgements}


def judge_env(result: BenchResult, baselines: PathLike) -> tuple[Judged, Optional[str]]:
    """``result`` judged by the rule against its baseline under ``baselines``, and the line that fails the run where it
    has none to be judged against (:func:`~compatshim.bench.results.baseline_for`): the one flow of ``compatshim
    report`` and ``compatshim bench --baselines``."""
    baseline, missing = baseline_for(baselines, result)
    named = reference_store(baselines, result.device).path(result.env).as_posix() if baseline else None
    return Judged(result, baseline, named, rule.judge(result, baseline, METRICS, COMPARABLE_BY)), missing


def refused(found: list[BenchResult], baselines: PathLike) -> list[str]:
    """The results whose baseline is not comparable (another workload, or work counted another way), one line per
    reason with what to do: ``compatshim report`` refuses them before judging, ``bench --baselines`` judges none."""
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
    """``compatshim bench --baselines``: ``result`` judged by the rule of ``compatshim report`` (a regression, or no
    baseline where the device has some, is exit 1; a baseline that is not comparable, exit 2): the exit code, and
    every outcome other than ok, one line each."""
    unlike = refused([result], baselines)
    if unlike:
        return _exits.NOT_DONE, unlike
    judged, missing = judge_env(result, baselines)
    lines = [j.line(result.env) for j in judged.judgements if j.outcome is not rule.Outcome.OK]
    failed = missing or judged.worst is rule.Outcome.REGRESSION
    return (_exits.REGRESSION if failed else _exits.OK), lines + ([missing] if missing else [])


@dataclasses.dataclass
class Judging:
    """What ``compatshim report`` judged: each result, by device, and the releases without a baseline (one line
    each, naming the command that records it)."""

    judged: dict[str, list[Judged]]
    missing: list[str]

    @property
    def failures(self) -> list[str]:
        """Every regression, one line each: env, metric, baseline, current value, threshold."""
        entries = [entry for device in self.judged.values() for entry in device]
        return [j.line(e.result.env) for e in entries for j in e.judgements if j.outcome is rule.Outcome.REGRESSION]

    @property
    def code(self) -> int:
        return _exits.REGRESSION if self.failures or self.missing else _exits.OK

    def summary(self) -> list[str]:
        """The last lines of the run: how many envs and the worst outcome, then what fails it."""
        entries = [entry for device in self.judged.values() for entry in device]
        absent = f'; {len(self.missing)} without a baseline (exit 1)' if self.missing else ''
        worst = rule.worst([j for entry in entries for j in entry.judgements])
        return [f'{len(entries)} env(s), worst outcome {worst}{absent}', *self.failures, *self.missing]


def judge_all(found: list[BenchResult], baselines: PathLike, record: bool, replace: bool) -> Judging:
    """Every result of ``found`` judged against ``baselines``; a release without a baseline fails the run unless
    ``record`` is to write it (where none exists, or with ``replace``)."""
    judged: dict[str, list[Judged]] = {}
    missing: list[str] = []
    for result in found:
        entry, absent = judge_env(result, baselines)
        path = reference_store(baselines, result.device).path(result.env)
        if absent and not (record and (replace or not path.exists())):  # unless recording writes it
            missing.append(absent)
        judged.setdefault(result.device, []).append(entry)
    return Judging(judged, missing)


def record_baselines(found: list[BenchResult], baselines: PathLike, replace: bool) -> list[str]:
    """``compatshim report --record``: each result recorded as its env's baseline (never over one unless ``replace``,
    never a planted run), one line each."""
    lines = []
    for result in found:
        try:
            lines.append(f'recorded {record_baseline(result, baselines, replace=replace)}')
        except (BaselineExistsError, ValueError) as exc:
            lines.append(f'not recorded: {exc}')
    return lines
