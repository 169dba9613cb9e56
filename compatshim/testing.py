"""A CPU fake accelerator for Composer, so that device placement is observable on a machine with no GPU
(docs/testing.md): :class:`FakeAcceleratorDevice` moves tensors as :class:`FakeAcceleratorTensor` copies, tagged by
type, not by address, so that the tag survives views, slices and ops (``.cpu()`` brings one back plain);
:func:`placement` says where a batch is, on the fake or on a real cuda/mps device. Imports torch and Composer.
"""

from __future__ import annotations

from typing import Any, Callable

from compatshim.devices.accelerator import accelerator
from compatshim.devices.fake import FakeAcceleratorDevice, FakeAcceleratorTensor, FakeAutoMicrobatchDevice
from compatshim.observe.placement import Placement
from compatshim.observe.recorder import Tap, is_on_device, placement

__all__ = [
    'FakeAcceleratorDevice', 'FakeAcceleratorTensor', 'FakeAutoMicrobatchDevice', 'PlacementProbe', 'is_on_device',
    'observable_device', 'placement',
]  # fmt: skip


def observable_device(device: str) -> Any:
    """A Composer Device on which placement is observable: the fake accelerator for ``cpu``, else the real one
    (``cuda``, ``mps``)."""
    return accelerator(device).observable_device()


class PlacementProbe(Tap):
    """A transform wrapper that records where each call saw its batch (:func:`placement`) in :attr:`seen`; called
    with the batch, it returns what ``transform`` returns."""

    seen: list[Placement]

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        super().__init__(transform, keep=True)

    def assert_on_device(self) -> None:
        """Fail unless the transform was called, and every call saw its whole batch on the device."""
        name = self.__qualname__
        if not self.seen:
            raise AssertionError(
                f'{name} was never called (on Composer 0.27–0.28 device_transforms is dropped without the shim)'
            )
        wrong = sorted(str(p) for p in set(self.seen) - {Placement.DEVICE})
        if wrong:
            off = len(self.seen) - self.seen.count(Placement.DEVICE)
            raise AssertionError(
                f'{name} saw its batch on the {"/".join(wrong)} in {off} '
                f'of {len(self.seen)} calls, expected the device (is the shim enabled? '
                'pytest --compatshim=batch)'
            )
