"""The device under test, chosen by ``COMPATSHIM_TEST_DEVICE`` (cpu: the fake accelerator; cuda; mps)."""

from __future__ import annotations

import functools
import os
from typing import Any, Optional

DEVICE = os.environ.get('COMPATSHIM_TEST_DEVICE', 'cpu')


@functools.cache
def device_missing() -> Optional[str]:
    """Why the device under test is absent here (with the command that runs its tests), or ``None``."""
    if DEVICE == 'cpu':
        return None
    import torch

    if DEVICE == 'cuda':
        present = torch.cuda.is_available()
    elif DEVICE == 'mps':
        present = getattr(torch.backends, 'mps', None) is not None and torch.backends.mps.is_available()
    else:
        return f'unknown COMPATSHIM_TEST_DEVICE={DEVICE!r}; choose cpu, cuda or mps'
    if present:
        return None
    check = 'torch.cuda.is_available()' if DEVICE == 'cuda' else 'torch.backends.mps.is_available()'
    return f'COMPATSHIM_TEST_DEVICE={DEVICE}, but {check} is False here: run the {DEVICE} envs on a machine with one'


def make_device(auto_microbatching: bool = False) -> Any:
    """A fresh Composer Device for the device under test."""
    from compatshim.testing import FakeAutoMicrobatchDevice, observable_device

    if DEVICE == 'cpu' and auto_microbatching:
        return FakeAutoMicrobatchDevice()
    return observable_device(DEVICE)
