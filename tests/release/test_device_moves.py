"""A user's ``Device`` as code written for 0.24.1 relies on it: 0.24.1's trainer asked it to move each batch once, in
train, eval and predict (then split the moved batch), so a ``batch_to_device`` that counts its moves, or normalises
the batch on the way (not idempotent), saw each batch once. From 0.25 Composer moves per microbatch and in more
places (predict, ``SelectiveBackprop.apply``); with the shim the user's ``Device`` sees one move per batch again.
Each test has its control without the shim (strict xfail on affected releases)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import LEGS, make_device
from workload import N_FEATURES, Probe, loader, trainer

pytestmark = pytest.mark.device


def _counting(device: Any) -> Any:
    """A user's subclass of ``device``'s class whose ``batch_to_device`` counts every call and adds 100 to every
    float tensor it moves (a normalisation on the way: moving twice shows in what the model sees)."""

    class UsersDevice(type(device)):  # type: ignore[misc]
        moves = 0

        def batch_to_device(self, batch: Any) -> Any:
            type(self).moves += 1
            moved = super().batch_to_device(batch)
            return [t + 100 if t.is_floating_point() else t for t in moved]

    return UsersDevice()


def _spec(**kwargs: Any) -> Any:
    from composer.core import DataSpec

    return DataSpec(loader(kwargs.pop('n', 16), 8), device_transforms=Probe(), **kwargs)


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_a_users_device_moves_each_batch_once_in_train_eval_and_predict(leg: str) -> None:
    """4 train batches of 2 microbatches, an evaluator of 2 batches, a predict of 2 batches: 8 moves, as on 0.24.1,
    and every input the model saw normalised once (its first feature in [100, 102): the data's randn plus 100 once)."""
    device = _counting(make_device())
    t, recorder = trainer(
        device, train_dataloader=_spec(n=32), eval_dataloader=_spec(), max_duration='4ba', eval_interval='4ba',
        device_train_microbatch_size=4,
    )  # fmt: skip
    t.fit()
    assert type(device).moves == 6, f'{type(device).moves} moves for 4 train and 2 eval batches'
    t.predict(_spec())
    assert type(device).moves == 8, f'{type(device).moves - 6} moves for 2 predict batches'
    seen = torch.cat([x for _, x in recorder.seen])
    # The Probe sets feature 0 to its draw in [0, 1), after the move: +100 once is feature 3 in (95, 105).
    assert bool(((seen[:, 3] > 95) & (seen[:, 3] < 105)).all()), 'an input was normalised twice or never'
    assert seen.shape[1] == N_FEATURES


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_an_algorithm_that_moves_the_batch_moves_it_once(leg: str) -> None:
    """0.25+'s ``SelectiveBackprop.apply`` moves ``state.batch`` itself at ``AFTER_DATALOADER``; with the shim the
    batch is on the device there already (as on 0.24.1), and the user's Device is asked once per batch."""
    from composer.algorithms import SelectiveBackprop

    device = _counting(make_device())
    algorithm = SelectiveBackprop(start=0, end=1, keep=0.5, interrupt=0, scale_factor=1)
    t, _ = trainer(device, train_dataloader=_spec(n=32), max_duration='4ba', algorithms=[algorithm])
    t.fit()
    assert type(device).moves == 4, f'{type(device).moves} moves for 4 batches'


#: Predict moved each batch once on 0.25+ too: there the shim must only not add a move, and has no control to fail.
PROFILED = [pytest.param(leg.values[0], loop, on, marks=leg.marks, id=f'{leg.id}-{loop}-{on}') for leg in LEGS for
            loop in ('train', 'eval', 'predict') for on in ('instance', 'class')
            if (leg.id, loop) != ('control', 'predict')]  # fmt: skip


@pytest.mark.parametrize(('leg', 'loop', 'on'), PROFILED, indirect=['leg'])
def test_a_profiler_wrapping_the_move_in_the_middle_of_a_loop_sees_one_move_per_batch(
    leg: str, loop: str, on: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transfer profiler that a callback sets on ``state.device.batch_to_device`` (or on Composer's ``Device``
    class, as an APM agent does) at the second batch's start (after warm-up) of a loop over 3 batches of 2
    microbatches: 0.24.1 had moved that batch before the event, so the wrapper sees the third batch's move alone
    (before the fix, 5 calls in a fit on the instance: each microbatch was moved through it; 0 on the class)."""
    from composer.core import Callback, Event
    from composer.devices import Device

    calls, starts = [0], [0]

    class Profiler(Callback):  # type: ignore[misc]
        def run_event(self, event: Event, state: Any, logger: Any) -> None:
            if event.value not in ('batch_start', 'eval_batch_start', 'predict_batch_start'):
                return
            starts[0] += 1
            if starts[0] != 2:
                return
            if on == 'class':
                inner_method, trainers = Device.batch_to_device, state.device

                def counted(self: Any, batch: Any) -> Any:
                    calls[0] += self is trainers  # not predict's own DeviceCPU moving the outputs back
                    return inner_method(self, batch)

                monkeypatch.setattr(Device, 'batch_to_device', counted)
                return
            inner = state.device.batch_to_device

            def batch_to_device(batch: Any) -> Any:
                calls[0] += 1
                return inner(batch)

            state.device.batch_to_device = batch_to_device

    t, _ = trainer(make_device(), callbacks=[Profiler()], device_train_microbatch_size=4)
    if loop == 'train':
        t.fit(train_dataloader=_spec(n=24), duration='3ba')
    elif loop == 'eval':
        from composer.core import Evaluator

        t.eval(eval_dataloader=Evaluator(label='held', dataloader=_spec(n=24), device_eval_microbatch_size=4))
    else:
        t.predict(_spec(n=24))
    assert calls[0] == 1, f'{calls[0]} calls of the wrapper set at the second of 3 batches in {loop}'
