"""The comparison rule and the report, on recorded samples: the committed baselines of an affected release and of
0.24.1 (real bench runs), and deterministic samples built around their medians. No torch, no Composer, no timing."""

from __future__ import annotations

import copy
import json
import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from compatshim import _cli
from compatshim.bench import compare, report

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ['composer0.28.0-cpu', 'composer0.24.1-cpu']


@pytest.fixture(scope='module', params=RECORDED)
def result(request: Any) -> dict[str, Any]:
    """A recorded bench run: the committed baseline of an affected release, and of 0.24.1."""
    return json.loads((ROOT / 'matrix' / 'baselines' / 'cpu' / f'{request.param}.json').read_text())


@pytest.fixture(scope='module')
def affected_result() -> dict[str, Any]:
    """The recorded run of an affected release (the shim installs hooks there)."""
    return json.loads((ROOT / 'matrix' / 'baselines' / 'cpu' / f'{RECORDED[0]}.json').read_text())


@pytest.fixture
def affected(result: dict[str, Any]) -> bool:
    return bool(result['family'] != 'unaffected')


@pytest.fixture
def shim_slower(affected: bool) -> str:
    """A slower shim leg is a regression where the shim patches something; on 0.24.1 (nothing patched: an A/A
    comparison) the same shift is noise, reported as inconclusive."""
    return 'regression' if affected else 'inconclusive'


def _tight(samples: list[float], scale: float = 1.0, seed: int = 0) -> list[float]:
    """Deterministic samples around the median of ``samples`` × ``scale``, ±1% (a quiet machine)."""
    centre = sorted(samples)[len(samples) // 2] * scale
    rng = random.Random(seed)
    return [centre * (1 + rng.uniform(-0.01, 0.01)) for _ in range(9)]


def _quiet(result: dict[str, Any], seed: int, shim_scale: float = 1.0, machine_scale: float = 1.0) -> dict[str, Any]:
    """``result`` with every sample replaced by tight ones; the shim legs (and their ratios) scaled by ``shim_scale``,
    every leg's absolute throughput by ``machine_scale`` (a slower or faster machine leaves the ratios alone)."""
    out = copy.deepcopy(result)
    for leg, data in out['legs'].items():
        if data['available']:
            scale = machine_scale * (shim_scale if leg.startswith('shim') else 1.0)
            data['samples_per_s_windows'] = _tight(data['samples_per_s_windows'], scale, seed)
    for metric in compare.RATIO_METRICS:
        if out['headline'][metric]['windows']:
            out['headline'][metric]['windows'] = _tight(
                out['headline'][metric]['windows'], shim_scale if metric.startswith('shim') else 1.0, seed
            )
    hook = out['hook_overhead_us']
    if hook['available']:
        for stage in ('batch', 'microbatch'):
            hook[stage]['samples'] = _tight_us(hook[stage]['samples'], seed=seed)
    return out


def _tight_us(samples: list[float], plus: float = 0.0, seed: int = 0) -> list[float]:
    """Deterministic µs samples around the median of ``samples`` + ``plus``, ±1 µs (a quiet machine)."""
    centre = sorted(samples)[len(samples) // 2] + plus
    rng = random.Random(seed)
    return [centre + rng.uniform(-1.0, 1.0) for _ in range(25)]


def test_planted_fifty_microseconds_in_the_hook_path_is_a_regression(affected_result: dict[str, Any]) -> None:
    """A baseline of 8 µs/batch (what a quiet 2-core machine records), then 50 µs/batch more: a regression; unchanged:
    ok. (Synthetic samples: this tiny run's own figure, taken while other tests load the machine, can be far higher.)"""
    result = affected_result
    baseline, slowed = _quiet(result, seed=2), _quiet(result, seed=1)
    for stage in ('batch', 'microbatch'):
        baseline['hook_overhead_us'][stage]['samples'] = _tight_us([8.0], 0, 2)
        slowed['hook_overhead_us'][stage]['samples'] = _tight_us([8.0], 50, 1)
    verdict = compare.compare(slowed, baseline)
    assert verdict['worst'] == 'regression'
    assert verdict['verdicts']['overhead/batch']['verdict'] == 'regression'
    assert verdict['verdicts']['overhead/microbatch']['verdict'] == 'regression'
    assert (
        compare.compare(_quiet(result, seed=1), _quiet(result, seed=2))['verdicts']['overhead/batch']['verdict'] == 'ok'
    )


@pytest.mark.parametrize(
    ('current', 'baseline', 'expected'),
    [
        ([8.0, 9.0, 7.5, 8.5, 8.2], [8.1, 8.3, 7.9, 8.8, 8.0], 'ok'),
        ([58.0, 59.0, 57.5, 58.5, 58.2], [8.1, 8.3, 7.9, 8.8, 8.0], 'regression'),  # +50 µs/batch
        ([18.0, 19.0, 17.5, 18.5, 18.2], [8.1, 8.3, 7.9, 8.8, 8.0], 'ok'),  # +10 µs: below the 20 µs floor
        ([9.2, 10.4, 9.0, 9.9, 9.6], [8.1, 8.3, 7.9, 8.8, 8.0], 'ok'),  # a 15% slower machine
        ([58.0, 2.0, 90.0, 5.0, 40.0], [8.1, 8.3, 7.9, 8.8, 8.0], 'inconclusive'),  # too noisy to resolve 20 µs
        ([320.0, 330.0, 325.0], [200.0, 205.0, 210.0], 'regression'),  # +120 µs over a large baseline
        ([1.0, 1.1, 0.9], [80.0, 81.0, 79.0], 'improved'),
        ([8.0, 9.0, 7.5], None, 'inconclusive'),
    ],
)
def test_overhead_rule(current: list[float], baseline: Any, expected: str) -> None:
    assert compare.judge_overhead(current, baseline).verdict == expected


def test_more_bytes_moved_is_a_regression(result: dict[str, Any]) -> None:
    grown = _quiet(result, seed=1)
    grown['recipe']['legs']['shim-batch']['h2d_bytes_per_step'] *= 4  # the transform ran on the host again
    verdict = compare.compare(grown, _quiet(result, seed=2))
    assert verdict['verdicts']['bytes/shim-batch']['verdict'] == 'regression'
    assert (
        compare.compare(_quiet(result, seed=1), _quiet(result, seed=2))['verdicts']['bytes/shim-batch']['verdict']
        == 'ok'
    )


def test_unchanged_rerun_is_ok(result: dict[str, Any]) -> None:
    verdict = compare.compare(_quiet(result, seed=1), _quiet(result, seed=2))
    assert verdict['worst'] == 'ok', verdict


def test_planted_slowdown_is_a_regression(result: dict[str, Any], shim_slower: str) -> None:
    verdict = compare.compare(_quiet(result, seed=1, shim_scale=0.8), _quiet(result, seed=2))
    assert verdict['worst'] == shim_slower
    assert verdict['verdicts']['shim_vs_unpatched']['verdict'] == shim_slower
    assert verdict['verdicts']['throughput/shim-batch']['verdict'] == shim_slower
    assert verdict['verdicts']['throughput/unpatched']['verdict'] == 'ok'


@pytest.mark.parametrize('machine', [0.85, 1.15], ids=['slower-machine', 'faster-machine'])
def test_uniform_machine_drift_passes(result: dict[str, Any], machine: float) -> None:
    """Every leg 15% slower (or faster), ratios unchanged: machine drift, reported with its evidence, exit 0."""
    verdict = compare.compare(_quiet(result, seed=1, machine_scale=machine), _quiet(result, seed=2))
    assert verdict['worst'] == 'drift', verdict
    assert verdict['drift'] is not None and abs(verdict['drift']['change'] - (machine - 1)) < 0.03
    assert set(verdict['drift']['legs']) <= set(compare.NO_SHIM_LEGS)
    judged = verdict['verdicts']['throughput/shim-batch']
    assert judged['verdict'] == 'drift' and 'machine drift' in judged['reason']
    assert verdict['verdicts']['shim_vs_unpatched']['verdict'] == 'ok'


@pytest.mark.parametrize('machine', [1.0, 0.85], ids=['same-machine', 'slower-machine'])
def test_shim_only_five_percent_slowdown_fails(result: dict[str, Any], shim_slower: str, machine: float) -> None:
    """The shim legs 5% slower than the legs that run no shim code: a regression, with or without machine drift."""
    verdict = compare.compare(_quiet(result, seed=1, shim_scale=0.95, machine_scale=machine), _quiet(result, seed=2))
    assert verdict['worst'] == shim_slower, verdict
    assert verdict['verdicts']['shim_vs_unpatched']['verdict'] == shim_slower
    for leg in compare.NO_SHIM_LEGS:
        if f'throughput/{leg}' in verdict['verdicts']:
            assert verdict['verdicts'][f'throughput/{leg}']['verdict'] != 'regression', leg


def test_a_no_shim_leg_alone_is_never_a_regression(result: dict[str, Any]) -> None:
    current = _quiet(result, seed=1)
    current['legs']['no-transform']['samples_per_s_windows'] = [
        v * 0.7 for v in current['legs']['no-transform']['samples_per_s_windows']
    ]
    judged = compare.compare(current, _quiet(result, seed=2))['verdicts']['throughput/no-transform']
    assert judged['verdict'] == 'inconclusive' and 'runs no shim code' in judged['reason']


def test_raised_baseline_is_a_regression_and_ratios_gate_on_any_machine(
    result: dict[str, Any], shim_slower: str
) -> None:
    raised = _quiet(result, seed=2, shim_scale=1.25)
    assert compare.compare(_quiet(result, seed=1), raised)['worst'] == shim_slower
    raised['fingerprint'] = {**raised['fingerprint'], 'cpu_model': 'another machine'}
    verdict = compare.compare(_quiet(result, seed=1), raised)
    assert verdict['verdicts']['throughput/shim-batch']['verdict'] == 'inconclusive'
    assert 'cpu_model' in verdict['verdicts']['throughput/shim-batch']['reason']
    assert verdict['verdicts']['shim_vs_unpatched']['verdict'] == shim_slower


def test_unaffected_release_gates_what_enable_patched_not_a_b_noise(result: dict[str, Any], affected: bool) -> None:
    """On 0.24.1 the shim legs run Composer's own code: a slower shim leg is noise (the reason says why); enable()
    patching anything there is the regression the shim could cause."""
    assert result['patched_by_enable'] == ([] if not affected else result['patched_by_enable'])
    if affected:
        assert result['patched_by_enable'] and 'patches/unaffected' not in compare.compare(result, None)['verdicts']
        return
    slower = compare.compare(_quiet(result, seed=1, shim_scale=0.8), _quiet(result, seed=2))['verdicts']
    assert 'patches nothing' in slower['shim_vs_unpatched']['reason']
    assert slower['patches/unaffected']['verdict'] == 'ok'
    wrong = {**_quiet(result, seed=1), 'patched_by_enable': ['composer.core.data_spec.DataSpec.__init__']}
    assert compare.compare(wrong, _quiet(result, seed=2))['verdicts']['patches/unaffected']['verdict'] == 'regression'


def test_wrong_placement_is_a_regression(result: dict[str, Any]) -> None:
    broken = copy.deepcopy(result)
    broken['legs']['shim-batch']['placement'] = 'host'
    verdict = compare.compare(broken, None)
    assert verdict['verdicts']['placement/shim-batch']['verdict'] == 'regression'


@pytest.mark.parametrize(
    ('current', 'baseline', 'expected'),
    [
        ([1.00, 1.01, 0.99, 1.00, 1.02], [1.00, 0.99, 1.01, 1.00, 1.00], 'ok'),
        ([0.80, 0.81, 0.79, 0.80, 0.82], [1.00, 0.99, 1.01, 1.00, 1.00], 'regression'),
        ([1.25, 1.26, 1.24, 1.25, 1.27], [1.00, 0.99, 1.01, 1.00, 1.00], 'improved'),
        ([0.40, 1.60, 0.95, 1.30, 0.60], [1.00, 0.99, 1.01, 1.00, 1.00], 'inconclusive'),  # too noisy: spread 74%
        ([0.80, 1.20, 0.95, 1.05, 0.90], [1.00, 0.99, 1.01, 1.00, 1.00], 'ok'),  # -5% within half the 16% spread
        ([0.80, 0.81, 0.79], [1.00, 0.99, 1.01], 'inconclusive'),  # -20%, but 3 windows a side cannot show it
        ([1.00, 1.01, 0.99], None, 'inconclusive'),  # no baseline
        ([1.00, 1.01], [1.00, 1.01], 'inconclusive'),  # too few windows
    ],
)
def test_rule(current: list[float], baseline: Any, expected: str) -> None:
    assert compare.judge(current, baseline, compare.RATIO_FLOOR).verdict == expected


def _noisy(centre: float, spread: float, n: int = 40) -> list[float]:
    """``n`` samples around ``centre`` with a relative IQR of ``spread`` (what this 2-core machine gives per round:
    12-37%): the normal distribution's quantiles, interleaved, so that two sides differ only by what a test puts in."""
    normal = statistics.NormalDist(centre, centre * spread / 1.349)
    ordered = [normal.inv_cdf((i + 0.5) / n) for i in range(n)]
    return ordered[::2] + ordered[1::2]


@pytest.mark.parametrize(
    ('shift', 'expected'),
    [(0.0, 'ok'), (-0.05, 'ok'), (-0.20, 'regression'), (+0.20, 'improved')],
)
def test_rule_resolves_the_median_of_noisy_rounds(shift: float, expected: str) -> None:
    """A 25% spread per round is not a 25% uncertainty of the median of 40 rounds: a 20% shift is resolved (the old
    rule called every run of this machine 'too noisy'); a 5% one is within what two sessions of the same code differ
    by."""
    baseline = _noisy(1.0, 0.25)
    current = [v * (1 + shift) for v in _noisy(1.0, 0.25)]
    judged = compare.judge(current, baseline, compare.RATIO_FLOOR)
    assert judged.verdict == expected, judged
    if expected != 'ok':
        assert 'rank test p=' in judged.reason


def test_rank_test() -> None:
    low, high = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0]
    assert compare.rank_test(low, high) < 1e-3 < 0.999 < compare.rank_test(high, low)
    assert 0.4 < compare.rank_test(low, low) < 0.6
    assert compare.rank_test([1.0, 1.0], [1.0, 1.0]) == 1.0  # all tied: no evidence either way
    # The exact one-sided p for 5 vs 5 fully separated is 1/252 = 0.004; the approximation is close and not smaller.
    assert 0.004 <= compare.rank_test(low[:5], high[:5]) < compare.ALPHA


def test_shim_vs_no_transform_is_reported_not_gated(result: dict[str, Any]) -> None:
    """The transform's cost relative to the model moves with the machine (+18…+38% between sessions of unchanged
    code): it stays in the headline, with no verdict."""
    current = _quiet(result, seed=1)
    current['headline']['shim_vs_no_transform']['windows'] = [
        v * 0.6 for v in current['headline']['shim_vs_no_transform']['windows']
    ]
    verdict = compare.compare(current, _quiet(result, seed=2))
    assert 'shim_vs_no_transform' not in verdict['verdicts'] and verdict['worst'] == 'ok', verdict


@pytest.mark.parametrize(('scale', 'moved'), [(0.85, 'fall'), (1.20, 'rise')], ids=['slower', 'faster'])
def test_shim_leg_moving_alone_in_absolute_terms_is_not_the_shim(
    affected_result: dict[str, Any], scale: float, moved: str
) -> None:
    """A shim leg's absolute throughput moved while its ratio to the unpatched leg of the same rounds held (measured
    on unchanged code: -6.6% and +18.1%, p < 0.001): inconclusive with the ratio as the reason, neither a regression
    nor a request to re-record the baseline."""
    result = affected_result
    current = _quiet(result, seed=1)
    current['legs']['shim-batch']['samples_per_s_windows'] = [
        v * scale for v in current['legs']['shim-batch']['samples_per_s_windows']
    ]
    judged = compare.compare(current, _quiet(result, seed=2))
    assert judged['verdicts']['throughput/shim-batch']['verdict'] == 'inconclusive', judged
    assert (
        f'its ratio to the unpatched leg of the same run did not {moved}'
        in (judged['verdicts']['throughput/shim-batch']['reason'])
    )
    assert judged['worst'] == 'inconclusive'


def test_record_never_overwrites(result: dict[str, Any], tmp_path: Path) -> None:
    path = compare.record_baseline(result, tmp_path)
    assert path == tmp_path / 'cpu' / f'{result["env"]}.json'
    before = path.read_text()
    with pytest.raises(compare.BaselineExistsError, match='--replace'):
        compare.record_baseline(result, tmp_path)
    assert path.read_text() == before
    with pytest.raises(ValueError, match='planted'):
        compare.record_baseline({**result, 'planted_slowdown': 0.2}, tmp_path, replace=True)
    assert compare.record_baseline(result, tmp_path, replace=True) == path


def test_report_markdown_json_png(result: dict[str, Any], tmp_path: Path) -> None:
    judged = {**result, 'comparison': {**compare.compare(result, None), 'baseline': None}}
    assert _cli.main(['report', '--out', str(tmp_path), *_write(tmp_path, judged)]) == 0
    md = (tmp_path / 'report.md').read_text()
    assert result['env'] in md and '| shim-batch | device | coherent |' in md
    data = json.loads((tmp_path / 'report.json').read_text())
    assert data['envs'] == [result['env']] and data['worst'] == 'inconclusive'
    for chart in report.CHARTS:
        assert (tmp_path / chart).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n', chart
    assert '## Recipe workload: what crosses to the device' in md
    assert result['recipe']['plain_device_transforms']['words'] in md
    assert f'**{result["recipe"]["bytes_shim_vs_unpatched"]:.2f}**' in md
    regressed = copy.deepcopy(judged)
    broken = _quiet(result, 1)
    broken['legs']['shim-batch']['placement'] = 'host'
    regressed['comparison'] = {**compare.compare(broken, _quiet(result, 2)), 'baseline': 'b.json'}
    assert _cli.main(['report', '--no-png', '--out', str(tmp_path / 'r2'), *_write(tmp_path, regressed)]) == 1
    assert '**Worst: regression.**' in (tmp_path / 'r2' / 'report.md').read_text()
    assert report.aggregate([])['envs'] == []


def _write(tmp_path: Path, result: dict[str, Any]) -> list[str]:
    path = tmp_path / f'{result["env"]}-{len(list(tmp_path.glob("*.json")))}.json'
    path.write_text(json.dumps(result))
    return [str(path)]


def test_report_rejudges_recorded_runs_under_todays_rule(
    result: dict[str, Any], affected: bool, shim_slower: str, tmp_path: Path
) -> None:
    """`compatshim report --rejudge BASELINES` judges the results of a report.json (or bench results) again against
    the baselines: a rule change is checked against every recorded run without measuring anything."""
    compare.record_baseline(_quiet(result, seed=2), tmp_path / 'baselines')
    slower = {**_quiet(result, seed=1, shim_scale=0.8), 'comparison': {'worst': 'ok', 'verdicts': {}}}
    recorded = tmp_path / 'old' / 'report.json'
    recorded.parent.mkdir()
    recorded.write_text(json.dumps({'schema': 2, 'results': [slower]}))
    out = tmp_path / 'rejudged'
    args = ['report', '--no-png', '--out', str(out), str(recorded)]
    assert _cli.main(args) == 0  # as recorded: no verdicts
    assert _cli.main([*args, '--rejudge', str(tmp_path / 'baselines')]) == (1 if affected else 0)
    rejudged = json.loads((out / 'report.json').read_text())['results'][0]['comparison']
    assert rejudged['verdicts']['shim_vs_unpatched']['verdict'] == shim_slower
    assert rejudged['baseline'].endswith(f'{result["env"]}.json')


def test_report_refuses_what_it_cannot_read(tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / 'bad.json'
    bad.write_text('{"a": 1}')
    assert _cli.main(['report', '--no-png', '--out', str(tmp_path / 'out'), str(bad)]) == 2
    assert 'neither a bench result' in capsys.readouterr().err
    good = tmp_path / 'empty.json'
    good.write_text('{"results": []}')
    assert (
        _cli.main(['report', '--no-png', '--out', str(tmp_path), '--rejudge', str(tmp_path / 'nope'), str(good)]) == 2
    )
    assert 'no such baselines directory' in capsys.readouterr().err
    assert not (tmp_path / 'report.md').exists()  # nothing half-done
