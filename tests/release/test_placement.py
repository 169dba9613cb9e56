"""Placement: ``device_transforms`` sees the batch on the device in train, eval (two evaluators) and predict.

Each test has a ``shim`` leg and a ``control`` leg without the shim; the control must fail on every affected release
(strict xfail) and pass on 0.24.1, which places batches correctly itself.
"""

from __future__ import annotations

import pytest
from conftest import COMPOSER, FAMILY, LEGS, make_device
from workload import Probe, loader, trainer

import compatshim
from compatshim.config.support import Family

pytestmark = pytest.mark.device


def _assert_on_device(probe: Probe, expected_calls: int, what: str) -> None:
    assert len(probe.calls) == expected_calls, (
        f'{what}: device_transforms ran {len(probe.calls)}x, expected {expected_calls}'
    )
    where = {call.placement for call in probe.calls}
    assert where == {'device'}, f'{what}: device_transforms saw batches on {where}'


@pytest.mark.python
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_train_two_evaluators_and_predict(leg: str) -> None:
    from composer.core import DataSpec, Evaluator

    train, ev_a, ev_b, pred = Probe(), Probe(), Probe(), Probe()
    t, recorder = trainer(
        make_device(),
        train_dataloader=DataSpec(loader(32), device_transforms=train),
        eval_dataloader=[
            Evaluator(
                label='a', dataloader=DataSpec(loader(16), device_transforms=ev_a), metric_names=['MulticlassAccuracy']
            ),
            Evaluator(
                label='b',
                dataloader=DataSpec(loader(8, 4), device_transforms=ev_b),
                metric_names=['MulticlassAccuracy'],
            ),
        ],
        max_duration='4ba',
        eval_interval='4ba',
        device_train_microbatch_size=4,
    )
    t.fit()
    t.predict(DataSpec(loader(16), device_transforms=pred))
    _assert_on_device(train, 4, 'train')
    _assert_on_device(ev_a, 2, 'eval a')
    _assert_on_device(ev_b, 2, 'eval b')
    _assert_on_device(pred, 2, 'predict')
    assert {p for p, _ in recorder.seen} == {'device'}


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_late_dataloaders(leg: str) -> None:
    """Dataloaders handed to ``fit``, ``eval`` and ``predict`` after the Trainer was built."""
    from composer.core import DataSpec

    train, ev, pred = Probe(), Probe(), Probe()
    t, _ = trainer(make_device())
    t.fit(
        train_dataloader=DataSpec(loader(16), device_transforms=train), duration='2ba', device_train_microbatch_size=2
    )
    t.eval(eval_dataloader=DataSpec(loader(16), device_transforms=ev))
    t.predict(dataloader=DataSpec(loader(8), device_transforms=pred))
    _assert_on_device(train, 2, 'late train')
    _assert_on_device(ev, 2, 'late eval')
    _assert_on_device(pred, 1, 'late predict')


@pytest.mark.skipif(FAMILY is None, reason=f'Composer {COMPOSER} is unaffected')
def test_trainer_built_before_enable_is_fixed() -> None:
    """The loop patches are on the Trainer class: a Trainer built before ``enable()`` is fixed too."""
    from composer.core import DataSpec

    t, _ = trainer(make_device())
    compatshim.enable()
    probe = Probe()
    t.fit(train_dataloader=DataSpec(loader(16), device_transforms=probe), duration='2ba')
    _assert_on_device(probe, 2, 'train')


@pytest.mark.skipif(FAMILY is None, reason=f'Composer {COMPOSER} is unaffected')
def test_dataspec_built_before_enable() -> None:
    """Documented: the shim serves the trainer's reads, so a DataSpec built before ``enable()`` runs its transform on
    the device too where it still holds it (0.25–0.26); 0.27–0.28 dropped the argument when it was built."""
    from composer.core import DataSpec

    probe = Probe()
    if FAMILY is Family.REJECTED:
        with pytest.raises(TypeError, match='device_transforms'):
            DataSpec(loader(16), device_transforms=probe)
        return
    spec = DataSpec(loader(16), device_transforms=probe)
    compatshim.enable()
    t, _ = trainer(make_device())
    t.fit(train_dataloader=spec, duration='2ba')
    expected = {Family.HOST: ['device', 'device'], Family.DROPPED: []}[FAMILY]
    assert [c.placement for c in probe.calls] == expected
