"""A user's pipeline module, as ``compatshim bench --pipeline uint8_pipeline:pipeline`` imports it: it never imports
compatshim and returns a plain mapping. uint8 NCHW images from a collate, normalised (mean/std in 0-255 units) and
cropped on the device, as MosaicML's ImageNet recipe does.

The tests plant regressions through the environment: ``PIPELINE_SLOWER=N`` makes the transform do its work N times
(``2``: 2x slower, where it is about 40% of the step), ``PIPELINE_FLOAT32=1`` makes the collate yield float32 (4x the
bytes), ``PIPELINE_HEAVIER=1`` adds one op over a tenth of the batch (about 10% more work). ``PIPELINE_MASKS``
adds a flip per sample, its masks drawn by torch (``torch``) or by numpy (``numpy``: work torch cannot count), or a
flip of the whole batch with probability one half (``coin``: work that depends on the draws), or a loop over the
samples that flips and scales each by Python's global ``random`` (``python``: the timm/albumentations style).
``PIPELINE_COMPILED=1`` hands the bench the transform ``torch.compile``d (Dynamo's ``eager`` backend: no compiler);
``PIPELINE_DRAWS=N`` makes the collate draw N numbers from Python's ``random`` (a logger's, a lazy import's).
"""

import os
import random

import torch
from torch.utils.data import DataLoader, TensorDataset

MEAN = torch.tensor([0.485 * 255, 0.456 * 255, 0.406 * 255]).view(1, 3, 1, 1)
STD = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255]).view(1, 3, 1, 1)


def collate(samples):
    for _ in range(int(os.environ.get('PIPELINE_DRAWS', '0'))):  # what a logger or a lazy import may draw
        random.random()
    images = torch.stack([image for image, _ in samples])
    labels = torch.stack([label for _, label in samples]).to(torch.int64)
    if os.environ.get('PIPELINE_FLOAT32') == '1':
        images = images.float()
    return images, labels


class Normalize:
    """uint8 -> float32, normalised, one random crop for the whole batch (one draw per call)."""

    def __init__(self, repeat=1):
        self.repeat = repeat
        self.gen = torch.Generator().manual_seed(0)
        self.masks = os.environ.get('PIPELINE_MASKS', '')
        if self.masks == 'numpy':
            import numpy

            self.state = numpy.random.RandomState(0)

    def __call__(self, batch):
        x, y = batch
        for _ in range(self.repeat):
            out = (x.float() - MEAN.to(x.device)) / STD.to(x.device)
            out = torch.nn.functional.pad(out, (4, 4, 4, 4))
            top, left = (int(v) for v in torch.randint(0, 9, (2,), generator=self.gen))
            out = out[:, :, top : top + x.shape[-2], left : left + x.shape[-1]]
            out = torch.nn.functional.avg_pool2d(out, 3, stride=1, padding=1)
            if os.environ.get('PIPELINE_HEAVIER') == '1':
                out[: max(1, len(out) // 10)].mul_(1.0)
            if self.masks in ('torch', 'numpy'):
                drawn = torch.rand(len(out), generator=self.gen) if self.masks == 'torch' else self.state.rand(len(out))
                flip = torch.as_tensor(drawn < 0.5).to(out.device)[:, None, None, None]
                out = torch.where(flip, out.flip(-1), out)
            elif self.masks == 'coin' and torch.rand((), generator=self.gen) < 0.5:
                out = out.flip(-1) + 0
            elif self.masks == 'python':
                samples = [s.flip(-1) if random.random() < 0.5 else s for s in out]
                out = torch.stack([s * random.uniform(0.9, 1.1) if random.random() < 0.5 else s for s in samples])
        return out, y


def pipeline():
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (256, 3, 48, 48), generator=gen, dtype=torch.uint8)
    labels = torch.randint(0, 10, (256,), generator=gen)
    loader = DataLoader(TensorDataset(images, labels), batch_size=32, collate_fn=collate, drop_last=True)
    transform = Normalize(int(os.environ.get('PIPELINE_SLOWER', '1')))
    if os.environ.get('PIPELINE_COMPILED') == '1':
        transform = torch.compile(transform, backend='eager')
    return {'dataloader': loader, 'transform': transform, 'microbatch_size': 16}
