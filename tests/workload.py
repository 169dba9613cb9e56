"""A tiny, real Composer workload whose device transform and model record what they see.

Samples are ``(x, y)`` with ``x`` of 4 features: column 0 is overwritten by the transform with its one random draw,
column 1 by the batch mean of column 1 (a batch statistic), column 2 holds the sample's index in the dataset.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

import torch
from device import make_device
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


def assert_on_device(probe: Probe, calls: int, what: str) -> None:
    """``probe`` ran ``calls`` times, every call on a batch on the device."""
    assert len(probe.calls) == calls, f'{what}: the transform ran {len(probe.calls)}x, expected {calls}'
    where = {call.placement for call in probe.calls}
    assert where == {'device'}, f'{what}: the transform saw batches on {where}'


class Recorder(torch.nn.Module):
    """Records every input the model is fed (placement and a host copy)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, torch.Tensor]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((placement(x), x.detach().cpu().clone()))
        return x


class OOMRecorder(Recorder):
    """A Recorder that fails like a full GPU (Composer's OOM message) on training microbatches above a size."""

    def __init__(self, oom_above: int) -> None:
        super().__init__()
        self.oom_above = oom_above
        self.ooms = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and len(x) > self.oom_above:
            self.ooms += 1
            raise RuntimeError('CUDA out of memory. (simulated by the compatshim tests)')
        return super().forward(x)


def model_with(recorder: Recorder) -> Any:
    from composer.models import ComposerClassifier

    return ComposerClassifier(torch.nn.Sequential(recorder, torch.nn.Linear(N_FEATURES, 2)), num_classes=2)


def trainer(device: Any, recorder: Recorder | None = None, **kwargs: Any) -> tuple[Any, Recorder]:
    """A real Composer Trainer on ``device`` with a recording model; ``kwargs`` go to the Trainer."""
    from composer import Trainer

    recorder = recorder or Recorder()
    kwargs.setdefault('seed', 17)
    kwargs.setdefault('progress_bar', False)
    kwargs.setdefault('precision', 'fp32')
    return Trainer(model=model_with(recorder), device=device, **kwargs), recorder


def steps(recorder: Recorder, per_step: int) -> list[torch.Tensor]:
    """The training inputs the model saw, concatenated per optimizer step (``per_step`` forwards each)."""
    seen = [x for _, x in recorder.seen]
    assert len(seen) % per_step == 0, f'{len(seen)} forwards do not split into steps of {per_step}'
    return [torch.cat(seen[i : i + per_step]) for i in range(0, len(seen), per_step)]


def any_batch_model(inputs: Any) -> Any:
    """A ComposerModel (Linear 4→1, loss: mean squared output) that finds its input tensor with ``inputs(batch)``.

    Inputs Composer left on the host (objects it does not know how to move) are brought to the model's device.
    """
    from composer.models import ComposerModel

    class Model(ComposerModel):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(N_FEATURES, 1)

        def forward(self, batch: Any) -> torch.Tensor:
            x = inputs(batch)
            return self.linear(x if x.device == self.linear.weight.device else x.to(self.linear.weight.device))

        def loss(self, outputs: torch.Tensor, batch: Any) -> torch.Tensor:
            return outputs.pow(2).mean()

    return Model()


#: The coherence workload: steps of BATCH samples over a dataset of N (tests/release/test_coherence.py).
BATCH = 8
N = 32


def fit_probe(
    microbatch: int | str,
    recorder: Optional[Recorder] = None,
    device: Any = None,
    spec: Optional[Callable[[Probe], Any]] = None,
) -> tuple[Probe, list[torch.Tensor]]:
    """One epoch with a :class:`Probe` as the device transform; the probe and the model's inputs per step.

    ``spec(probe)`` builds the train DataSpec (default: ``DataSpec(loader, device_transforms=probe)``).
    """
    from composer.core import DataSpec

    probe = Probe()
    data = spec(probe) if spec is not None else DataSpec(loader(N, BATCH), device_transforms=probe)
    t, rec = trainer(
        device or make_device(),
        recorder=recorder,
        train_dataloader=data,
        max_duration='1ep',
        device_train_microbatch_size=microbatch,
    )
    t.fit()
    per_step = 1 if microbatch == 'auto' else math.ceil(BATCH / microbatch)
    return probe, steps(rec, per_step) if microbatch != 'auto' else [x for _, x in rec.seen]


def assert_coherent(probe: Probe, per_step_inputs: list[torch.Tensor]) -> None:
    """One call per step, on the device, and every microbatch of a step a slice of that call's result (C1, C2, C4)."""
    assert len(probe.calls) == N // BATCH, f'{len(probe.calls)} transform calls for {N // BATCH} steps'
    assert {c.placement for c in probe.calls} == {'device'}, 'the transform did not run on the device'
    for call, x in zip(probe.calls, per_step_inputs):
        assert x.shape[0] == call.size == BATCH  # C4: one shape, the whole batch
        assert torch.all(x[:, 0] == call.draw), 'C1: microbatches of one step carry different draws'
        assert torch.unique(x[:, 1]).numel() == 1, 'C2: the batch statistic differs between microbatches'
        assert [int(i) for i in x[:, 2]] == call.ids, 'microbatches are not slices of the transformed batch'
