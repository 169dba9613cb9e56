"""Batch structures: tuple, list, dict, nested, and non-tensor leaves reach the transform on the device, intact."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import LEGS, make_device
from torch.utils.data import DataLoader
from workload import any_batch_model

from compatshim.testing import placement

pytestmark = pytest.mark.device


def _x(batch: Any) -> torch.Tensor:
    if isinstance(batch, dict):
        return _x(batch['inputs'])
    return batch[0] if isinstance(batch, (list, tuple)) else batch


def _collate_as(kind: str):
    def collate(samples: list[torch.Tensor]) -> Any:
        x = torch.stack(samples)
        y = torch.zeros(len(samples))
        return {
            'tuple': (x, y),
            'list': [x, y],
            'dict': {'inputs': x, 'labels': y},
            'nested': {'inputs': [x, {'mask': torch.ones_like(x)}], 'labels': (y, y)},
            'non-tensor': {'inputs': (x, 'caption', 3), 'labels': y, 'meta': {'source': 'synthetic', 'ids': [1, 2]}},
        }[kind]

    return collate


@pytest.mark.parametrize('leg', LEGS, indirect=True)
@pytest.mark.parametrize('kind', ['tuple', 'list', 'dict', 'nested', 'non-tensor'])
def test_structures(leg: str, kind: str) -> None:
    from composer import Trainer
    from composer.core import DataSpec

    seen: list[tuple[str, Any]] = []

    def transform(batch: Any) -> Any:
        seen.append((placement(batch), batch))
        return batch

    data = [torch.randn(4) for _ in range(8)]
    spec = DataSpec(
        DataLoader(data, batch_size=4, collate_fn=_collate_as(kind)),
        device_transforms=transform,
        get_num_samples_in_batch=lambda b: len(_x(b)),
    )
    trainer = Trainer(
        model=any_batch_model(_x),
        device=make_device(),
        train_dataloader=spec,
        max_duration='2ba',
        progress_bar=False,
        precision='fp32',
    )
    trainer.fit()
    assert [p for p, _ in seen] == ['device', 'device']
    batch = seen[0][1]
    assert type(batch) is type(_collate_as(kind)([data[0]]))
    if kind == 'non-tensor':
        assert batch['inputs'][1:] == ('caption', 3) and batch['meta'] == {'source': 'synthetic', 'ids': [1, 2]}
