"""A CPU fake accelerator for Composer, so that device placement is observable on a machine with no GPU.

:class:`FakeAcceleratorDevice` is a Composer ``Device`` (a ``DeviceCPU`` subclass) whose ``tensor_to_device`` returns
a *copy* of the tensor as a :class:`FakeAcceleratorTensor`. The tag is the tensor's type, not its address, so it
survives views, slices, ``torch.cat`` and arithmetic, and cannot be fooled by the allocator reusing a freed address.
``.cpu()`` brings a tensor back to the host as a plain tensor.

Use :func:`placement` to ask where a batch is, on the fake or on a real cuda/mps device::

    from compatshim.testing import FakeAcceleratorDevice, placement
    trainer = Trainer(..., device=FakeAcceleratorDevice())
    def probe(batch):
        assert placement(batch) == 'device'
        return batch

This module imports torch and Composer; import it only in tests.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from composer.devices import DeviceCPU, DeviceGPU

from compatshim._recorder import Tap, is_on_device, placement

__all__ = [
    'FakeAcceleratorDevice',
    'FakeAcceleratorTensor',
    'FakeAutoMicrobatchDevice',
    'PlacementProbe',
    'is_on_device',
    'observable_device',
    'placement',
]


class FakeAcceleratorTensor(torch.Tensor):
    """A host tensor tagged as living on the fake accelerator. Results of torch ops on it keep the tag."""

    _compatshim_on_accelerator = True  # what compatshim._recorder.is_on_device looks for

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Optional[dict[str, Any]] = None) -> Any:
        if func is torch.Tensor.cpu or func is torch.Tensor.numpy:
            with torch._C.DisableTorchFunctionSubclass():
                plain = args[0].clone()
            return plain if func is torch.Tensor.cpu else plain.numpy()
        return super().__torch_function__(func, types, args, kwargs or {})  # type: ignore[no-untyped-call]

    def __deepcopy__(self, memo: dict[int, Any]) -> FakeAcceleratorTensor:
        with torch._C.DisableTorchFunctionSubclass():
            copy = self.detach().clone()
        result = copy.as_subclass(FakeAcceleratorTensor)
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, protocol: Any) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            return (_to_fake, (self.detach().clone(),))

    # torch declares Tensor.__repr__ untyped (``*, tensor_contents=None``); this override keeps its call shape.
    def __repr__(self, **kwargs: Any) -> str:  # type: ignore[override]
        with torch._C.DisableTorchFunctionSubclass():
            return f'FakeAccelerator{torch.Tensor.__repr__(self, **kwargs)}'  # type: ignore[no-untyped-call]


def _to_fake(tensor: torch.Tensor) -> torch.Tensor:
    if isinstance(tensor, FakeAcceleratorTensor):
        return tensor
    return tensor.detach().clone().as_subclass(FakeAcceleratorTensor)


class _MovesToFake:
    """``tensor_to_device`` for the fake devices: copy to a :class:`FakeAcceleratorTensor`."""

    def tensor_to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return _to_fake(tensor)


class FakeAcceleratorDevice(_MovesToFake, DeviceCPU):
    """Composer's CPU device, except that batches it moves become :class:`FakeAcceleratorTensor` copies.

    Moving an already-moved tensor is a no-op, as ``.to('cuda')`` is on a cuda tensor. Modules stay plain (the
    tag marks what was *moved*, which is what placement tests check).
    """

    name = 'fake'


class FakeAutoMicrobatchDevice(_MovesToFake, DeviceGPU):
    """The fake accelerator dressed as a GPU, so that ``device_train_microbatch_size='auto'`` is allowed on CPU.

    Composer only permits ``'auto'`` on a ``DeviceGPU``. This class passes that ``isinstance`` check without touching
    CUDA: use it with ``precision='fp32'`` and a model that raises ``RuntimeError('CUDA out of memory')`` to drive the
    out-of-memory retry path.
    """

    dist_backend = 'gloo'
    name = 'fake-gpu'

    def __init__(self) -> None:
        self._device = torch.device('cpu')

    def module_to_device(self, module: Any) -> Any:
        return module.to(self._device)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def observable_device(device: str) -> Any:
    """A Composer Device on which placement is observable: the fake accelerator for ``cpu``, else the real one.

    Args:
        device: ``cpu``, ``cuda`` or ``mps`` (:data:`compatshim._accelerator.ACCELERATORS`).
    """
    from compatshim._accelerator import accelerator

    return accelerator(device).observable_device()


class PlacementProbe(Tap):
    """A transform wrapper that records where each call saw its batch (see :func:`compatshim.testing.placement`): the
    recorder of :mod:`compatshim._recorder` (a :class:`~compatshim._recorder.Tap`), with every call's placement kept
    in :attr:`seen`.

    Args:
        transform: The transform to wrap (called with the batch; its result is returned).
    """

    seen: list[str]

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        super().__init__(transform, keep=True)

    def assert_on_device(self) -> None:
        """Fail unless the transform was called, and every call saw its whole batch on the device."""
        name = self.__qualname__
        if not self.seen:
            raise AssertionError(
                f'{name} was never called (on Composer 0.27–0.28 device_transforms is dropped without the shim)'
            )
        wrong = sorted(set(self.seen) - {'device'})
        if wrong:
            raise AssertionError(
                f'{name} saw its batch on the {"/".join(wrong)} in {len(self.seen) - self.seen.count("device")} '
                f'of {len(self.seen)} calls, expected the device (is the shim enabled? '
                'pytest --compatshim=batch)'
            )
