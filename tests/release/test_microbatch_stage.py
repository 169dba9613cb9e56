"""Stage ``microbatch``: each microbatch is moved, then ``device_transforms`` runs on it, on every affected release.

Also: the per-DataSpec ``data_transfer_stage=`` wins over ``enable(stage=...)``, and on 0.27+ the native
``batch_transforms`` / ``microbatch_transforms`` keep working around it, in the documented order.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import CONTROL, FAMILY, IS_AFFECTED, NEEDS_PATCH, make_device
from workload import Probe, loader, trainer

import compatshim
from compatshim.config.support import Family
from compatshim.testing import placement

pytestmark = [pytest.mark.device, NEEDS_PATCH]

MICROBATCH_LEGS = [
    pytest.param('shim', id='shim', marks=pytest.mark.stage('microbatch')),
    pytest.param('control', id='control', marks=[CONTROL, pytest.mark.control]),
]


def _run(train_spec_kwargs: dict[str, Any] | None = None, eval_microbatch: int = 4) -> tuple[Probe, Probe, Probe]:
    from composer.core import DataSpec, Evaluator

    train, ev, pred = Probe(), Probe(), Probe()
    t, recorder = trainer(
        make_device(),
        train_dataloader=DataSpec(loader(16, 8), device_transforms=train, **(train_spec_kwargs or {})),
        eval_dataloader=Evaluator(
            label='ev',
            dataloader=DataSpec(loader(8, 8), device_transforms=ev),
            device_eval_microbatch_size=eval_microbatch,
        ),
        max_duration='2ba',
        eval_interval='2ba',
        device_train_microbatch_size=2,
    )
    t.fit()
    t.predict(DataSpec(loader(8, 8), device_transforms=pred))
    assert {p for p, _ in recorder.seen} == {'device'}
    return train, ev, pred


@pytest.mark.parametrize('leg', MICROBATCH_LEGS, indirect=True)
def test_one_call_per_microbatch_on_device(leg: str) -> None:
    train, ev, pred = _run()
    assert [(c.placement, c.size) for c in train.calls] == [('device', 2)] * 8  # 2 steps x 4 microbatches
    assert [(c.placement, c.size) for c in ev.calls] == [('device', 4)] * 2  # 1 batch x 2 eval microbatches
    assert [(c.placement, c.size) for c in pred.calls] == [('device', 8)]  # predict does not split


@pytest.mark.parametrize('default, own, calls_per_step', [('batch', 'microbatch', 4), ('microbatch', 'batch', 1)])
def test_dataspec_stage_wins(default: str, own: str, calls_per_step: int) -> None:
    compatshim.enable(stage=default)
    train, _, _ = _run({'data_transfer_stage': own})
    assert len(train.calls) == 2 * calls_per_step
    assert {c.placement for c in train.calls} == {'device'}


def test_enable_twice_changes_the_default_stage() -> None:
    compatshim.enable(stage='batch')
    assert compatshim.enable(stage='microbatch').stage == 'microbatch'
    train, _, _ = _run()
    assert len(train.calls) == 8


class _Log:
    """Records the order, placement and size of every transform call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def tap(self, name: str) -> Any:
        def transform(batch: Any) -> Any:
            self.calls.append((name, placement(batch), len(batch[0])))
            return batch

        return transform


@pytest.mark.skipif(FAMILY is Family.HOST, reason='batch_transforms/microbatch_transforms exist from 0.27.0')
@pytest.mark.parametrize(
    'leg, expected',
    [
        pytest.param(
            'shim',
            [('batch', 'host', 8), ('device', 'device', 8)] + [('micro', 'device', 2)] * 4,
            id='batch-stage',
        ),
        pytest.param(
            'shim',
            [('batch', 'host', 8)] + [('device', 'device', 2), ('micro', 'device', 2)] * 4,
            id='microbatch-stage',
            marks=pytest.mark.stage('microbatch'),
        ),
        pytest.param('control', [], id='control', marks=[CONTROL, pytest.mark.control]),
    ],
    indirect=['leg'],
)
def test_order_with_native_transforms(leg: str, expected: list[tuple[str, str, int]]) -> None:
    """batch_transforms → move → device_transforms → split → microbatch_transforms (stage batch), or
    batch_transforms → split → move → device_transforms → microbatch_transforms (stage microbatch)."""
    from composer.core import DataSpec

    log = _Log()
    spec = DataSpec(
        loader(8, 8),
        batch_transforms=log.tap('batch'),
        device_transforms=log.tap('device'),
        microbatch_transforms=log.tap('micro'),
    )
    t, _ = trainer(make_device(), train_dataloader=spec, max_duration='1ba', device_train_microbatch_size=2)
    t.fit()
    assert log.calls == expected


@pytest.mark.skipif(not IS_AFFECTED, reason='only affected releases are patched')
def test_no_deprecation_warning_and_keyword_accepted(recwarn: Any) -> None:
    from composer.core import DataSpec

    compatshim.enable()
    DataSpec(loader(8), device_transforms=Probe())
    assert not [w for w in recwarn if 'device_transforms' in str(w.message)]
