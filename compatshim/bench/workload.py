"""The built-in reference pipelines (docs/harness.md), plain torch on synthetic data: ``augment`` (:class:`Augment`,
timed) and ``recipe`` (:class:`RecipeTransform`, MosaicML's ImageNet recipe on uint8 images, checked).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

from compatshim.bench.engine import Pipeline, Size
from compatshim.devices.accelerator import accelerator

__all__ = ['Augment', 'RecipeTransform', 'default_size', 'pipeline']

N_CLASSES = 10
#: ImageNet channel mean and std in 0–255 units, as the recipe's device normalisation uses them.
IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def default_size(device: str) -> str:
    """The size a device is measured at unless told otherwise."""
    return 'cpu' if accelerator(device).is_host else 'gpu'


def bench_loader(size: Size, seed: int = 0) -> DataLoader[Any]:
    """``size.steps`` batches of random float images with one-hot labels, each one indexing of in-memory tensors
    (loading costs next to nothing)."""
    gen, n = torch.Generator().manual_seed(seed), size.batch * size.steps
    x = torch.rand(n, 3, size.image, size.image, generator=gen)
    y = F.one_hot(torch.randint(0, N_CLASSES, (n,), generator=gen), N_CLASSES).float()
    batches = BatchSampler(SequentialSampler(range(n)), batch_size=size.batch, drop_last=True)
    return DataLoader(TensorDataset(x, y), batch_size=None, sampler=batches)


def recipe_loader(size: Size, seed: int = 0) -> DataLoader[Any]:
    """``size.steps`` batches of random uint8 NCHW images with int64 labels, collated per sample as the recipe does."""
    gen, n = torch.Generator().manual_seed(seed), size.batch * size.steps
    x = torch.randint(0, 256, (n, 3, size.image, size.image), generator=gen, dtype=torch.uint8)
    y = torch.randint(0, N_CLASSES, (n,), generator=gen)

    def collate(samples: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.stack([image for image, _ in samples]), torch.stack([label for _, label in samples]).long()

    return DataLoader(TensorDataset(x, y), batch_size=size.batch, shuffle=False, drop_last=True, collate_fn=collate)


def bench_model(soft_labels: bool = True) -> Any:
    """A small CNN as a ComposerModel: soft-label cross-entropy (mixup), or hard-label (the recipe's: a uint8 batch
    fails in the first convolution, as a real model would)."""
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
            out: torch.Tensor = self.net(batch[0])
            return out

        def loss(self, outputs: torch.Tensor, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            if not soft_labels:
                return F.cross_entropy(outputs, batch[1])
            loss: torch.Tensor = -(batch[1] * F.log_softmax(outputs, dim=1)).sum(dim=1).mean()
            return loss

    return BenchModel()


def recipe_model() -> Any:
    return bench_model(soft_labels=False)


class _Drawn:
    """A transform drawing its batch-level parameters on the host from its own generator; ``calls``: its calls."""

    def __init__(self, seed: int = 0) -> None:
        self.gen, self.calls = torch.Generator().manual_seed(seed), 0

    def _uniform(self, low: float, high: float) -> float:
        return low + (high - low) * float(torch.rand((), generator=self.gen))


class Augment(_Drawn):
    """Batch-level random resized crop → colour jitter → Gaussian blur (kernel ``blur``, odd) → mixup."""

    def __init__(self, blur: int, seed: int = 0) -> None:
        super().__init__(seed)
        self.blur = blur

    def __call__(self, batch: Any) -> Any:
        self.calls += 1
        x, y = batch[0], batch[1]
        n, _, h, w = x.shape
        # Random resized crop: one box for the whole batch, resized back to (h, w).
        area = self._uniform(0.35, 1.0) * h * w
        ratio = math.exp(self._uniform(math.log(3 / 4), math.log(4 / 3)))
        ch = max(2, min(h, int(round(math.sqrt(area / ratio)))))
        cw = max(2, min(w, int(round(math.sqrt(area * ratio)))))
        top, left = int(self._uniform(0, h - ch + 1)), int(self._uniform(0, w - cw + 1))
        x = F.interpolate(x[:, :, top : top + ch, left : left + cw], size=(h, w), mode='bilinear', align_corners=False)
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
        x, y = lam * x + (1 - lam) * x[perm], lam * y + (1 - lam) * y[perm]
        return (x.clamp(0, 1), y) if isinstance(batch, tuple) else [x.clamp(0, 1), y]

    def __repr__(self) -> str:
        return f'Augment(blur={self.blur})'


class RecipeTransform(_Drawn):
    """uint8 → float32, normalised, one random crop (padded by ``image // 8``) and one flip for the whole batch."""

    def __call__(self, batch: Any) -> Any:
        self.calls += 1
        x, y = batch[0], batch[1]
        mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float32).view(1, 3, 1, 1).to(x.device)
        std = torch.tensor(IMAGENET_STD, dtype=torch.float32).view(1, 3, 1, 1).to(x.device)
        x = (x.float() - mean) / std
        h, w = x.shape[-2:]
        pad = max(1, h // 8)
        x = F.pad(x, (pad, pad, pad, pad))
        top, left = (int(v) for v in torch.randint(0, 2 * pad + 1, (2,), generator=self.gen))
        x = x[:, :, top : top + h, left : left + w]
        if bool(torch.rand((), generator=self.gen) < 0.5):
            x = x.flip(-1)
        return (x, y) if isinstance(batch, tuple) else [x, y]

    def __repr__(self) -> str:
        return 'RecipeTransform()'


def pipeline(name: str, size: Size) -> Pipeline:
    """The built-in reference pipeline ``name`` (``augment`` or ``recipe``) at ``size``."""
    if name == 'augment':
        return Pipeline(bench_loader(size), Augment(size.blur), bench_model(), size.microbatch)
    return Pipeline(recipe_loader(size), RecipeTransform(), recipe_model(), size.microbatch)
