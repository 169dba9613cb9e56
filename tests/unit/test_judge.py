"""The comparison rule and the report, on recorded samples: the committed baselines and report are real bench runs,
``tests/data/loaded/`` holds real runs measured beside two CPU-bound processes, and ``tests/data/other-machine/`` a
whole ``tox -m report`` of unchanged code on another 2-core machine reporting the same CPU model (quiet and loaded);
the planted cases change those samples the way a slower shim, a slower hook path or a slower machine would. No torch, no
Composer, nothing timed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from compatshim import _cli
from compatshim.bench import gate, rule
from compatshim.bench.metrics import (
    COMPARABLE_BY,
    METRICS,
    PIPELINE_COMPARABLE_BY,
    Gate,
    metric,
    pipeline_metrics,
    tensors_of,
)
from compatshim.bench.results import BenchResult, PipelineResult, gather, record_baseline, reference_store

ROOT = Path(__file__).resolve().parents[2]
BASELINES = ROOT / 'matrix' / 'baselines'
REPORT = ROOT / 'matrix' / 'reports' / 'cpu'
#: The baselines of workload version 3 (v0.1.0), which the loaded runs and the other machine's were measured against.
BASELINES_V3 = ROOT / 'tests' / 'data' / 'baselines-v3'
LOADED = ROOT / 'tests' / 'data' / 'loaded'
#: ``tox -m report`` of unchanged code (v0.1.0) on another machine, as ``compatshim report --results`` reads it.
OTHER_MACHINE = ROOT / 'tests' / 'data' / 'other-machine'
#: ``tox -m report`` of unchanged code (the landed main at workload version 4, schema 5) on a third 2-core machine,
#: quiet and beside two CPU-bound processes: judged against today's committed baselines.
THIRD_MACHINE = ROOT / 'tests' / 'data' / 'third-machine'
#: A release of each affected family with its own shape of legs (0.26.1: no native microbatch), and the reference.
RECORDED = ['composer0.28.0-cpu', 'composer0.26.1-cpu', 'composer0.24.1-cpu']


def recorded(env: str, root: Path = BASELINES) -> BenchResult:
    return BenchResult.from_json(json.loads((root / 'cpu' / f'{env}.json').read_text()))


def v3(env: str) -> BenchResult:
    """The version-3 baseline of ``env`` (what the loaded runs and the other machine's compare with)."""
    return recorded(env, BASELINES_V3)


def host_ratio(result: BenchResult) -> str:
    """The same-run ratio of stage batch against the host path of its release: plain device_transforms on 0.24-0.26,
    the batch_transforms workaround on 0.27+."""
    return 'shim-batch/native-batch' if result.legs['native-batch'].available else 'shim-batch/unpatched'


def judged(result: Any, baseline: Any) -> list[rule.Judgement]:
    return rule.judge(result, baseline, METRICS, COMPARABLE_BY)


def loaded(env: str) -> BenchResult:
    """The same checkout's run of ``env``, measured beside two CPU-bound processes (``while True: pass``)."""
    return BenchResult.from_json(json.loads((LOADED / f'{env}.json').read_text()))


def _report(tmp_path: Path, *results: BenchResult, baselines: Path = BASELINES) -> tuple[int, Path]:
    """``compatshim report`` on ``results`` (written as files, as bench envs write them): exit code, report dir."""
    folder = tmp_path / 'results'
    folder.mkdir(exist_ok=True)
    for result in results:
        (folder / f'{result.env}.json').write_text(json.dumps(result.to_json()))
    out = tmp_path / 'report'
    code = _cli.main(['report', '--results', str(folder), '--baselines', str(baselines), '--out', str(out), '--no-png'])
    return code, out


def _scaled(
    result: BenchResult,
    shim: float = 1.0,
    machine: float = 1.0,
    hook_us: float = 0.0,
    monitor: float = 1.0,
    tensor_us: float = 0.0,
) -> BenchResult:
    """``result`` as if the shim legs were ``shim`` times as fast, the whole machine ``machine`` times as fast, every
    call of the shim's hook path ``hook_us`` µs slower, the monitor's own work ``monitor`` times as slow, and the
    monitor ``tensor_us`` µs slower for each tensor it counts: on the raw numbers every metric is read from."""
    out = copy.deepcopy(result)
    for name, leg in out.legs.items():  # a shim leg's partner is never a shim leg
        factor = machine * (shim if name.startswith('shim') else 1.0)
        leg.samples_per_s = [v * factor for v in leg.samples_per_s]
        leg.round_s = [v / factor for v in leg.round_s]
        leg.beside = {partner: [v / machine for v in windows] for partner, windows in leg.beside.items()}
    for name, found in out.overheads.items():
        extra = hook_us * 1e-6 * found.calls if name.startswith('hook') else 0.0
        extra += tensor_us * 1e-6 * found.calls * tensors_of(name) if name.startswith('monitor') else 0.0
        own = monitor if name == 'monitor' else 1.0
        found.path_s = [(d + (p - d) * own) / machine + extra for p, d in zip(found.path_s, found.direct_s)]
        found.direct_s = [d / machine for d in found.direct_s]
    return out


def _outcomes(result: BenchResult, baseline: Any) -> dict[str, str]:
    return {j.metric: j.outcome for j in judged(result, baseline)}


@pytest.mark.parametrize('env', RECORDED)
def test_unchanged_code_measured_again_passes(env: str, tmp_path: Path) -> None:
    """Two sessions of unchanged code: the committed report's run of an env (measured after its baseline, in another
    session) judged against that baseline: no regression, exit 0."""
    again = next(r for r in gather([REPORT / 'report.json']) if r.env == env)
    assert again.measured_at != recorded(env).measured_at, 'two different runs'
    assert 'regression' not in _outcomes(again, recorded(env)).values()
    assert _report(tmp_path, again)[0] == 0


def test_committed_report_is_an_unchanged_pair_and_reproduces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed cpu report (a run of unchanged code) judged again under this rule against the committed baselines
    gives the committed report.md and report.json back, byte for byte, and no regression. (Run from the checkout's
    root, as tox runs the report env: the report names its baselines as the command line spelled them.)"""
    monkeypatch.chdir(ROOT)
    out = tmp_path / 'again'
    code = _cli.main(
        ['report', '--results', str(REPORT / 'report.json'), '--baselines', 'matrix/baselines', '--out', str(out)]
        + ['--no-png']
    )
    assert code == 0
    for name in ('report.md', 'report.json'):
        assert (out / 'cpu' / name).read_text() == (REPORT / name).read_text(), name


def _loaded_envs() -> list[str]:
    return sorted(path.stem for path in LOADED.glob('*.json'))


def test_the_loaded_runs_are_loaded_runs_of_recorded_releases() -> None:
    envs = _loaded_envs()
    assert set(RECORDED) <= set(envs), envs
    for env in envs:
        result, baseline = loaded(env), v3(env)
        assert result.measured_at != baseline.measured_at and not result.planted
        assert result.fingerprint['workload_version'] == baseline.fingerprint['workload_version']


@pytest.mark.parametrize('env', _loaded_envs())
def test_a_run_beside_cpu_bound_load_against_a_quiet_baseline_is_no_regression(env: str, tmp_path: Path) -> None:
    """Measured beside two CPU-bound processes (its absolute µs and samples/s moved), judged against the quiet
    baseline: no gated metric regresses, and ``compatshim report`` exits 0."""
    result, baseline = loaded(env), v3(env)
    outcomes = _outcomes(result, baseline)
    assert 'regression' not in outcomes.values(), {k: v for k, v in outcomes.items() if v != 'ok'}
    assert _report(tmp_path, result, baselines=BASELINES_V3)[0] == 0


@pytest.mark.parametrize('env', [e for e in _loaded_envs() if 'composer0.24' not in e])
def test_the_planted_slowdowns_fail_a_loaded_run_too(env: str) -> None:
    """Beside the same load, what the shim can cause is still found: a 20% slower shim leg in the same-run ratios, and
    50 µs more per hook call at both stages."""
    result, baseline = loaded(env), v3(env)
    slower = _outcomes(_scaled(result, shim=0.8), baseline)
    assert slower[host_ratio(result)] == 'regression'
    if metric('shim-microbatch/native-microbatch').read(result):
        assert slower['shim-microbatch/native-microbatch'] == 'regression'
    hook = _outcomes(_scaled(result, hook_us=50.0), baseline)
    assert hook[HOOK_BATCH] == hook[HOOK_MICROBATCH] == 'regression'


HOOK_BATCH, HOOK_MICROBATCH = 'hook share of a step (batch)', 'hook share of a step (microbatch)'


def _other_machine(run: str) -> list[BenchResult]:
    return gather([OTHER_MACHINE / run])


@pytest.mark.parametrize('run', ['quiet', 'loaded'])
def test_another_machine_of_the_same_model_string_is_no_regression(run: str, tmp_path: Path, capsys: Any) -> None:
    """``tox -m report`` of unchanged code on another 2-core machine reporting "AMD EPYC" (its interpreter slower
    against its vector units than the baselines' machine: the monitor's path over the direct path rose from 9.3-10.1x
    to 11-13.6x), quiet and beside two CPU-bound processes: judged against the committed baselines, nothing
    regresses and ``compatshim report`` exits 0. (Under the rule of v0.1.0 both exited 1, on 8 and 12 envs.)"""
    results = _other_machine(run)
    assert len(results) == len(list((BASELINES_V3 / 'cpu').glob('*.json')))
    for result in results:
        outcomes = _outcomes(result, v3(result.env))
        assert 'regression' not in outcomes.values(), (result.env, {k: v for k, v in outcomes.items() if v != 'ok'})
    args = ['report', '--results', str(OTHER_MACHINE / run), '--baselines', str(BASELINES_V3)]
    assert _cli.main([*args, '--out', str(tmp_path / 'out'), '--no-png']) == 0, capsys.readouterr().out


def test_the_other_machines_runs_measured_what_their_baselines_measured() -> None:
    """The other machine's runs stay a real case only while they are comparable with the baselines they are judged
    against: the version-3 baselines, kept beside them when version 4 re-recorded the committed ones (the same
    samples, read as schema 5), and judged under this checkout's rule."""
    for run in ('quiet', 'loaded'):
        for result in _other_machine(run):
            baseline = v3(result.env)
            assert result.fingerprint['workload_version'] == baseline.fingerprint['workload_version'], result.env
            assert result.fingerprint['cpu_model'] == baseline.fingerprint['cpu_model'], 'the same model string'
            assert result.measured_at != baseline.measured_at and not result.planted


@pytest.mark.parametrize('run', ['quiet', 'loaded'])
def test_the_planted_slowdowns_fail_the_other_machines_runs(run: str) -> None:
    """On the other machine's samples, what the shim can cause is still found: a 20% slower shim leg, 50 µs more per
    hook call at both stages."""
    for result in _other_machine(run):
        if not result.affected:
            continue
        baseline = v3(result.env)
        slower = _outcomes(_scaled(result, shim=0.8), baseline)
        assert slower[host_ratio(result)] == 'regression', (result.env, slower)
        hook = _outcomes(_scaled(result, hook_us=50.0), baseline)
        assert hook[HOOK_BATCH] == hook[HOOK_MICROBATCH] == 'regression', (result.env, hook)


def test_unlike_work_is_reported_never_gated() -> None:
    """compatshim's path over the direct path (Python bookkeeping over tensor calls) and every absolute time are
    figures: no value of theirs is judged."""
    for found in METRICS:
        if found.kind in (rule.OVERHEAD, rule.FIGURE):
            assert found.gate is Gate.NEVER, found.id
    result = recorded('composer0.28.0-cpu')
    heavier = _scaled(result, monitor=1.5)  # the monitor's path 1.5x its baseline's against the direct path
    assert rule.worst(judged(heavier, result)) == 'ok'


@pytest.mark.parametrize('machine', [1 / 1.7, 1.7], ids=['1.7x-slower-machine', '1.7x-faster-machine'])
@pytest.mark.parametrize('env', RECORDED)
def test_a_machine_of_another_speed_moves_no_gated_metric(env: str, machine: float, tmp_path: Path) -> None:
    """Every time 1.7x longer (or shorter), as on another machine with the same CPU model string: the µs per batch and
    the samples/s move (reported), no gated metric does: exit 0."""
    result = recorded(env)
    other = _scaled(result, machine=machine)
    assert _report(tmp_path, other)[0] == 0
    assert set(_outcomes(other, result).values()) == {'ok'}
    us = metric('monitor µs/batch')
    assert sorted(us.read(other)) == pytest.approx(sorted(v / machine for v in us.read(result)))
    assert gate.Judged(other, result, None, []).machine_change() == pytest.approx(machine - 1)


@pytest.mark.parametrize('env', RECORDED[:2])
def test_a_twenty_percent_slower_shim_leg_is_a_regression(env: str, tmp_path: Path, capsys: Any) -> None:
    result = recorded(env)
    slower = _scaled(result, shim=0.8)
    code, _ = _report(tmp_path, slower)
    assert code == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f'REGRESSION {env} ') and 'baseline' in last and 'now' in last and 'threshold -10%' in last
    outcomes = _outcomes(slower, result)
    assert outcomes[host_ratio(result)] == 'regression'
    if metric('shim-microbatch/native-microbatch').read(result):
        assert outcomes['shim-microbatch/native-microbatch'] == 'regression'


@pytest.mark.parametrize('env', RECORDED[:2])
def test_fifty_microseconds_more_per_hook_call_is_a_regression_at_both_stages(
    env: str, tmp_path: Path, capsys: Any
) -> None:
    result = recorded(env)
    slower = _scaled(result, hook_us=50.0)
    assert _report(tmp_path, slower)[0] == 1
    out = capsys.readouterr().out
    for stage in ('batch', 'microbatch'):
        line = next(x for x in out.splitlines() if x.startswith(f'REGRESSION {env} hook share of a step ({stage})'))
        assert f'threshold ≤ {rule.HOOK_SHARE.limit:g}%' in line and 'over the limit' in line
    outcomes = _outcomes(slower, result)
    assert outcomes[HOOK_BATCH] == outcomes[HOOK_MICROBATCH] == 'regression'


def test_a_monitor_over_its_limit_is_a_regression_without_a_baseline() -> None:
    """The monitor's share of a step is judged against its limit, on the result alone."""
    result = recorded('composer0.28.0-cpu')
    share = metric('monitor share of a step')
    heavy = _scaled(result, monitor=2 * rule.MONITOR_SHARE.limit / min(share.read(result)))
    found = {j.metric: j for j in judged(heavy, None)}
    assert found[share.id].outcome == 'regression' and found[share.id].threshold == '≤ 1%'
    assert {j.metric: j.outcome for j in judged(result, None)}[share.id] == 'ok'


@pytest.mark.parametrize('env', RECORDED)
def test_a_monitor_slower_per_tensor_is_a_regression_beyond_the_move(env: str, tmp_path: Path, capsys: Any) -> None:
    """1 µs more per tensor the monitor counts (``COMPATSHIM_PLANT_TENSOR_US=1``): on the detection-style batch of
    768 tensors its cost beyond Composer's own move of that batch passes its limit, though on the image batch of two
    tensors its share of a step hardly moves; the committed run itself is within the limit."""
    result = next(r for r in gather([REPORT / 'report.json']) if r.env == env)
    beyond = metric('monitor beyond the move, 256 samples')
    assert {j.metric: j.outcome for j in judged(result, None)}[beyond.id] == 'ok'
    slower = _scaled(result, tensor_us=1.0)
    found = {j.metric: j for j in judged(slower, None)}
    assert (
        found[beyond.id].outcome == 'regression'
        and found[beyond.id].threshold == f'≤ {rule.MONITOR_BEYOND.limit:g}% of the move'
    )
    assert found['monitor share of a step'].outcome == 'ok'
    assert _report(tmp_path, slower)[0] == 1
    assert f'REGRESSION {env} monitor beyond the move, 256 samples' in capsys.readouterr().out


def test_bytes_are_a_count_judged_exactly() -> None:
    result = recorded('composer0.28.0-cpu')
    grown = copy.deepcopy(result)
    grown.recipe['shim-batch'].h2d_bytes_per_step += 8  # one more int64 crosses per step
    outcomes = _outcomes(grown, result)
    assert outcomes['bytes per step (recipe shim-batch)'] == 'regression'
    assert outcomes['bytes per step (recipe shim-microbatch)'] == 'ok'
    fewer = copy.deepcopy(result)
    fewer.recipe['shim-batch'].h2d_bytes_per_step -= 8
    assert _outcomes(fewer, result)['bytes per step (recipe shim-batch)'] == 'improved'


@pytest.mark.parametrize(
    ('leg', 'field', 'value'),
    [
        ('shim-batch', 'placement', 'host'),
        ('shim-batch', 'calls_per_step', 2.0),
        ('shim-microbatch', 'placement', 'never called'),
    ],
)
def test_wrong_placement_or_coherence_is_a_regression_whatever_the_timings(leg: str, field: str, value: Any) -> None:
    result = recorded('composer0.28.0-cpu')
    broken = copy.deepcopy(result)
    setattr(broken.legs[leg], field, value)
    found = [j for j in judged(broken, None) if j.outcome == 'regression']
    assert [j.metric for j in found] == [f'placement ({leg})'], found


def test_on_an_unaffected_release_what_is_gated_is_that_nothing_is_patched() -> None:
    result = recorded('composer0.24.1-cpu')
    slower = _scaled(result, shim=0.5)  # the shim legs run Composer's own code there: an A/A comparison, not gated
    assert rule.worst(judged(slower, result)) == 'ok'
    patched = copy.deepcopy(result)
    patched.patched_by_enable = ['composer.core.data_spec.DataSpec.__init__']
    assert [j.metric for j in judged(patched, result) if j.outcome == 'regression'] == [
        'patches on an unaffected release'
    ]


def test_on_a_gpu_shim_batch_over_unpatched_is_the_speed_up_not_a_gate() -> None:
    """On cuda/mps the host path transforms on the host and shim-batch on the device: not the same work, so that
    ratio is reported (it is what the shim is for there); stage batch is gated by placement, bytes and its hook."""
    result = recorded('composer0.28.0-cpu')
    on_gpu = copy.deepcopy(result)
    on_gpu.fingerprint['device'] = 'cuda'
    metrics = {j.metric for j in judged(_scaled(on_gpu, shim=0.5), on_gpu)}
    assert host_ratio(result) not in metrics and 'shim-microbatch/native-microbatch' in metrics


SAME = [1.00, 0.99, 1.01, 1.00, 1.00, 1.02, 0.99, 1.01]


@pytest.mark.parametrize(
    ('current', 'outcome'),
    [
        ([1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.01, 1.00], 'ok'),
        ([0.80, 0.81, 0.79, 0.80, 0.82, 0.78, 0.81, 0.80], 'regression'),
        ([1.25, 1.26, 1.24, 1.25, 1.27, 1.23, 1.26, 1.25], 'improved'),
        ([0.97, 0.98, 0.96, 0.97, 0.99, 0.95, 0.98, 0.97], 'ok'),  # -3%: significant, below the minimum effect
        ([0.40, 1.60, 0.70, 1.30, 0.60, 1.20, 0.50, 0.80], 'inconclusive'),  # -25% median, noise
        ([0.80, 0.81, 0.79], 'inconclusive'),  # 3 a side (below) can never be significant at 0.01
    ],
)
def test_rule_on_same_run_ratios(current: list[float], outcome: str) -> None:
    assert rule.RATIO.judge('ratio', current, SAME[: len(current)]).outcome == outcome


@pytest.mark.parametrize(
    ('share', 'outcome'), [(0.03, 'ok'), (0.099, 'ok'), (0.101, 'regression'), (0.3, 'regression')]
)
def test_rule_on_the_hooks_limit(share: float, outcome: str) -> None:
    """A share is held to its limit, whatever the baseline (none is read)."""
    assert rule.HOOK_SHARE.judge('hook', [share] * 5, None).outcome == outcome


def test_mann_whitney() -> None:
    low, high = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0]
    assert rule.mann_whitney_p(low, high) < 1e-3 < 0.999 < rule.mann_whitney_p(high, low)
    assert 0.4 < rule.mann_whitney_p(low, low) < 0.6
    assert rule.mann_whitney_p([1.0, 1.0], [1.0, 1.0]) == 1.0  # all tied: no evidence either way
    # The exact one-sided p for 5 vs 5 fully separated is 1/252 = 0.004; the approximation is close, and not smaller.
    assert 0.004 <= rule.mann_whitney_p(low[:5], high[:5]) < rule.ALPHA


def test_the_rule_is_one_constant_built_from_the_kinds() -> None:
    """Every gated kind states its part in RULE, with its own numbers; no module switches on a kind's code, and the
    report reads no docstring."""
    gated = {m.kind for m in METRICS if m.gate is not Gate.NEVER}
    for kind in gated:
        assert kind.sentence and kind.sentence in rule.RULE, kind.name
    assert f'{rule.RATIO.min_effect:.0%}' in rule.RULE and f'{rule.BESIDE.min_effect:.0%}' in rule.RULE
    assert f'{rule.MONITOR_SHARE.limit:g}%' in rule.RULE and f'{rule.HOOK_SHARE.limit:g}%' in rule.RULE
    assert f'{rule.ALPHA:g}' in rule.RULE
    for path in (ROOT / 'compatshim').rglob('*.py'):
        assert 'kind ==' not in path.read_text(), path  # the issue's own check: grep -n "kind ==" compatshim/
    assert '__doc__' not in (ROOT / 'compatshim' / 'bench' / 'report.py').read_text()
    assert rule.RULE in (REPORT / 'report.md').read_text()


def test_record_never_overwrites(tmp_path: Path) -> None:
    result = recorded('composer0.28.0-cpu')
    path = record_baseline(result, tmp_path)
    assert path == tmp_path / 'cpu' / 'composer0.28.0-cpu.json'
    assert reference_store(tmp_path, 'cpu').load(result.env) == result
    with pytest.raises(FileExistsError, match='--replace'):
        record_baseline(result, tmp_path)
    with pytest.raises(ValueError, match='planted'):
        record_baseline(_planted(result), tmp_path, replace=True)
    assert record_baseline(result, tmp_path, replace=True) == path


def _planted(result: BenchResult) -> BenchResult:
    planted = copy.deepcopy(result)
    planted.planted_hook_us = 50.0
    return planted


def test_report_records_missing_baselines_only(tmp_path: Path) -> None:
    result = recorded('composer0.26.1-cpu')
    baselines = tmp_path / 'baselines'  # not there yet: --record makes it (a device's first baselines)
    folder = tmp_path / 'results'
    folder.mkdir()
    (folder / 'r.json').write_text(json.dumps(result.to_json()))
    args = ['report', '--results', str(folder), '--baselines', str(baselines), '--out', str(tmp_path / 'out')]
    assert _cli.main([*args, '--no-png', '--record']) == 0  # no baseline: inconclusive, then recorded
    first = reference_store(baselines, 'cpu').path(result.env).read_text()
    (folder / 'r.json').write_text(json.dumps(_scaled(result, shim=0.5).to_json()))
    assert _cli.main([*args, '--no-png', '--record']) == 1  # judged against the recorded one; not overwritten
    assert reference_store(baselines, 'cpu').path(result.env).read_text() == first


def _renamed() -> BenchResult:
    renamed = copy.deepcopy(recorded('composer0.28.0-cpu'))
    renamed.env = 'composer0.28.0-renamed-cpu'
    return renamed


RECORD_IT = 'record it: tox -e bench-composer0.28.0-renamed-cpu,report -- --record'


def test_a_release_without_a_baseline_fails_the_main_job_naming_the_record_command(tmp_path: Path, capsys: Any) -> None:
    """A renamed env (or a forgotten --record) on a device that has baselines: exit 1, the last line says how to record
    it; with --record it is recorded instead."""
    code, _ = _report(tmp_path, _renamed())
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1
    assert last.startswith('MISSING BASELINE composer0.28.0-renamed-cpu: ') and RECORD_IT in last


def test_bench_with_baselines_follows_the_same_rule(tmp_path: Path) -> None:
    """``compatshim bench --baselines DIR`` judges its result as ``compatshim report`` does (``gate``): exit 1 for a
    release without a baseline where DIR holds some of its device, exit 0 against its own, exit 0 on a device's first
    run."""
    code, lines = gate.against_baselines(_renamed(), BASELINES)
    assert code == 1 and RECORD_IT in lines[-1]
    assert gate.against_baselines(recorded('composer0.28.0-cpu'), BASELINES)[0] == 0
    (tmp_path / 'cpu').mkdir()
    assert gate.against_baselines(_renamed(), tmp_path)[0] == 0  # no baselines at all: inconclusive, never a failure
    assert gate.against_baselines(_scaled(recorded('composer0.28.0-cpu'), shim=0.5), BASELINES)[0] == 1


def test_bench_refuses_a_missing_baselines_directory_before_measuring(capsys: Any, tmp_path: Path) -> None:
    assert _cli.main(['bench', '--baselines', str(tmp_path / 'nowhere')]) == 2
    assert 'no such directory (nothing measured)' in capsys.readouterr().err


def test_a_baseline_of_another_workload_version_is_not_comparable(tmp_path: Path) -> None:
    """Said so, metric by metric, and not judged: a result 5x slower than such a baseline is no regression."""
    result = recorded('composer0.28.0-cpu')
    other = copy.deepcopy(result)
    version = other.fingerprint['workload_version']
    other.fingerprint['workload_version'] = version + 1
    judgements = judged(_scaled(result, shim=0.2), other)
    against = [j for j in judgements if metric(j.metric).kind.against_baseline]
    assert against and {j.outcome for j in against} == {'not comparable'}
    assert all(f'workload version {version + 1} in the baseline, {version} now' in j.reason for j in against)
    assert rule.worst(judgements) == 'not comparable'


def test_no_metric_is_named_outside_the_registry() -> None:
    """The engine, the benches, the rule, the gate, the report and the CLI take every metric from
    compatshim/bench/metrics.py: no metric id, and no position in a list of them, appears in their source."""
    for name in (
        'bench/engine.py',
        'bench/reference.py',
        'bench/pipeline.py',
        'bench/rule.py',
        'bench/gate.py',
        'bench/report.py',
        '_cli.py',
    ):
        source = (ROOT / 'compatshim' / name).read_text()
        named = [m.id for m in METRICS if f"'{m.id}'" in source]
        assert named == [], f'{name} names {named}'
        assert 'METRICS[' not in source, f'{name} indexes METRICS'


def test_report_refuses_what_it_cannot_read(tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / 'bad.json'
    bad.write_text('{"a": 1}')
    args = ['report', '--baselines', str(BASELINES), '--out', str(tmp_path / 'out'), '--no-png', '--results']
    assert _cli.main([*args, str(bad)]) == 2
    assert 'neither a bench result' in capsys.readouterr().err
    assert _cli.main([*args, str(tmp_path / 'missing')]) == 2
    assert 'missing: no such file or directory' in capsys.readouterr().err
    (tmp_path / 'empty-dir').mkdir()
    assert _cli.main([*args, str(tmp_path / 'empty-dir')]) == 2
    assert 'no bench results' in capsys.readouterr().err
    assert not (tmp_path / 'out').exists()  # nothing half-done


def test_report_without_matplotlib_asks_for_it_or_no_png(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    """The charts need the [bench] extra: without matplotlib, one line, exit 2, nothing written (not a traceback and
    exit 1, which a CI job would read as a regression)."""
    monkeypatch.setitem(sys.modules, 'matplotlib', None)
    args = ['report', '--results', str(REPORT / 'report.json'), '--baselines', str(BASELINES)]
    assert _cli.main([*args, '--out', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'matplotlib' in err[0] and '--no-png' in err[0], err
    assert not (tmp_path / 'out').exists()


def test_results_gathered_from_runners_give_the_report_of_tox_e_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory of per-env results as CI's artifacts lay them out (``<device>/bench-<env>.json``, from any runners)
    gives, through ``compatshim report`` (what the workflow's report job runs, as ``tox -e report``), the very report
    ``tox -e report`` wrote from the same results: the committed one, byte for byte."""
    results = gather([REPORT / 'report.json'])
    folder = tmp_path / 'artifacts'
    for result in results:
        (folder / result.device).mkdir(parents=True, exist_ok=True)
        (folder / result.device / f'bench-{result.env}.json').write_text(json.dumps(result.to_json()))
    assert gather([folder]) == results
    out = tmp_path / 'report'
    monkeypatch.chdir(ROOT)  # as tox runs the report env (the report names its baselines as they were spelled)
    args = ['report', '--results', str(folder), '--baselines', 'matrix/baselines', '--out', str(out), '--no-png']
    assert _cli.main(args) == 0
    for name in ('report.md', 'report.json'):
        assert (out / 'cpu' / name).read_text() == (REPORT / name).read_text(), name


PIPELINE = ROOT / 'tests' / 'data' / 'pipeline'


def _pipeline(name: str) -> PipelineResult:
    """A real ``compatshim bench --pipeline uint8_pipeline:pipeline`` run at the default size (Composer 0.32.1, cpu):
    ``main`` saved, ``unchanged`` compared against it, ``slower2x`` with the transform doing its work twice."""
    return PipelineResult.from_json(json.loads((PIPELINE / f'{name}.json').read_text()))


def _pipeline_outcomes(result: PipelineResult, baseline: PipelineResult) -> dict[str, str]:
    gated = pipeline_metrics({*result.legs, *baseline.legs})
    return {j.metric: j.outcome for j in rule.judge(result, baseline, gated, PIPELINE_COMPARABLE_BY)}


def test_a_pipeline_transform_twice_as_slow_fails_on_recorded_samples() -> None:
    """The timing gate at the edge of its minimum effect, on real samples (the in-env test plants a 10x slower
    transform, which no machine hides): unchanged, nothing worsens; twice as slow (about 40% of the step), every leg
    that runs the transform falls against its ceiling (-28% to -31% here, p = 0.0005) and the ceiling does not."""
    main = _pipeline('main')
    assert 'regression' not in _pipeline_outcomes(_pipeline('unchanged'), main).values()
    slower = _pipeline_outcomes(_pipeline('slower2x'), main)
    for leg in ('native-batch', 'native-microbatch', 'shim-batch', 'shim-microbatch'):
        assert slower[f'{leg}/ceiling'] == 'regression', slower
    assert {outcome for metric_id, outcome in slower.items() if not metric_id.endswith('/ceiling')} == {'ok'}


@pytest.mark.parametrize('run', ['quiet', 'loaded'])
def test_a_third_machine_judged_against_the_committed_baselines_is_no_regression(
    run: str, tmp_path: Path, capsys: Any
) -> None:
    """The landed main's ``tox -m report`` on a third 2-core machine (faster at interpreter work than the baselines'
    machine: shim-batch samples/s +6% to +25%, one env -20%), quiet and beside two CPU-bound processes: every result
    judged against the committed baselines (``matrix/baselines``, schema 5) is no regression, and ``compatshim report``
    exits 0 on them. It fails if the rule turns either set into a regression."""
    results = gather([THIRD_MACHINE / run])
    assert len(results) == len(list((BASELINES / 'cpu').glob('*.json'))) == 12
    for result in results:
        baseline = recorded(result.env)
        assert result.fingerprint['workload_version'] == baseline.fingerprint['workload_version'], result.env
        assert result.measured_at != baseline.measured_at and not result.planted
        outcomes = _outcomes(result, baseline)
        assert 'regression' not in outcomes.values(), (result.env, {k: v for k, v in outcomes.items() if v != 'ok'})
    args = ['report', '--results', str(THIRD_MACHINE / run), '--baselines', str(BASELINES)]
    assert _cli.main([*args, '--out', str(tmp_path / 'out'), '--no-png']) == 0, capsys.readouterr().out


@pytest.mark.parametrize('run', ['quiet', 'loaded'])
def test_the_planted_slowdowns_fail_the_third_machines_runs(run: str) -> None:
    """The gate still finds on the third machine's samples what the shim can cause: a 20% slower shim leg."""
    for result in gather([THIRD_MACHINE / run]):
        if result.affected:
            slower = _outcomes(_scaled(result, shim=0.8), recorded(result.env))
            assert slower[host_ratio(result)] == 'regression', (result.env, slower)


def test_a_timing_is_never_judged_where_the_rounds_of_the_baseline_or_the_run_were_unstable() -> None:
    """A baseline saved on a busy machine (its shim-batch rounds spread by over half their median, and its median by
    chance 40% faster): against it an unchanged run read as a 30% regression, and the user's CI failed on unchanged
    code. Now the ratio is inconclusive, naming the side whose paired ratio spread and what to do; the same rounds made
    stable are judged (and regress), so the gate still sees what it can."""
    run, baseline = _pipeline('unchanged'), copy.deepcopy(_pipeline('main'))
    rounds = baseline.legs['shim-batch'].round_s
    busy = [s * (0.45 if i % 2 else 0.75) for i, s in enumerate(rounds)]  # faster on median, and spread
    baseline.legs['shim-batch'].round_s = busy
    assert rule.unsteady(baseline.step_ms('shim-batch')) and not rule.unsteady(run.step_ms('shim-batch'))
    judged = {j.metric: j for j in rule.judge(run, baseline, pipeline_metrics(run.legs), PIPELINE_COMPARABLE_BY)}
    verdict = judged['shim-batch/ceiling']
    assert verdict.outcome == 'inconclusive', verdict
    assert verdict.reason.startswith('not judged: in the baseline, its ratio spread by 49% across rounds'), verdict
    assert 'saved again in steadier rounds' in verdict.reason
    steady = [s * 0.6 for s in rounds]  # the same speed-up, in stable rounds: a real change, judged
    baseline.legs['shim-batch'].round_s = steady
    outcome = {
        j.metric: j.outcome for j in rule.judge(run, baseline, pipeline_metrics(run.legs), PIPELINE_COMPARABLE_BY)
    }
    assert outcome['shim-batch/ceiling'] == 'regression', outcome


def test_a_leg_that_spread_alone_does_not_veto_the_steady_ratio_it_is_in() -> None:
    """Issue 59: twice the numpy/PIL work was caught 2 runs in 4: the ceiling (the lightest, noisiest leg) spread by
    29% while each round's pair moved together, and the leg's spread vetoed every ratio it took part in. A busy phase
    that slows both windows of a round alike (the pair's ratio steady) leaves the ratio judged; one that slows one
    window alone does not."""
    run, baseline = _pipeline('slower2x'), _pipeline('main')
    legs = run.legs['shim-batch']
    phase = [1.0 if i % 2 else 1.8 for i in range(len(legs.round_s))]  # every other round 80% slower, both windows
    legs.round_s = [s * f for s, f in zip(legs.round_s, phase)]
    legs.beside['ceiling'] = [s * f for s, f in zip(legs.beside['ceiling'], phase)]
    pair = rule.BESIDE.read(rule.SampleSource('shim-batch', 'ceiling'), run)
    assert rule.unsteady(run.step_ms('shim-batch')) and not rule.unsteady(pair), pair
    judged = {j.metric: j for j in rule.judge(run, baseline, pipeline_metrics(run.legs), PIPELINE_COMPARABLE_BY)}
    assert judged['shim-batch/ceiling'].outcome == 'regression', judged['shim-batch/ceiling']
    legs.beside['ceiling'] = [s / f for s, f in zip(legs.beside['ceiling'], phase)]  # one window of a round alone
    judged = {j.metric: j for j in rule.judge(run, baseline, pipeline_metrics(run.legs), PIPELINE_COMPARABLE_BY)}
    assert judged['shim-batch/ceiling'].reason.startswith('not judged: in this run, its ratio spread')


def test_like_for_like_holds_only_a_leg_against_its_ceiling() -> None:
    """A review of issue 59's rule: demoting every improved ratio where any count changed also hid the reference's
    same-run ratios (like work on both legs) behind a recipe leg's bytes. Only a pipeline leg against its ceiling is
    demoted, and only by the counts of its own legs or the transform's work."""
    base = recorded('composer0.28.0-cpu')
    faster = _scaled(base, shim=1.5)
    faster.recipe['shim-microbatch'].h2d_bytes_per_step -= 1000  # a count of another leg changed
    outcomes = {j.metric: j.outcome for j in judged(faster, base)}
    assert outcomes['shim-batch/native-batch'] == 'improved', outcomes


#: Copies of sets in the shared measurements (unchanged code's ``tox -m report`` on machines the developers do not
#: have): 2026-12-03b counted work by method 1 (before issue 46), 2026-12-05 by method 2 without saying so. The
#: 2026-12-03 set is ``third-machine``; the 2026-12-02 set (schema 4) is ``schema4``'s.
MEASUREMENTS = ROOT / 'tests' / 'data' / 'measurements'
ELSEWHERE = [THIRD_MACHINE / 'quiet', THIRD_MACHINE / 'loaded', ROOT / 'tests' / 'data' / 'schema4']
ELSEWHERE += sorted(MEASUREMENTS.glob('*/*'))


def _judge_again(folder: Path, tmp_path: Path, capsys: Any) -> tuple[int, str]:
    args = ['report', '--results', str(folder), '--baselines', str(BASELINES), '--out', str(tmp_path / 'out')]
    code = _cli.main([*args, '--no-png'])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize('folder', ELSEWHERE, ids=lambda path: path.relative_to(ROOT / 'tests' / 'data').as_posix())
def test_every_set_measured_elsewhere_is_no_regression_or_refused(folder: Path, tmp_path: Path, capsys: Any) -> None:
    """Issue 52: unchanged code measured on another machine before issue 46 changed how work is counted exited 1 against
    the re-recorded baselines (14 work regressions: ops 19.5 -> 20, 55.75 -> 56). Every set judged by ``compatshim
    report`` against the committed baselines now exits 0, or is refused as not comparable (exit 2), never 1."""
    code, out = _judge_again(folder, tmp_path, capsys)
    assert code in (0, 2), out
    if MEASUREMENTS in folder.parents:  # they counted work, and did not say how: refused in one line, nothing judged
        assert code == 2 and len(out.strip().splitlines()) == 1, out
        assert 'work counted by method 3 in the baseline, 1 now' in out and '--record --replace' in out, out


@pytest.mark.parametrize('run', ['quiet', 'loaded'])
def test_counts_are_compared_only_with_counts_made_the_same_way(run: str, tmp_path: Path, capsys: Any) -> None:
    """What the refusal holds off: the sets' counts judged as if made the same way as the baselines' exit 1 where they
    were not (2026-12-03b, each leg's check steps from another state) and 0 where they were (2026-12-05, the code of
    the baselines); the committed baselines and report say the method they were counted by."""
    from compatshim.bench.work import COUNTING

    for name, code in (('other-machine-2026-12-03b', 1), ('other-machine-2026-12-05', 0)):
        said = []
        for result in gather([MEASUREMENTS / name / run]):
            result.fingerprint['work_counting'] = COUNTING
            said.append(result)
        (tmp_path / name).mkdir()
        assert _report(tmp_path / name, *said)[0] == code, capsys.readouterr().out
    assert {recorded(env).work_counting for env in RECORDED} == {COUNTING}
    assert {r.work_counting for r in gather([REPORT / 'report.json'])} == {COUNTING}


def test_a_baseline_counted_another_way_is_refused_by_every_gate(tmp_path: Path, capsys: Any) -> None:
    """The reference gate (``compatshim report``, ``bench --baselines``) and the rule refuse a baseline whose work was
    counted by another method: exit 2 in one line, every metric against it not comparable, never a regression. A
    result that counted no work is judged as before."""
    result = recorded('composer0.28.0-cpu')
    older = copy.deepcopy(result)
    del older.fingerprint['work_counting']  # written before results said it: method 1
    baselines = tmp_path / 'baselines'
    record_baseline(older, baselines)
    heavier = copy.deepcopy(result)
    work = heavier.legs['shim-batch'].work
    assert work is not None
    heavier.legs['shim-batch'].work = dataclasses.replace(work, ops=work.ops * 2)
    judgements = judged(heavier, older)
    assert rule.worst(judgements) == 'not comparable' and 'regression' not in {j.outcome for j in judgements}
    code, lines = gate.against_baselines(heavier, baselines)
    assert code == 2 and len(lines) == 1 and 'work counted by method 1 in the baseline, 3 now' in lines[0], lines
    assert _report(tmp_path, heavier, baselines=baselines)[0] == 2
    err = capsys.readouterr().err
    assert (
        err.startswith('compatshim report: not comparable with its baseline: composer0.28.0-cpu: work')
        and len(err.strip().splitlines()) == 1
    ), err
    uncounted = copy.deepcopy(older)
    for leg in (*uncounted.legs.values(), *uncounted.recipe.values()):
        leg.work = None
    assert uncounted.work_counting is None and gate.refused([uncounted], baselines) == []
