"""The benchmark workload: synthetic images, a small CNN, and a heavy, batch-coherent augmentation pipeline.

Everything is plain torch, so it runs on any device, and nothing is downloaded. :class:`Augment` is the
``device_transforms`` under test: random resized crop, colour jitter, Gaussian blur and mixup, each drawing **one**
set of parameters per call from its own seeded generator (so it is batch-coherent when called once per batch).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

__all__ = ['Augment', 'SIZES', 'Size', 'bench_loader', 'bench_model']


@dataclasses.dataclass(frozen=True)
class Size:
    """How big one benchmark leg is. Part of the fingerprint: baselines only compare at the same size."""

    #: Samples per batch (per rank).
    batch: int
    #: Samples per microbatch (``device_train_microbatch_size``); ``batch // microbatch`` microbatches per step.
    microbatch: int
    #: Image side in pixels (square, 3 channels).
    image: int
    #: Optimizer steps per timing window (one epoch of the synthetic dataset).
    steps: int
    #: Timed windows per leg, after the warm-up rounds.
    windows: int
    #: Blur kernel size (odd): the knob that makes the transform heavy.
    blur: int


#: ``cpu``: seconds per leg on 2 cores. ``gpu``: big enough to load an accelerator. ``tiny``: for the test suite.
SIZES: dict[str, Size] = {
    'tiny': Size(batch=8, microbatch=4, image=16, steps=2, windows=3, blur=3),
    'cpu': Size(batch=32, microbatch=16, image=64, steps=12, windows=40, blur=15),
    'gpu': Size(batch=256, microbatch=64, image=224, steps=20, windows=9, blur=31),
}

N_CLASSES = 10


def bench_loader(size: Size, seed: int = 0) -> DataLoader:
    """A loader over ``size.steps`` batches of random images with one-hot float labels (one epoch = one window).

    Each batch is one indexing of the in-memory tensors (no per-sample collate), so loading costs next to nothing
    and Composer's per-``fit`` sampler restore (one batch per past epoch) does not grow into the timings.
    """
    gen = torch.Generator().manual_seed(seed)
    n = size.batch * size.steps
    x = torch.rand(n, 3, size.image, size.image, generator=gen)
    y = F.one_hot(torch.randint(0, N_CLASSES, (n,), generator=gen), N_CLASSES).float()
    batches = BatchSampler(SequentialSampler(range(n)), batch_size=size.batch, drop_last=True)
    return DataLoader(TensorDataset(x, y), batch_size=None, sampler=batches)


def bench_model() -> Any:
    """A small CNN as a ComposerModel with a soft-label cross-entropy (mixup makes labels soft)."""
    from composer.models import ComposerModel

    class BenchModel(ComposerModel):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
                torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(4),
                torch.nn.Flatten(),
                torch.nn.Linear(8 * 16, N_CLASSES),
            )

        def forward(self, batch: Any) -> torch.Tensor:
            return self.net(batch[0])

        def loss(self, outputs: torch.Tensor, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            return -(batch[1] * F.log_softmax(outputs, dim=1)).sum(dim=1).mean()

    return BenchModel()


class Augment:
    """Batch-level random resized crop → colour jitter → Gaussian blur → mixup, one draw per call.

    Parameters are drawn on the host from a seeded generator (so every device draws the same ones); the pixel work
    runs wherever the batch is. ``calls`` counts the calls.

    Args:
        blur: Gaussian kernel size (odd).
        seed: Seed of the parameter generator.
    """

    def __init__(self, blur: int, seed: int = 0) -> None:
        self.blur = blur
        self.gen = torch.Generator().manual_seed(seed)
        self.calls = 0

    def _uniform(self, low: float, high: float) -> float:
        return low + (high - low) * float(torch.rand((), generator=self.gen))

    def __call__(self, batch: Any) -> Any:
        self.calls += 1
        x, y = batch[0], batch[1]
        n, _, h, w = x.shape
        # Random resized crop: one box for the whole batch, resized back to (h, w).
        area = self._uniform(0.35, 1.0) * h * w
        ratio = math.exp(self._uniform(math.log(3 / 4), math.log(4 / 3)))
        ch = max(2, min(h, int(round(math.sqrt(area / ratio)))))
        cw = max(2, min(w, int(round(math.sqrt(area * ratio)))))
        top = int(self._uniform(0, h - ch + 1))
        left = int(self._uniform(0, w - cw + 1))
        x = F.interpolate(x[:, :, top:top + ch, left:left + cw], size=(h, w), mode='bilinear', align_corners=False)
        # Colour jitter: brightness, contrast (batch mean), saturation.
        x = x * self._uniform(0.6, 1.4)
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        x = (x - mean) * self._uniform(0.6, 1.4) + mean
        grey = x.mean(dim=1, keepdim=True)
        x = (x - grey) * self._uniform(0.6, 1.4) + grey
        # Gaussian blur, separable, one sigma for the batch.
        sigma = self._uniform(0.5, 3.0)
        k = torch.arange(self.blur, dtype=torch.float32) - self.blur // 2
        kernel = torch.exp(-k * k / (2 * sigma * sigma))
        kernel = (kernel / kernel.sum()).to(x.device, x.dtype)
        x = F.conv2d(x, kernel.view(1, 1, 1, -1).repeat(3, 1, 1, 1), padding=(0, self.blur // 2), groups=3)
        x = F.conv2d(x, kernel.view(1, 1, -1, 1).repeat(3, 1, 1, 1), padding=(self.blur // 2, 0), groups=3)
        # Mixup: one lambda and one permutation over the whole batch.
        lam = self._uniform(0.0, 1.0)
        perm = torch.randperm(n, generator=self.gen).to(x.device)
        x = lam * x + (1 - lam) * x[perm]
        y = lam * y + (1 - lam) * y[perm]
        return (x.clamp(0, 1), y) if isinstance(batch, tuple) else [x.clamp(0, 1), y]

    def __repr__(self) -> str:
        return f'Augment(blur={self.blur})'
