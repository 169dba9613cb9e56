"""The benchmark on this release, end to end: one real tiny run through ``compatshim bench``, what it measured (legs,
placement, coherence, bytes, what plain ``device_transforms`` does here), and ``compatshim report`` on it.

Once per family: it times real Trainers (the rule and the report are tested on recorded samples in ``tests/unit``).
Nothing here asserts on wall time, and no test depends on two timed runs agreeing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import COMPOSER, FAMILY, IS_AFFECTED

from compatshim import _cli
from compatshim.bench import LEGS, measure, overhead
from compatshim.bench.metrics import PROBES, metric
from compatshim.bench.results import BenchResult

pytestmark = [pytest.mark.filterwarnings('ignore::UserWarning'), pytest.mark.runs_in('family')]

#: What plain ``device_transforms`` does without the shim, per family (the bench says it in words).
PLAIN_OUTCOME = {None: 'device', 'host': 'host', 'dropped': 'fails', 'rejected': 'rejected'}


@pytest.fixture(scope='module')
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[BenchResult, Path]:
    """One real tiny bench run on this release (cpu), through the command line, shared by the module; judged against
    an empty baselines directory (a device's first run: inconclusive, never a failure)."""
    root = tmp_path_factory.mktemp('bench')
    out, baselines = root / 'results' / 'result.json', root / 'baselines'
    baselines.mkdir()
    assert _cli.main(['bench', '--size', 'tiny', '--out', str(out), '--baselines', str(baselines)]) == 0
    return BenchResult.from_json(json.loads(out.read_text())), out


def test_legs_placement_and_coherence(measured: tuple[BenchResult, Path]) -> None:
    result, _ = measured
    legs = result.legs
    assert list(legs) == list(LEGS) and result.composer == COMPOSER
    # Without the shim: on the device only up to 0.24.1; the host (as the transform or the workaround) after.
    assert legs['unpatched'].placement == ('host' if IS_AFFECTED else 'device')
    assert legs['shim-batch'].placement == 'device'
    assert legs['shim-batch'].coherence == 'coherent' and legs['shim-batch'].calls_per_step == 1
    assert legs['shim-microbatch'].available is IS_AFFECTED
    native = FAMILY is not None and FAMILY.value in ('dropped', 'rejected')
    assert legs['native-microbatch'].available is native
    if IS_AFFECTED:
        assert legs['shim-microbatch'].placement == 'device' and legs['shim-microbatch'].calls_per_step == 2
    # The whole batch crosses once per step (8 images of 3x16x16 fp32 + labels; Composer moves a few scalars too).
    batch_bytes = 8 * 3 * 16 * 16 * 4 + 8 * 10 * 4
    for name in ('unpatched', 'shim-batch'):
        assert batch_bytes <= legs[name].h2d_bytes_per_step < batch_bytes + 1024, name


def test_rounds_ratios_and_the_probes_of_every_round(measured: tuple[BenchResult, Path]) -> None:
    """Every timed leg has a window time per round (the legs of a gated ratio two windows, A B B A), and every probe
    its samples in every round, so that each gated timing is read against the same rounds."""
    result, _ = measured
    rounds = result.fingerprint['size']['rounds']
    native = result.legs['native-microbatch'].available
    paired = {'unpatched', 'shim-batch'} | ({'shim-microbatch', 'native-microbatch'} if native else set())
    for name, leg in result.legs.items():
        assert len(leg.samples_per_s) == (0 if not leg.available else 2 * rounds if name in paired else rounds), name
        assert len(leg.round_s) == (rounds if leg.available else 0), name
    assert len(metric('shim-batch/unpatched').read(result)) == rounds
    assert bool(metric('shim-microbatch/native-microbatch').read(result)) is native
    assert set(result.overheads) == (set(PROBES) if IS_AFFECTED else {'monitor'})
    for name, found in result.overheads.items():
        assert len(found.path_s) == len(found.direct_s) == measure.PROBE_SAMPLES * rounds, name
        assert found.rounds == [r for r in range(1, rounds + 1) for _ in range(measure.PROBE_SAMPLES)], name
        assert found.calls == overhead.CALLS[name.partition('-')[0]]
    assert len(metric('monitor share of a step').read(result)) == rounds
    assert bool(result.patched_by_enable) is IS_AFFECTED, 'enable() patches exactly where the release is affected'
    assert 'on the device' in result.legs['shim-batch'].monitor


class _Counting:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, batch: Any) -> Any:
        self.calls += 1
        return batch


@pytest.mark.parametrize('name', PROBES)
def test_each_path_of_a_probe_runs_the_transform_once_per_call(name: str) -> None:
    """A probe's two paths do the same work but compatshim's plumbing: the transform once per call in each. (On
    0.25–0.26 at stage microbatch the direct path once moved through the armed trainer device and ran it twice.)"""
    import compatshim
    from compatshim.testing import FakeAcceleratorDevice

    if name.startswith('hook') and not IS_AFFECTED:
        pytest.skip(f'Composer {COMPOSER} is unaffected: the shim installs no hook to probe')
    transform = _Counting()
    compatshim.enable() if name.startswith('hook') else compatshim.disable()
    probe = overhead.make_probe(name, 'cpu', transform, make_device=FakeAcceleratorDevice)
    try:
        compatshim.enable()
        path_s, direct_s = probe.sample()
        assert transform.calls == 2 * probe.calls and path_s > 0 and direct_s > 0
    finally:
        probe.close()


def test_recipe_bytes_and_what_plain_device_transforms_does(measured: tuple[BenchResult, Path]) -> None:
    """uint8 crosses with the shim; float32 (4x the bytes) without it; 0.27+ say in words why there is no plain leg."""
    recipe = measured[0].recipe
    assert recipe.plain['outcome'] == PLAIN_OUTCOME[FAMILY.value if FAMILY else None], recipe.plain
    if FAMILY is not None and FAMILY.value == 'dropped':
        assert 'silently dropped' in recipe.plain['words'] and 'never ran' in recipe.plain['words']
    pixels = 8 * 3 * 16 * 16  # tiny: batch 8 of 3x16x16
    shim, unpatched = recipe.legs['shim-batch'], recipe.legs['unpatched']
    assert shim.placement == 'device' and shim.coherence == 'coherent'
    assert shim.h2d_bytes_by_dtype['uint8'] == pixels and shim.h2d_bytes_by_dtype.get('float32', 0) < 64
    if IS_AFFECTED:
        assert unpatched.placement == 'host' and unpatched.h2d_bytes_by_dtype['float32'] >= 4 * pixels
        assert 0.24 < (recipe.bytes_shim_vs_unpatched or 0) < 0.27
    else:
        assert unpatched.placement == 'device' and recipe.bytes_shim_vs_unpatched == 1.0


def test_report_on_the_real_run(measured: tuple[BenchResult, Path], tmp_path: Path, capsys: Any) -> None:
    """The run, judged without a baseline (nothing to compare: inconclusive, never a regression) and rendered."""
    result, path = measured
    baselines = tmp_path / 'baselines'
    baselines.mkdir()
    args = ['report', '--results', str(path.parent), '--baselines', str(baselines), '--out', str(tmp_path / 'out')]
    assert _cli.main(args) == 0
    md = (tmp_path / 'out' / 'cpu' / 'report.md').read_text()
    assert result.env in md and '| shim-batch | device | coherent |' in md and result.recipe.plain['words'] in md
    for chart in ('ratios.png', 'bytes.png', 'throughput.png'):
        assert (tmp_path / 'out' / 'cpu' / chart).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n', chart
    assert f'{result.env}: ' in capsys.readouterr().out


def test_planted_hook_delay_restores_the_hooks_exactly() -> None:
    from compatshim._transforms import BatchHook, MicrobatchHook

    before = (BatchHook.__dict__['__call__'], MicrobatchHook.__dict__['__call__'])
    with overhead.planted_hook_delay(50):
        assert BatchHook.__dict__['__call__'] is not before[0]
    assert (BatchHook.__dict__['__call__'], MicrobatchHook.__dict__['__call__']) == before


def test_bad_input_is_refused_clearly(capsys: Any) -> None:
    from compatshim.bench import measure

    with pytest.raises(ValueError, match="unknown size 'huge'; choose one of tiny, cpu, gpu"):
        measure.measure('cpu', 'huge')
    with pytest.raises(ValueError, match='plant_slowdown must be between 0 and 10'):
        measure.measure('cpu', 'tiny', plant_slowdown=-1)
    assert _cli.main(['bench', '--plant-hook-us', '-5']) == 2
    assert 'plant_hook_us must be between 0 and 100000' in capsys.readouterr().err
