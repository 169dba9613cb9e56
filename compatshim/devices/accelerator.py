"""The accelerators compatshim runs on, one value each: the CPU fake accelerator (``cpu``), ``cuda`` and ``mps``.

An :class:`Accelerator` carries what differs between them, so that no caller dispatches on a device's name. Importing
this module imports nothing heavy; torch and Composer are imported by the methods that need them.
"""

from __future__ import annotations

import platform
import time
from typing import Any, Callable, Optional

from compatshim.config.support import DEVICES

__all__ = ['ACCELERATORS', 'HOST', 'Accelerator', 'accelerator', 'best_present', 'of_device', 'on_accelerator_memory']


class Accelerator:
    """The CPU fake accelerator: tensors stay on the host, marked as on the device, so placement and bytes are real;
    times are this process's CPU time (the legs run on the host, and time given to other processes does not count).
    ``name``: its entry of :data:`~compatshim.config.support.DEVICES`."""

    #: Composer's own name for its device (``Device.name``).
    composer_name = 'cpu'
    #: Whether it is the host itself (the CPU fake accelerator).
    is_host = True
    #: torch's intra-op threads while a bench runs on it (``None``: left as they are). One on the host, as
    #: ``torch.utils.benchmark`` runs: a pool with a thread per core spins while another process has the core.
    threads: Optional[int] = 1

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def label(self) -> str:
        """How a person is told which device a check ran on."""
        return f'fake accelerator ({self.name})' if self.is_host else self.name

    def absent(self) -> Optional[str]:
        """Why torch cannot use it here (``None``: it can)."""
        return None

    def synchronize(self) -> None:
        """Wait for the device (nothing to wait for on the host)."""

    def clock(self) -> Callable[[], float]:
        """What a bench window is timed with."""
        return time.process_time

    def composer_device(self) -> Any:
        """Composer's own ``Device`` (plain ``DeviceCPU`` here: what the timed legs run on)."""
        from composer.devices import DeviceCPU

        return DeviceCPU()

    def observable_device(self) -> Any:
        """A Composer ``Device`` on which placement is observable (the fake accelerator here)."""
        from compatshim.devices.fake import FakeAcceleratorDevice

        return FakeAcceleratorDevice()

    def event(self) -> Optional[Callable[[], Any]]:
        """How to make a timing event on it (``None``: a transform is timed in the host's CPU time)."""
        return None

    def following(self, transform: Callable[[Any], Any], traced: bool = False) -> Callable[[Any], Any]:
        """``transform`` as it runs on :meth:`observable_device`, a tensor it makes on its batch's device on the device
        too, as on a GPU (:func:`compatshim.devices.fake.following_the_tag`); ``traced``: it is ``torch.compile``d."""
        from compatshim.devices.fake import following_the_tag

        return following_the_tag(transform, traced)

    def observes(self, device: Any) -> bool:
        """Whether placement and bytes to the device can be observed on Composer ``device``: not on plain
        ``DeviceCPU``, where host and device are one."""
        from compatshim.devices.fake import _MovesToFake

        return isinstance(device, _MovesToFake)

    def hardware(self) -> dict[str, Any]:
        """What a result's fingerprint says of the hardware beyond the host."""
        return {'gpu': None}

    def __repr__(self) -> str:
        return f'Accelerator({self.name!r})'


class _Cuda(Accelerator):
    """An NVIDIA GPU: wall-clock windows, the device synchronised at their edges; CUDA events for a transform."""

    composer_name, threads, is_host = 'gpu', None, False

    def absent(self) -> Optional[str]:
        import torch

        return None if torch.cuda.is_available() else 'torch.cuda.is_available() is False'

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def clock(self) -> Callable[[], float]:
        return time.perf_counter

    def composer_device(self) -> Any:
        from composer.devices import DeviceGPU

        return DeviceGPU()

    def observable_device(self) -> Any:
        return self.composer_device()

    def following(self, transform: Callable[[Any], Any], traced: bool = False) -> Callable[[Any], Any]:
        return transform  # a real device: a tensor made on it is on it

    def event(self) -> Optional[Callable[[], Any]]:
        import torch

        if not torch.cuda.is_available():
            return None
        return lambda: torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def hardware(self) -> dict[str, Any]:
        import torch

        return {'gpu': torch.cuda.get_device_name(), 'cuda': torch.version.cuda}

    def observes(self, device: Any) -> bool:
        return True


class _Mps(_Cuda):
    """Apple's GPU: as cuda, with ``torch.mps``'s synchronisation and events (where torch has them)."""

    composer_name = 'mps'

    def absent(self) -> Optional[str]:
        import torch

        mps = getattr(torch.backends, 'mps', None)
        return None if mps is not None and mps.is_available() else 'torch.backends.mps.is_available() is False'

    def synchronize(self) -> None:
        import torch

        torch.mps.synchronize()

    def composer_device(self) -> Any:
        from composer.devices import DeviceMPS

        return DeviceMPS()

    def event(self) -> Optional[Callable[[], Any]]:
        import torch

        event = getattr(getattr(torch, 'mps', None), 'Event', None)
        return None if event is None else lambda: event(enable_timing=True)

    def hardware(self) -> dict[str, Any]:
        return {'gpu': f'Apple MPS ({platform.machine()})'}


_KINDS: tuple[type[Accelerator], ...] = (Accelerator, _Cuda, _Mps)
if len(_KINDS) != len(DEVICES):  # the one list of device names is the support table's device factor
    raise RuntimeError(f'compatshim: {len(DEVICES)} devices named in the support table, {len(_KINDS)} accelerators')
#: Every accelerator, by the name ``--device`` gives: :data:`~compatshim.config.support.DEVICES`, in that order.
ACCELERATORS: dict[str, Accelerator] = {name: kind(name) for name, kind in zip(DEVICES, _KINDS)}
#: The host's own: the CPU fake accelerator.
HOST: Accelerator = next(found for found in ACCELERATORS.values() if found.is_host)


def best_present() -> Accelerator:
    """The first real accelerator torch finds here (cuda, then mps), else the CPU fake accelerator."""
    return next((found for found in ACCELERATORS.values() if not found.is_host and found.absent() is None), HOST)


def on_accelerator_memory(tensor: Any) -> bool:
    """Whether torch keeps ``tensor`` anywhere but in host memory (cuda, mps, xla, ...): ``is_cpu``, not
    ``tensor.device.type``, which makes a device object (0.5 µs a tensor)."""
    return not tensor.is_cpu


def accelerator(name: str) -> Accelerator:
    """The accelerator called ``name`` (else a ``ValueError`` that lists those there are)."""
    if name not in ACCELERATORS:
        raise ValueError(f'unknown device {name!r}; choose one of {", ".join(ACCELERATORS)}')
    return ACCELERATORS[name]


def of_device(device: Any) -> Accelerator:
    """The accelerator a Composer ``Device`` runs on (by its ``name``; anything else is the host's)."""
    name = getattr(device, 'name', HOST.composer_name)
    return next((found for found in ACCELERATORS.values() if found.composer_name == name), HOST)
