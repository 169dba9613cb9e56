"""The device under test, chosen by ``COMPATSHIM_TEST_DEVICE`` (cpu: the fake accelerator; cuda; mps)."""

from __future__ import annotations

import os
from typing import Any

DEVICE = os.environ.get('COMPATSHIM_TEST_DEVICE', 'cpu')


def _device_missing() -> str | None:
    import torch

    if DEVICE == 'cpu':
        return None
    if DEVICE == 'cuda':
        return (
            None if torch.cuda.is_available() else 'COMPATSHIM_TEST_DEVICE=cuda, but torch.cuda.is_available() is False'
        )
    if DEVICE == 'mps':
        available = getattr(torch.backends, 'mps', None) is not None and torch.backends.mps.is_available()
        return None if available else 'COMPATSHIM_TEST_DEVICE=mps, but torch.backends.mps.is_available() is False'
    return f'unknown COMPATSHIM_TEST_DEVICE={DEVICE!r}; choose cpu, cuda or mps'


DEVICE_MISSING = _device_missing()


def make_device(auto_microbatching: bool = False) -> Any:
    """A fresh Composer Device for the device under test."""
    from compatshim.testing import FakeAutoMicrobatchDevice, observable_device

    if DEVICE == 'cpu' and auto_microbatching:
        return FakeAutoMicrobatchDevice()
    return observable_device(DEVICE)
