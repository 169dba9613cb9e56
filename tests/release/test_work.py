"""A transform's work, counted (``compatshim.bench.work``): ops, bytes written by dtype, FLOPs; the same for the same
code on any machine, more for a heavier transform, and the real call unchanged by the counting (its draws included).
Runs in the forward env too: what torch dispatches depends on torch."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from conftest import make_device

from compatshim.bench import gate
from compatshim.bench.work import Work, WorkCounter

pytestmark = pytest.mark.forward


def crop_flip_normalise(batch: torch.Tensor) -> torch.Tensor:
    x = batch[:, :, 2:30, 2:30].flip(-1).float()
    return (x - 127.5) / 64.0


def heavier(batch: torch.Tensor) -> torch.Tensor:
    """The same, with one more op over a tenth of the batch."""
    x = crop_flip_normalise(batch)
    x[: len(x) // 10 or 1].mul_(1.0)
    return x


def coin(batch: torch.Tensor) -> torch.Tensor:
    """Work that depends on a draw: a flip and an add with probability one half (and a Python draw too)."""
    x = batch.float()
    if torch.rand(()) < 0.5 and random.random() < 2:
        x = x.flip(-1) + 1
    return x


def _batch() -> torch.Tensor:
    return torch.randint(0, 255, (10, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def _count(transform: Any, calls: int = 1, batch: Any = None) -> Work:
    counter = WorkCounter(transform)
    for _ in range(calls):
        counter(_batch() if batch is None else batch)
    work = counter.work()
    assert work is not None and counter.failed is None
    return work


def test_ops_and_bytes_written_by_dtype() -> None:
    work = _count(crop_flip_normalise)
    floats = 10 * 3 * 28 * 28 * 4
    # flip writes uint8, the conversion, the subtraction and the division write float32; the slices write nothing
    assert work.bytes_by_dtype == {'uint8': 10 * 3 * 28 * 28, 'float32': 3 * floats}
    assert work.ops >= 4 and work.flops == 0 and work.calls == 1
    assert _count(lambda b: b @ torch.ones(32, 32, dtype=torch.uint8)).flops > 0


def test_a_heavier_transform_counts_more_and_the_same_code_counts_the_same() -> None:
    base, again, more = _count(crop_flip_normalise), _count(crop_flip_normalise), _count(heavier)
    assert base == again
    assert more.ops > base.ops and more.bytes > base.bytes


def test_a_compiled_transform_is_counted_as_written_and_never_traced_by_the_count() -> None:
    """Issue 59: Dynamo traced the counter's own dispatch mode on every counted call (17 frames for a quick bench
    where 6 serve the user's calls), and on torch 2.4 a backend failed under it (``not counted``). The counted call
    runs the transform eagerly: the compiler is never asked, the ops are the uncompiled transform's, and the real
    call after it runs the compiled code."""
    compiled_for: list[int] = []

    def backend(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
        compiled_for.append(len(inputs))
        return graph.forward

    fast = torch.compile(crop_flip_normalise, backend=backend)
    fast(_batch())  # the user's first call compiles it
    assert compiled_for == [1]
    assert _count(fast, calls=2) == _count(crop_flip_normalise, calls=2)
    assert compiled_for == [1], 'the count traced the transform again'


def test_work_that_depends_on_draws_is_the_same_for_seeded_runs_and_the_real_call_draws_as_it_would() -> None:
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        random.seed(3)
        runs.append(_count(coin, calls=16))
    assert runs[0] == runs[1] and runs[0].ops != int(runs[0].ops)  # an average over the draws of seeded calls
    torch.manual_seed(5)
    plain = [coin(_batch()).sum().item() for _ in range(6)]
    torch.manual_seed(5)
    counter = WorkCounter(coin)
    counted = [counter(_batch()).sum().item() for _ in range(6)]
    assert counted == plain, 'counting changed what the real calls drew'


def test_a_transform_drawing_from_its_own_generator_draws_the_same_in_the_real_call() -> None:
    class OwnDraws:
        def __init__(self) -> None:
            self.gen, self.python = torch.Generator().manual_seed(1), random.Random(1)

        def __call__(self, batch: torch.Tensor) -> torch.Tensor:
            return batch.float() * float(torch.rand((), generator=self.gen)) + self.python.random()

    plain, counted = OwnDraws(), WorkCounter(OwnDraws())
    assert [plain(_batch()).sum().item() for _ in range(4)] == [counted(_batch()).sum().item() for _ in range(4)]

    class Compose:  # a wrapper holding its transforms in a list, as torchvision's Compose does
        def __init__(self, *transforms: Any) -> None:
            self.transforms = list(transforms)

        def __call__(self, batch: Any) -> Any:
            for transform in self.transforms:
                batch = transform(batch)
            return batch

    plain, counted = Compose(OwnDraws()), WorkCounter(Compose(OwnDraws()))
    assert [plain(_batch()).sum().item() for _ in range(4)] == [counted(_batch()).sum().item() for _ in range(4)]


def test_the_real_batch_is_untouched_by_the_counted_call_and_a_device_batch_is_counted() -> None:
    def in_place(batch: torch.Tensor) -> torch.Tensor:
        return batch.mul_(2)

    batch = _batch()
    before = batch.clone()
    counter = WorkCounter(in_place)
    out = counter(batch)
    assert torch.equal(out, before * 2), 'the counted call changed the batch the real call got'
    moved = make_device().batch_to_device(_batch())
    assert type(WorkCounter(crop_flip_normalise)(moved)) is type(moved)
    assert _count(crop_flip_normalise, batch=moved) == _count(crop_flip_normalise)


def test_a_transform_torch_cannot_count_is_reported_and_still_runs() -> None:
    class Odd:
        def __init__(self) -> None:
            self.seen = 0

        def __call__(self, batch: Any) -> Any:
            self.seen += 1
            if self.seen == 1:
                raise RuntimeError('only the counted call fails\nsecond line')
            return batch

    odd = Odd()
    counter = WorkCounter(odd)
    assert counter(_batch()) is not None
    assert counter.failed == 'RuntimeError: only the counted call fails' and counter.work() is None


def test_generators_in_a_closure_or_a_numpy_random_state_and_a_batch_class_of_ones_own() -> None:
    """What a reviewer found: a generator held in a closure, numpy's RandomState, and an in-place transform on a batch
    that torch's pytree does not know (the counted call must not change the real batch)."""
    numpy = pytest.importorskip('numpy')
    gen = torch.Generator().manual_seed(2)

    def closure(batch: torch.Tensor) -> torch.Tensor:
        return batch.float() * float(torch.rand((), generator=gen))

    class StateDraws:
        def __init__(self) -> None:
            self.state = numpy.random.RandomState(2)

        def __call__(self, batch: torch.Tensor) -> torch.Tensor:
            return batch.float() * float(self.state.rand())

    for make in (lambda: closure, StateDraws):
        gen.manual_seed(2)
        transform = make()
        plain = [transform(_batch()).sum().item() for _ in range(3)]
        gen.manual_seed(2)
        counter = WorkCounter(make())
        assert [counter(_batch()).sum().item() for _ in range(3)] == plain

    class Batch:
        def __init__(self) -> None:
            self.x = torch.ones(2)

    def doubles(batch: Batch) -> Batch:
        batch.x.mul_(2)
        return batch

    assert WorkCounter(doubles)(Batch()).x.tolist() == [2.0, 2.0]


def _draws(transform: Any, calls: int = 4) -> list[float]:
    return [transform(_batch()).sum().item() for _ in range(calls)]


class Augment:
    """A transform object whose method draws from the object's own generators (torch's, numpy's, Python's)."""

    def __init__(self) -> None:
        numpy = pytest.importorskip('numpy')
        self.gen, self.numpy, self.python = (
            torch.Generator().manual_seed(7),
            numpy.random.RandomState(7),
            random.Random(7),
        )

    def aug(self, batch: torch.Tensor) -> torch.Tensor:
        drawn = float(torch.rand((), generator=self.gen)) + float(self.numpy.rand()) + self.python.random()
        return batch.float() * drawn


def test_a_bound_methods_generators_are_put_back_so_the_real_call_draws_as_its_uncounted_twin() -> None:
    """Issue 46: ``WorkCounter(obj.aug)`` found no generator (a method is not its object); the real calls drew 48,
    667, 280 where the uncounted twin drew 986, 48, 737. Its object, a partial of it and a wrapper's ``__wrapped__``
    are searched now."""
    import functools

    twin = _draws(Augment().aug)
    assert _draws(WorkCounter(Augment().aug)) == twin
    assert _draws(WorkCounter(functools.partial(lambda fn, b: fn(b), Augment().aug))) == twin
    held = {'aug': Augment().aug}

    def wrapper(batch: torch.Tensor) -> torch.Tensor:  # holds its transform only through __wrapped__ and a global
        return held['aug'](batch)

    wrapper.__wrapped__ = held['aug']  # type: ignore[attr-defined]  # as functools.wraps sets it
    assert _draws(WorkCounter(wrapper)) == twin


def test_module_level_generators_of_the_transforms_module_are_put_back(tmp_path: Any, monkeypatch: Any) -> None:
    numpy = pytest.importorskip('numpy')
    (tmp_path / 'jitter_module.py').write_text(
        'import random\nimport numpy\nimport torch\n'
        'RNG = numpy.random.default_rng(0)\nGEN = torch.Generator().manual_seed(0)\nPY = random.Random(0)\n'
        'def jitter(batch):\n'
        '    return batch.float() * (float(RNG.random()) + float(torch.rand((), generator=GEN)) + PY.random())\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import jitter_module

    def fresh() -> None:
        jitter_module.RNG, jitter_module.PY = numpy.random.default_rng(0), random.Random(0)
        jitter_module.GEN.manual_seed(0)

    fresh()
    twin = _draws(jitter_module.jitter)
    fresh()
    assert _draws(WorkCounter(jitter_module.jitter)) == twin


def test_work_that_leaves_torch_is_marked_not_fully_counted_never_silently_nothing() -> None:
    """Issue 46: a numpy transform showed "3 ops, 0 B" with no word. Tensor data handed to numpy or Python lists, or
    a numpy array handed to torch, marks the work not fully counted, with the route and its elements per call; a
    scalar (``.item()``, ``int()``, a random parameter) does not."""
    numpy = pytest.importorskip('numpy')
    state = numpy.random.RandomState(0)

    def in_numpy(batch: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(numpy.ascontiguousarray(batch.numpy()[..., ::-1]))

    def numpy_masks(batch: torch.Tensor) -> torch.Tensor:
        flip = torch.as_tensor(state.rand(len(batch)) < 0.5)[:, None, None, None]
        return torch.where(flip, batch.flip(-1), batch)

    def python_loop(batch: torch.Tensor) -> torch.Tensor:
        return torch.tensor([255 - v for v in batch.reshape(-1).tolist()], dtype=torch.uint8).reshape(batch.shape)

    elements = 10 * 3 * 32 * 32
    assert _count(in_numpy).outside == {'Tensor.numpy': elements, 'torch.from_numpy': elements}
    assert _count(numpy_masks).outside == {'numpy array into torch.as_tensor': 10}
    assert _count(python_loop).outside == {'Tensor.tolist': elements}
    for fully in (crop_flip_normalise, coin):
        assert _count(fully).fully_counted
    work = _count(in_numpy)
    assert not work.fully_counted and 'not fully counted: work left torch through Tensor.numpy 30,720' in work.text()
    assert Work.from_json(work.to_json()) == work
    older = {k: v for k, v in work.to_json().items() if k != 'outside'}  # a result written before the field
    assert Work.from_json(older).fully_counted and 'outside' not in _count(crop_flip_normalise).to_json()


def test_the_generators_kept_are_every_devices_torch_has_here() -> None:
    """Issue 46: the bench's seeding kept only the host's torch generator; cuda's and mps's are kept with it."""
    from compatshim.bench.work import Generators, generators_kept

    expected = ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])
    expected += ['mps'] if torch.backends.mps.is_available() else []
    assert Generators().devices == expected
    before = torch.get_rng_state()
    with generators_kept():
        torch.manual_seed(0)
        torch.rand(3)
    assert torch.equal(torch.get_rng_state(), before)
    if torch.cuda.is_available():
        on_cuda = torch.cuda.get_rng_state_all()
        with generators_kept():
            torch.manual_seed(0)
            torch.rand(3, device='cuda')
        assert all(torch.equal(a, b) for a, b in zip(torch.cuda.get_rng_state_all(), on_cuda))


# --- the gate on three kinds of transform (issue 52), judged in process: counted here, compared by the pipeline's gate


def random_crop(times: int = 1, tenth: bool = False) -> Any:
    """The most common augmentation idiom: offsets drawn by torch and read into Python (``.tolist()``, 2 elements)."""

    def transform(batch: torch.Tensor) -> torch.Tensor:
        for _ in range(times):
            i, j = torch.randint(0, 9, (2,)).tolist()
            out = batch[:, :, i : i + 24, j : j + 24].float().div(255)
        return _jitter(out) if tenth else out

    return transform


def torchvision_v2(times: int = 1, tenth: bool = False) -> Any:
    """A torchvision v2 pipeline: its random parameters are read with ``.item()`` inside."""
    v2 = pytest.importorskip('torchvision.transforms.v2')
    steps = v2.Compose([v2.RandomResizedCrop(24, antialias=True), v2.RandomHorizontalFlip()])

    def transform(batch: torch.Tensor) -> torch.Tensor:
        for _ in range(times):
            out = steps(batch.float())
        return _jitter(out) if tenth else out

    return transform


def numpy_mask(times: int = 1, tenth: bool = False) -> Any:
    """A mask drawn by numpy, handed to torch (100 elements per call)."""
    numpy = pytest.importorskip('numpy')
    state = numpy.random.RandomState(0)

    def transform(batch: torch.Tensor) -> torch.Tensor:
        for _ in range(times):
            out = batch.float() * torch.as_tensor(state.rand(10, 1, 1, 1) > 0.1)
        return _jitter(out) if tenth else out

    return transform


def _jitter(out: torch.Tensor) -> torch.Tensor:
    """A jitter over a tenth of the batch: a tenth heavier."""
    n = max(1, len(out) // 10)
    out[:n] = out[:n] + 0.05 * torch.randn_like(out[:n])
    return out


def _results(base: Any, now: Any) -> list[Any]:
    """A recorded pipeline run whose shim legs counted ``now``, and one that counted ``base`` (the transform a fifth of
    a step in both), each counted from one seeded state as the bench does."""
    import copy
    import json
    from pathlib import Path

    from compatshim.bench.results import PipelineResult
    from compatshim.bench.work import COUNTING

    recorded = Path(__file__).parents[1] / 'data' / 'pipeline' / 'main.json'
    results = []
    for transform in (now, base):
        result = PipelineResult.from_json(json.loads(recorded.read_text()))
        torch.manual_seed(0)
        work = _count(transform, calls=4)
        for leg in ('shim-batch', 'shim-microbatch'):
            result.legs[leg].work, result.legs[leg].transform_share = copy.copy(work), 0.2
        result.fingerprint['work_counting'] = COUNTING
        results.append(result)
    return results


def _gated(base: Any, now: Any) -> tuple[int, list[str]]:
    """``gate.compare`` of :func:`_results`: the exit code and the lines."""

    return gate.compare(*_results(base, now), 'base')


@pytest.mark.parametrize('kind', [random_crop, torchvision_v2, numpy_mask], ids=lambda kind: kind.__name__)
def test_twice_the_work_or_a_tenth_more_fails_the_compare_and_unchanged_passes(kind: Any) -> None:
    """Issue 52: with the random crop's ``.tolist()`` every count went unjudged, and twice the work or a tenth more
    exited 0 beside "nothing worsened". Each kind of transform: unchanged exits 0 saying nothing worsened, that the
    counts see any growth in torch, and what only the timing gate sees; twice the work and a tenth heavier exit 1,
    naming ops and bytes on each shim leg."""
    from compatshim.shim.registry import STATE

    code, lines = _gated(kind(), kind())
    assert code == 0 and lines[-1].endswith('nothing worsened'), lines
    text = '\n'.join(lines)  # what leaves torch (the crop's 2 offsets, the mask numpy drew) only the timing gate sees
    outside = 'outside torch (through Tensor.tolist' if kind is random_crop else 'outside torch (through numpy array'
    if kind is torchvision_v2:  # .item(): a single element is not work leaving torch
        assert 'the work counts see any growth' in text and 'outside torch' not in text, lines
    else:
        assert outside in text and 'only the timing gate sees it from about' in text, lines
    said = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(STATE, 'warned', set())  # the work rule is said once a process: this one's first
        for heavier in (kind(times=2), kind(tenth=True)):
            code, lines = _gated(kind(), heavier)
            assert code == 1 and lines[-1].endswith('2 worsened'), lines
            for leg in ('shim-batch', 'shim-microbatch'):
                line = next(x for x in lines if x.startswith(f'REGRESSION uint8_pipeline:pipeline {leg}: work'))
                assert 'more work per call: ops ' in line and '; bytes ' in line, line
            said += [line for line in lines if line.startswith('work: Work per call is gated exactly')]
    assert len(said) == 1, said


def test_work_moved_from_torch_to_numpy_is_inconclusive_never_improved_nor_a_quiet_pass() -> None:
    """A flip done by numpy instead of torch: fewer ops and bytes, more elements leaving torch. Inconclusive on each
    leg, naming what fell and what rose; the last line counts them and says they decide nothing (never "nothing
    worsened"), and the timing line does not claim that the counts see any growth."""
    numpy = pytest.importorskip('numpy')

    def in_torch(batch: torch.Tensor) -> torch.Tensor:
        return batch.flip(-1).float()

    def in_numpy(batch: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(numpy.ascontiguousarray(batch.numpy()[..., ::-1])).float()

    code, lines = _gated(in_torch, in_numpy)
    assert code == 0 and not any(line.startswith(('IMPROVED', 'REGRESSION')) for line in lines), lines
    unsure = [line for line in lines if line.startswith('INCONCLUSIVE') and 'work per call' in line]
    assert len(unsure) == 2 and all('Tensor.numpy elements 0 -> 30,720' in line for line in unsure), unsure
    assert all('its work leaves torch now' in line and 'fell while another rose' in line for line in unsure), unsure
    assert 'nothing worsened' not in lines[-1] and lines[-1].endswith('2 inconclusive, which decide nothing'), lines
    assert not any('work counts see any growth' in line for line in lines), lines


def test_a_baseline_counted_another_way_is_refused_in_one_line_before_and_after_measuring() -> None:
    """A baseline saved before the counting method changed (one that does not say: method 1): refused as not
    comparable in one line telling to save it again (exit 2), before anything is measured and by the compare, never
    judged (twice the work against it would otherwise regress)."""
    from compatshim.bench import engine, pipeline

    now, before = _results(random_crop(), random_crop(times=2))
    del before.fingerprint['work_counting']
    code, lines = gate.compare(now, before, 'base')
    said = "NOT COMPARABLE with 'base': work counted by method 1 in the baseline, 3 now; save a new baseline with"
    assert code == 2 and len(lines) == 1 and lines[0].startswith(said), lines
    size, batch = pipeline.size_of('quick'), torch.zeros(10, 3, 32, 32, dtype=torch.uint8)
    made = pipeline.as_pipeline({'dataloader': [batch], 'transform': random_crop()}, 'crop')
    before.fingerprint.update(engine.workload_keys('cpu', size), pipeline='crop', samples_per_step=10)
    before.fingerprint['microbatch_size'] = 10
    del before.fingerprint['work_counting']
    with pytest.raises(pipeline.PipelineError, match='not comparable: work counted by method 1 in the baseline, 3'):
        pipeline.refuse_unlike('crop', made, before, 'base', 'cpu', size)
    before.fingerprint['work_counting'] = 3
    pipeline.refuse_unlike('crop', made, before, 'base', 'cpu', size)  # counted alike: measured and judged


def test_a_leg_that_could_not_run_is_a_line_of_the_verdict() -> None:
    """Issue 59: a compiled transform the fake accelerator could not run left three legs ``n/a``, and every compare
    said "nothing worsened" over legs that never ran. A leg the baseline measured that fails now is a regression; one
    neither run measured is named in the last line; a shim leg gone is judged by its placement, as before."""
    from compatshim.bench.results import Cause, Missing

    now, before = _results(random_crop(), random_crop())
    now.legs['native-batch'].missing = Missing(Cause.FAILED, 'RuntimeError: cannot trace')
    for result in (now, before):
        result.legs['native-microbatch'].missing = Missing(Cause.FAILED, 'RuntimeError: cannot trace')
    code, lines = gate.compare(now, before, 'base')
    assert code == 1, lines
    assert 'REGRESSION uint8_pipeline:pipeline native-batch: runs: ran in the baseline; now Composer 0.32.1: ' \
        'RuntimeError: cannot trace' in lines, lines  # fmt: skip
    assert 'not measured in either run: unpatched, native-microbatch' in lines[-1], lines[-1]
    assert lines[-1].endswith('1 worsened') and 'legs judged: shim-batch, shim-microbatch, ceiling' in lines[-1]
    assert any(line.startswith('FAILS uint8_pipeline:pipeline native-microbatch: now, Composer') for line in lines)
    now.legs['native-batch'].missing, now.legs['shim-batch'].missing = None, Missing(Cause.FAILED, 'RuntimeError: x')
    code, lines = gate.compare(now, before, 'base')
    assert code == 1 and any(line.startswith('REGRESSION uint8_pipeline:pipeline shim-batch: placement') for line in
                             lines), lines  # fmt: skip


def test_no_timing_is_improved_where_the_work_changed_and_few_rounds_gate_no_timing() -> None:
    """Issue 59: a transform that grew its batch made the ceiling slower, and a regressing compare said ``IMPROVED
    unpatched/ceiling +77%: the baseline is stale``; ``--quick`` printed timing verdicts it never gates. A ratio whose
    counts changed is inconclusive, never improved, nor regressed where no count rose (less work speeds the ceiling
    up more); below 5 rounds no timing is judged or said."""

    now, before = _results(random_crop(), random_crop(times=2))
    leg = now.legs['native-batch']
    leg.round_s = [s / 2 for s in leg.round_s]  # twice as fast against the same ceiling windows
    code, lines = gate.compare(now, before, 'base')
    assert code == 1 and not any(line.startswith('IMPROVED') for line in lines), lines
    ratio = next(line for line in lines if 'native-batch/ceiling' in line)
    assert ratio.startswith('INCONCLUSIVE') and 'not like for like' in ratio, ratio
    now, before = _results(random_crop(times=2), random_crop())  # half the work: counts fall, none rises
    now.legs['native-batch'].round_s = [s * 2 for s in now.legs['native-batch'].round_s]
    ratio = next(line for line in gate.compare(now, before, 'base')[1] if 'native-batch/ceiling' in line)
    assert ratio.startswith('INCONCLUSIVE') and 'not like for like' in ratio, ratio  # the ceiling sped up more
    now, before = _results(random_crop(), random_crop())
    now.legs['shim-batch'].round_s = [s * 3 for s in now.legs['shim-batch'].round_s]
    assert any('shim-batch/ceiling' in line for line in gate.compare(now, before, 'base')[1])
    for result in (now, before):
        result.fingerprint['size']['rounds'] = 3
    code, lines = gate.compare(now, before, 'base')
    assert code == 0 and not any('/ceiling' in line or 'timing gate' in line for line in lines), lines
    assert 'timings not gated: fewer than 5 rounds' in lines[-1], lines
