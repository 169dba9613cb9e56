"""A tiny, real Composer workload whose device transform and model record what they see.

Samples are ``(x, y)`` with ``x`` of 4 features: column 0 is overwritten by the transform with its one random draw,
column 1 by the batch mean of column 1 (a batch statistic), column 2 holds the sample's index in the dataset.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from compatshim.testing import placement

N_FEATURES = 4


def dataset(n: int = 32, seed: int = 0) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, N_FEATURES, generator=gen)
    x[:, 2] = torch.arange(n, dtype=torch.float32)
    y = torch.randint(0, 2, (n,), generator=gen)
    return TensorDataset(x, y)


def loader(n: int = 32, batch_size: int = 8, **kwargs: Any) -> DataLoader:
    return DataLoader(dataset(n), batch_size=batch_size, shuffle=False, **kwargs)


@dataclasses.dataclass
class Call:
    placement: str
    size: int
    draw: float
    ids: list[int]


class Probe:
    """A batch-coherent device transform: one random draw per call, one batch statistic, and a log of its calls."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def __call__(self, batch: Any) -> Any:
        x, y = batch[0], batch[1]
        draw = float(torch.rand(()))
        self.calls.append(Call(placement(batch), len(x), draw, [int(i) for i in x[:, 2].cpu()]))
        x = x.clone()
        x[:, 1] = x[:, 1].mean()
        x[:, 0] = draw
        return (x, y) if isinstance(batch, tuple) else [x, y]


class Recorder(torch.nn.Module):
    """Records every input the model is fed (placement and a host copy)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, torch.Tensor]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((placement(x), x.detach().cpu().clone()))
        return x


def model() -> tuple[Any, Recorder]:
    from composer.models import ComposerClassifier

    recorder = Recorder()
    net = torch.nn.Sequential(recorder, torch.nn.Linear(N_FEATURES, 2))
    return ComposerClassifier(net, num_classes=2), recorder
