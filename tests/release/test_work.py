"""A transform's work, counted (``compatshim.observe.work``): ops, bytes written by dtype, FLOPs; the same for the same
code on any machine, more for a heavier transform, and the real call unchanged by the counting (its draws included).
Runs in the forward env too: what torch dispatches depends on torch."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from conftest import make_device

from compatshim.observe.work import Work, WorkCounter

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
