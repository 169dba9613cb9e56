"""The benchmark on this release, end to end: one real tiny run through ``compatshim bench``, what it measured (legs,
placement, coherence, bytes, what plain ``device_transforms`` does here), and ``compatshim report`` on it.

Once per family: it times real Trainers (the rule and the report are tested on recorded samples in ``tests/unit``).
Nothing here asserts on wall time, and no test depends on two timed runs agreeing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import COMPOSER, FAMILY, IS_AFFECTED

from compatshim import _cli
from compatshim.bench import reference
from compatshim.bench.metrics import PROBES, REFERENCE_LEGS, metric
from compatshim.bench.report import plain_words
from compatshim.bench.results import BenchResult, Cause
from compatshim.devices.accelerator import accelerator

pytestmark = [pytest.mark.filterwarnings('ignore::UserWarning'), pytest.mark.runs_in('family')]

#: What plain ``device_transforms`` does without the shim, per family: where it runs, or why it cannot (the recipe's
#: unpatched leg, said in words).
PLAIN = {None: 'device', 'host': 'host', 'dropped': Cause.FAILED, 'rejected': Cause.REJECTED}
NATIVE = FAMILY is not None and FAMILY.value in ('dropped', 'rejected')


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
    assert list(legs) == list(REFERENCE_LEGS) and result.composer == COMPOSER
    # Without the shim, plain device_transforms: on the device up to 0.24.1, the host on 0.25-0.26, never called on
    # 0.27-0.28, rejected from 0.29; the workaround batch_transforms (0.27+) on the host.
    expected = {None: 'device', 'host': 'host', 'dropped': 'never called'}.get(FAMILY.value if FAMILY else None)
    if expected is None:
        assert legs['unpatched'].missing.cause is Cause.REJECTED and legs['unpatched'].reason.startswith('TypeError')
    else:
        assert legs['unpatched'].placement == expected
    assert legs['native-batch'].available is NATIVE and (not NATIVE or legs['native-batch'].placement == 'host')
    assert legs['shim-batch'].placement == 'device'
    assert legs['shim-batch'].coherence == 'coherent' and legs['shim-batch'].calls_per_step == 1
    assert legs['shim-microbatch'].available is IS_AFFECTED
    assert legs['native-microbatch'].available is NATIVE
    if IS_AFFECTED:
        assert legs['shim-microbatch'].placement == 'device' and legs['shim-microbatch'].calls_per_step == 2
    # The whole batch crosses once per step (8 images of 3x16x16 fp32 + labels; Composer moves a few scalars too).
    batch_bytes = 8 * 3 * 16 * 16 * 4 + 8 * 10 * 4
    for name in ('native-batch' if NATIVE else 'unpatched', 'shim-batch'):
        assert batch_bytes <= legs[name].h2d_bytes_per_step < batch_bytes + 1024, name


def test_rounds_ratios_and_the_probes_of_every_round(measured: tuple[BenchResult, Path]) -> None:
    """Every timed leg has one window per round, each shim leg its partner's window of the same round beside it (the
    host path of the release for stage batch, Composer's own microbatch_transforms for stage microbatch), and every
    probe its samples in every round, so that each gated timing is read against the same rounds."""
    result, _ = measured
    rounds = result.fingerprint['size']['rounds']
    host = 'native-batch' if NATIVE else 'unpatched'
    partners = {'shim-batch': host, **({'shim-microbatch': 'native-microbatch'} if NATIVE else {})}
    for name, leg in result.legs.items():
        timed = leg.available and leg.calls_per_step > 0
        assert len(leg.samples_per_s) == len(leg.round_s) == (rounds if timed else 0), name
        assert list(leg.beside) == [partners[name]] if name in partners else not leg.beside, name
        assert all(len(windows) == rounds for windows in leg.beside.values()), name
    assert len(metric(f'shim-batch/{host}').read(result)) == rounds
    assert bool(metric('shim-microbatch/native-microbatch').read(result)) is NATIVE
    assert set(result.overheads) == {name for name in PROBES if IS_AFFECTED or name.startswith('monitor')}
    for name, found in result.overheads.items():
        per_round = reference.PROBE_SAMPLES if '@' not in name else 1
        assert len(found.path_s) == len(found.direct_s) == per_round * rounds, name
        assert found.rounds == [r for r in range(1, rounds + 1) for _ in range(per_round)], name
        assert found.calls == reference.calls(name) and found.calls >= reference.MIN_CALLS, name
    assert reference.calls('hook-batch') == reference.CALLS['hook'] and reference.calls('monitor@256') == 16
    assert len(metric('monitor share of a step').read(result)) == rounds
    assert len(metric('monitor beyond the move, 256 samples').read(result)) == rounds
    assert bool(result.patched_by_enable) is IS_AFFECTED, 'enable() patches exactly where the release is affected'
    assert 'on the device' in result.legs['shim-batch'].monitor


class _Clocked:
    """A timed leg's Trainer, monitor and device on one fake clock: each window costs its leg ``cost`` seconds."""

    def __init__(self, clock: list[float], cost: float) -> None:
        self.clock, self.cost = clock, cost
        self.state = SimpleNamespace(timestamp=SimpleNamespace(sample=0))
        self.summaries = [SimpleNamespace(transforms={}, wait_ms_per_step=None, wait_share=None)]

    def fit(self, duration: str) -> None:
        self.clock[0] += self.cost
        self.state.timestamp.sample += 32

    def close(self) -> None:
        pass


def test_a_leg_timed_beside_two_partners_reads_each_partners_own_rounds() -> None:
    """A schedule that times shim-batch beside unpatched and beside native-batch: each ratio reads the windows of its
    own partner, under its name, round by round. Each window costs its leg a fixed time on a fake clock, so every ratio
    is exact. (A leg's partner was one field, which the second pair overwrote, and a ratio paired the rounds with the
    partners' windows by position: one ratio read nothing, the other both partners' windows in turn.)"""
    from compatshim.bench import engine
    from compatshim.bench.metrics import LEGS, Pair
    from compatshim.bench.results import LegResult

    clock = [0.0]
    on = SimpleNamespace(clock=lambda: lambda: clock[0], synchronize=lambda: None)
    costs = {'unpatched': 3.0, 'native-batch': 5.0, 'shim-batch': 2.0}
    fakes = {name: _Clocked(clock, cost) for name, cost in costs.items()}
    timings = {name: engine.Timing(LEGS[name], fake, fake) for name, fake in fakes.items()}  # trainer and monitor
    session = engine.Session(on, COMPOSER, engine.Size('tiny', steps=1, rounds=4), lambda line: None, {}, 0.0)  # type: ignore[arg-type]
    pairs = [Pair('shim-batch', 'unpatched'), Pair('shim-batch', 'native-batch')]
    engine.time_rounds(session, timings, engine.Schedule(pairs))
    legs = {name: timing.result(LegResult(name)) for name, timing in timings.items()}
    result = BenchResult('dropped', {'size': {'name': 'tiny', 'steps': 1}}, 'now', legs)
    assert metric('shim-batch/unpatched').read(result) == [1.5] * 4
    assert metric('shim-batch/native-batch').read(result) == [2.5] * 4
    with pytest.raises(ValueError, match='timed beside unpatched, native-batch; a result holds one partner'):
        legs['shim-batch'].to_json()


class _Counting:
    def __init__(self) -> None:
        self.calls, self.on_host = 0, 0

    def __call__(self, batch: Any) -> Any:
        from compatshim.observe.recorder import is_on_device, tensors

        self.calls += 1
        self.on_host += not is_on_device(tensors(batch)[0])
        return batch


@pytest.mark.parametrize('name', PROBES)
def test_each_path_of_a_probe_runs_the_transform_once_per_call(name: str) -> None:
    """A probe's two paths do the same work but compatshim's plumbing: the transform once per call in each, on the
    device (a hook probe's reads are served as the trainer's). (On 0.25–0.26 at stage microbatch the direct path once
    moved through the armed trainer device and ran it twice.)"""
    import compatshim
    from compatshim.testing import FakeAcceleratorDevice

    if name.startswith('hook') and not IS_AFFECTED:
        pytest.skip(f'Composer {COMPOSER} is unaffected: the shim installs no hook to probe')
    transform = _Counting()
    compatshim.enable() if name.startswith('hook') else compatshim.disable()
    probe = reference.make_probe(name, accelerator('cpu'), transform, make_device=FakeAcceleratorDevice)
    try:
        compatshim.enable()
        path_s, direct_s = probe.sample()
        assert transform.calls == 2 * probe.calls and path_s > 0 and direct_s > 0
        assert transform.on_host == 0 or name.startswith('monitor')  # the monitor's DataSpec is Composer's own
    finally:
        probe.close()


def test_recipe_bytes_and_what_plain_device_transforms_does(measured: tuple[BenchResult, Path]) -> None:
    """uint8 crosses with the shim; float32 (4x the bytes) on the host path; plain device_transforms said in words
    where it cannot run (the model fails on the raw uint8 batch on 0.27-0.28; TypeError from 0.29)."""
    recipe = measured[0].recipe
    plain, words = recipe['unpatched'], plain_words(recipe['unpatched'])
    expected = PLAIN[FAMILY.value if FAMILY else None]
    assert (plain.missing.cause if isinstance(expected, Cause) else plain.placement) == expected, words
    if FAMILY is not None and FAMILY.value == 'dropped':
        assert 'silently dropped' in words and 'never ran' in words
    pixels = 8 * 3 * 16 * 16  # tiny: batch 8 of 3x16x16
    shim, host = recipe['shim-batch'], recipe['native-batch' if NATIVE else 'unpatched']
    assert shim.placement == 'device' and shim.coherence == 'coherent'
    assert shim.h2d_bytes_by_dtype['uint8'] == pixels and shim.h2d_bytes_by_dtype.get('float32', 0) < 64
    ratio = shim.h2d_bytes_per_step / host.h2d_bytes_per_step
    if IS_AFFECTED:
        assert host.placement == 'host' and host.h2d_bytes_by_dtype['float32'] >= 4 * pixels and 0.24 < ratio < 0.27
    else:
        assert host.placement == 'device' and ratio == 1.0


def test_report_on_the_real_run(measured: tuple[BenchResult, Path], tmp_path: Path, capsys: Any) -> None:
    """The run, judged without a baseline (nothing to compare: inconclusive, never a regression) and rendered."""
    result, path = measured
    baselines = tmp_path / 'baselines'
    baselines.mkdir()
    args = ['report', '--results', str(path.parent), '--baselines', str(baselines), '--out', str(tmp_path / 'out')]
    assert _cli.main(args) == 0
    md = (tmp_path / 'out' / 'cpu' / 'report.md').read_text()
    assert (
        result.env in md
        and '| shim-batch | device | coherent |' in md
        and plain_words(result.recipe['unpatched']) in md
    )
    for chart in ('ratios.png', 'bytes.png', 'throughput.png'):
        assert (tmp_path / 'out' / 'cpu' / chart).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n', chart
    assert f'{result.env}: ' in capsys.readouterr().out


def test_planted_hook_delay_restores_the_hooks_exactly() -> None:
    from compatshim.shim.hooks import BatchHook, MicrobatchHook

    before = (BatchHook.__dict__['__call__'], MicrobatchHook.__dict__['__call__'])
    with reference.planted_hook_delay(50):
        assert BatchHook.__dict__['__call__'] is not before[0]
    assert (BatchHook.__dict__['__call__'], MicrobatchHook.__dict__['__call__']) == before


def test_planted_tensor_delay_slows_each_counted_tensor_and_restores_the_counter() -> None:
    """The planted per-tensor delay sits on the counter of every device it is installed on while the block runs (the
    monitor's probe on a detection-style batch then costs more than the move: its gate's planted regression)."""
    from compatshim.observe.recorder import MoveCounter
    from compatshim.testing import FakeAcceleratorDevice

    before = MoveCounter.__dict__['install']
    with reference.planted_tensor_delay(20):
        device = FakeAcceleratorDevice()
        counter = MoveCounter().install(device)
        started = time.perf_counter()
        device.batch_to_device(reference.batch_of('monitor@16'))
        assert time.perf_counter() - started >= 48 * 20e-6, 'not 20 µs more for each of 48 tensors'
        assert counter.take() == {'float32': 16 * (3 * 8 * 8 + 2 * 4) * 4, 'int64': 16 * 2 * 8}
    assert MoveCounter.__dict__['install'] is before


def test_bad_input_is_refused_clearly(capsys: Any) -> None:
    with pytest.raises(ValueError, match="unknown size 'huge'; choose one of tiny, cpu, gpu"):
        reference.bench_reference('cpu', 'huge')
    with pytest.raises(ValueError, match='plant_slowdown must be between 0 and 10'):
        reference.bench_reference('cpu', 'tiny', plant_slowdown=-1)
    assert _cli.main(['bench', '--plant-hook-us', '-5']) == 2
    assert 'plant_hook_us must be between 0 and 100000' in capsys.readouterr().err
    assert _cli.main(['bench', '--plant-tensor-us', '5000']) == 2
    assert 'plant_tensor_us must be between 0 and 1000 µs, got 5000' in capsys.readouterr().err
    with pytest.raises(ValueError, match='no probe .monitor@3.; choose one of hook-batch'):
        reference.make_probe('monitor@3', accelerator('cpu'))
