"""The comparison rule and the report, on recorded samples: the committed baselines and report are real bench runs;
the planted cases change those samples the way a slower shim, a slower hook path or a slower machine would. No torch,
no Composer, nothing timed.
"""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from compatshim import _cli
from compatshim.bench import judge
from compatshim.bench.results import BenchResult, gather, load_baseline, record_baseline

ROOT = Path(__file__).resolve().parents[2]
BASELINES = ROOT / 'matrix' / 'baselines'
REPORT = ROOT / 'matrix' / 'reports' / 'cpu'
#: A release of each affected family with its own shape of legs (0.26.1: no native microbatch), and the reference.
RECORDED = ['composer0.28.0-cpu', 'composer0.26.1-cpu', 'composer0.24.1-cpu']


def recorded(env: str) -> BenchResult:
    return BenchResult.from_json(json.loads((BASELINES / 'cpu' / f'{env}.json').read_text()))


def _report(tmp_path: Path, *results: BenchResult, baselines: Path = BASELINES) -> tuple[int, Path]:
    """``compatshim report`` on ``results`` (written as files, as bench envs write them): exit code, report dir."""
    folder = tmp_path / 'results'
    folder.mkdir(exist_ok=True)
    for result in results:
        (folder / f'{result.env}.json').write_text(json.dumps(result.to_json()))
    out = tmp_path / 'report'
    code = _cli.main(['report', '--results', str(folder), '--baselines', str(baselines), '--out', str(out), '--no-png'])
    return code, out


def _scaled(result: BenchResult, shim: float = 1.0, machine: float = 1.0, hook_us: float = 0.0) -> BenchResult:
    """``result`` as if the shim legs were ``shim`` times as fast, the whole machine ``machine`` times as fast, and
    the hook path ``hook_us`` µs slower per batch."""
    out = copy.deepcopy(result)
    for name, leg in out.legs.items():
        factor = machine * (shim if name.startswith('shim') else 1.0)
        leg.samples_per_s = [v * factor for v in leg.samples_per_s]
    # Every ratio is a shim leg over a leg without the shim, both from the same rounds: the machine cancels out.
    out.ratios = {metric: [v * shim for v in samples] for metric, samples in out.ratios.items()}
    out.hook_overhead_us = {stage: [v + hook_us for v in samples] for stage, samples in out.hook_overhead_us.items()}
    return out


@pytest.mark.parametrize('env', RECORDED)
def test_unchanged_code_measured_again_passes(env: str, tmp_path: Path) -> None:
    """Two sessions of unchanged code: the committed report's run of an env (measured after its baseline, in another
    session) judged against that baseline: every gated metric ok, exit 0."""
    again = next(r for r in gather([REPORT / 'report.json']) if r.env == env)
    assert again.measured_at != recorded(env).measured_at, 'two different runs'
    judgements = judge.judge(again, recorded(env))
    assert [j for j in judgements if j.outcome == 'regression'] == []
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


@pytest.mark.parametrize('env', RECORDED[:2])
def test_a_twenty_percent_slower_shim_leg_is_a_regression(env: str, tmp_path: Path, capsys: Any) -> None:
    result = recorded(env)
    slower = _scaled(result, shim=0.8)
    code, _ = _report(tmp_path, slower)
    assert code == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f'REGRESSION {env} ') and 'baseline' in last and 'now' in last and 'threshold -5%' in last
    outcomes = {j.metric: j.outcome for j in judge.judge(slower, result)}
    assert outcomes['shim-batch/unpatched'] == 'regression'
    if 'shim-microbatch/native-microbatch' in result.ratios:
        assert outcomes['shim-microbatch/native-microbatch'] == 'regression'


@pytest.mark.parametrize('env', RECORDED[:2])
def test_fifty_microseconds_more_per_batch_in_the_hook_path_is_a_regression(
    env: str, tmp_path: Path, capsys: Any
) -> None:
    result = recorded(env)
    slower = _scaled(result, hook_us=50.0)
    assert _report(tmp_path, slower)[0] == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert f'{env} hook overhead µs/batch' in last and 'threshold +20 µs' in last
    outcomes = {j.metric: j.outcome for j in judge.judge(slower, result)}
    assert outcomes['hook overhead µs/batch (batch)'] == outcomes['hook overhead µs/batch (microbatch)'] == 'regression'


@pytest.mark.parametrize('machine', [0.85, 1.15], ids=['slower-machine', 'faster-machine'])
@pytest.mark.parametrize('env', RECORDED)
def test_uniform_drift_of_every_leg_passes(env: str, machine: float, tmp_path: Path) -> None:
    """Every leg 15% slower (or faster): absolute throughput is reported, never judged; the ratios hold: exit 0."""
    result = recorded(env)
    drifted = _scaled(result, machine=machine)
    assert _report(tmp_path, drifted)[0] == 0
    from compatshim.bench.report import Judged

    change = Judged(drifted, result, None, []).machine_change()
    assert change == pytest.approx(machine - 1)


def test_more_bytes_per_step_is_a_regression() -> None:
    result = recorded('composer0.28.0-cpu')
    grown = copy.deepcopy(result)
    grown.recipe.legs['shim-batch'].h2d_bytes_per_step *= 4  # the transform ran on the host again: float32 crosses
    outcomes = {j.metric: j for j in judge.judge(grown, result)}
    assert outcomes['bytes per step (shim-batch)'].outcome == 'regression'
    assert outcomes['bytes per step (shim-microbatch)'].outcome == 'ok'


@pytest.mark.parametrize(
    ('leg', 'field', 'value'),
    [
        ('shim-batch', 'placement', 'host'),
        ('shim-batch', 'coherence', 'per microbatch (2 calls/step)'),
        ('shim-microbatch', 'placement', 'never called'),
    ],
)
def test_wrong_placement_or_coherence_is_a_regression_whatever_the_timings(leg: str, field: str, value: str) -> None:
    result = recorded('composer0.28.0-cpu')
    broken = copy.deepcopy(result)
    setattr(broken.legs[leg], field, value)
    found = [j for j in judge.judge(broken, None) if j.outcome == 'regression']
    assert [j.metric for j in found] == [f'placement ({leg})'], found


def test_on_an_unaffected_release_what_is_gated_is_that_nothing_is_patched() -> None:
    result = recorded('composer0.24.1-cpu')
    slower = _scaled(result, shim=0.5)  # the shim legs run Composer's own code there: an A/A comparison, not gated
    assert judge.worst(judge.judge(slower, result)) == 'ok'
    patched = copy.deepcopy(result)
    patched.patched_by_enable = ['composer.core.data_spec.DataSpec.__init__']
    assert [j.metric for j in judge.judge(patched, result) if j.outcome == 'regression'] == [
        'patches on an unaffected release'
    ]


def test_on_a_gpu_shim_batch_over_unpatched_is_the_speed_up_not_a_gate() -> None:
    """On cuda/mps the unpatched leg transforms on the host and shim-batch on the device: not the same work, so that
    ratio is reported (it is what the shim is for there), and stage batch is gated by placement, bytes and µs."""
    result = recorded('composer0.28.0-cpu')
    on_gpu = copy.deepcopy(result)
    on_gpu.device = 'cuda'
    metrics = {j.metric for j in judge.judge(_scaled(on_gpu, shim=0.5), on_gpu)}
    assert 'shim-batch/unpatched' not in metrics and 'shim-microbatch/native-microbatch' in metrics


def test_microseconds_only_compare_on_the_same_machine() -> None:
    result = recorded('composer0.28.0-cpu')
    elsewhere = _scaled(result, hook_us=50.0)
    elsewhere.fingerprint = {**elsewhere.fingerprint, 'cpu_model': 'another CPU'}
    found = {j.metric: j for j in judge.judge(elsewhere, result)}
    assert found['hook overhead µs/batch (batch)'].outcome == 'inconclusive'
    assert 'cpu_model' in found['hook overhead µs/batch (batch)'].reason
    assert found['shim-batch/unpatched'].outcome == 'ok'  # ratios compare on any machine


@pytest.mark.parametrize(
    ('current', 'baseline', 'outcome'),
    [
        ([1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.01, 1.00], [1.00, 0.99, 1.01, 1.00, 1.00, 1.02, 0.99, 1.01], 'ok'),
        (
            [0.80, 0.81, 0.79, 0.80, 0.82, 0.78, 0.81, 0.80],
            [1.00, 0.99, 1.01, 1.00, 1.00, 1.02, 0.99, 1.01],
            'regression',
        ),
        (
            [1.25, 1.26, 1.24, 1.25, 1.27, 1.23, 1.26, 1.25],
            [1.00, 0.99, 1.01, 1.00, 1.00, 1.02, 0.99, 1.01],
            'improved',
        ),
        (
            [0.97, 0.98, 0.96, 0.97, 0.99, 0.95, 0.98, 0.97],
            [1.00, 0.99, 1.01, 1.00, 1.00, 1.02, 0.99, 1.01],
            'ok',
        ),  # -3%: significant, below the minimum effect
        (
            [0.40, 1.60, 0.70, 1.30, 0.60, 1.20, 0.50, 0.80],
            [1.00, 0.99, 1.01, 1.00, 1.00, 1.02, 0.99, 1.01],
            'inconclusive',
        ),  # -25% median, noise
        ([0.80, 0.81, 0.79], [1.00, 0.99, 1.01], 'inconclusive'),  # 3 a side can never be significant at 0.01
        ([1.00, 1.01, 0.99], None, 'inconclusive'),
    ],
)
def test_rule_on_ratios(current: list[float], baseline: Any, outcome: str) -> None:
    assert judge.compare_samples('ratio', current, baseline).outcome == outcome


@pytest.mark.parametrize(
    ('current', 'baseline', 'outcome'),
    [
        ([8.0, 9.0, 7.5, 8.5, 8.2, 8.1], [8.1, 8.3, 7.9, 8.8, 8.0, 8.4], 'ok'),
        ([58.0, 59.0, 57.5, 58.5, 58.2, 58.1], [8.1, 8.3, 7.9, 8.8, 8.0, 8.4], 'regression'),  # +50 µs/batch
        (
            [18.0, 19.0, 17.5, 18.5, 18.2, 18.1],
            [8.1, 8.3, 7.9, 8.8, 8.0, 8.4],
            'ok',
        ),  # +10 µs: below the minimum effect
        ([58.0, 2.0, 90.0, 5.0, 60.0, 3.0], [8.1, 8.3, 7.9, 8.8, 8.0, 8.4], 'inconclusive'),  # +23 µs, but noise
        ([1.0, 1.1, 0.9, 1.2, 1.0, 1.1], [80.0, 81.0, 79.0, 80.5, 80.2, 79.9], 'improved'),
    ],
)
def test_rule_on_microseconds(current: list[float], baseline: list[float], outcome: str) -> None:
    assert judge.compare_samples('hook', current, baseline, microseconds=True).outcome == outcome


def test_mann_whitney() -> None:
    low, high = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0]
    assert judge.mann_whitney_p(low, high) < 1e-3 < 0.999 < judge.mann_whitney_p(high, low)
    assert 0.4 < judge.mann_whitney_p(low, low) < 0.6
    assert judge.mann_whitney_p([1.0, 1.0], [1.0, 1.0]) == 1.0  # all tied: no evidence either way
    # The exact one-sided p for 5 vs 5 fully separated is 1/252 = 0.004; the approximation is close, and not smaller.
    assert 0.004 <= judge.mann_whitney_p(low[:5], high[:5]) < judge.ALPHA


def test_the_rule_is_small_enough_to_state() -> None:
    """≤ 8 named constants, the rule in ≤ 12 lines of the module's docstring, the module ≤ 250 lines, and the docs
    render the rule from there."""
    source = (ROOT / 'compatshim' / 'bench' / 'judge.py').read_text()
    tree = ast.parse(source)
    targets = [
        n.target if isinstance(n, ast.AnnAssign) else n.targets[0]
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
    ]
    constants = [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()]
    assert len(constants) <= 8, constants
    rule = [line for line in (judge.__doc__ or '').splitlines() if line.startswith('    ')]
    assert 0 < len(rule) <= 12 and len(source.splitlines()) <= 250
    assert '<!-- generated: rule -->' in (ROOT / 'docs' / 'harness.md').read_text()


def test_record_never_overwrites(tmp_path: Path) -> None:
    result = recorded('composer0.28.0-cpu')
    path = record_baseline(result, tmp_path)
    assert path == tmp_path / 'cpu' / 'composer0.28.0-cpu.json' and load_baseline(tmp_path, result) == result
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
    args = [
        'report',
        '--results',
        str(folder),
        '--baselines',
        str(baselines),
        '--out',
        str(tmp_path / 'out'),
        '--no-png',
    ]
    assert _cli.main([*args, '--record']) == 0  # no baseline: inconclusive, then recorded
    first = (baselines / 'cpu' / 'composer0.26.1-cpu.json').read_text()
    (folder / 'r.json').write_text(json.dumps(_scaled(result, shim=0.5).to_json()))
    assert _cli.main([*args, '--record']) == 1  # judged against the recorded one; not overwritten
    assert (baselines / 'cpu' / 'composer0.26.1-cpu.json').read_text() == first


def test_a_release_without_a_baseline_fails_the_main_job_naming_the_record_command(tmp_path: Path, capsys: Any) -> None:
    """A renamed env (or a forgotten --record) on a device that has baselines: exit 1, the last line says how to record
    it; with --record it is recorded instead."""
    renamed = copy.deepcopy(recorded('composer0.28.0-cpu'))
    renamed.env = 'composer0.28.0-renamed-cpu'
    code, _ = _report(tmp_path, renamed)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1
    assert last.startswith('MISSING BASELINE composer0.28.0-renamed-cpu: ')
    assert last.endswith('record it: tox -e bench-composer0.28.0-renamed-cpu,report -- --record')


def test_a_baseline_of_another_workload_version_is_not_comparable(tmp_path: Path) -> None:
    """Said so, metric by metric, and not judged: a result 5x slower than such a baseline is no regression."""
    result = recorded('composer0.28.0-cpu')
    other = copy.deepcopy(result)
    other.fingerprint['workload_version'] = 2
    judgements = judge.judge(_scaled(result, shim=0.2), other)
    metrics = [j for j in judgements if not j.metric.startswith('placement')]
    assert metrics and {j.outcome for j in metrics} == {'not comparable'}
    assert all('workload version 2 in the baseline, 1 now' in j.reason for j in metrics)
    assert judge.worst(judgements) == 'not comparable'


def test_no_metric_is_named_outside_the_registry() -> None:
    """measure, judge, report and the CLI take every metric from compatshim/bench/metrics.py: no metric id, and no
    position in a list of them, appears in their source."""
    from compatshim.bench.metrics import METRICS

    for name in ('bench/measure.py', 'bench/judge.py', 'bench/report.py', '_cli.py'):
        source = (ROOT / 'compatshim' / name).read_text()
        named = [m.id for m in METRICS if m.id in source]
        assert named == [], f'{name} names {named}'
        for positional in ('RATIOS[', 'GATED_RATIOS', 'METRICS['):
            assert positional not in source, f'{name} indexes {positional}'


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
