"""The CPU fake accelerator's tensor and devices (:mod:`compatshim.testing` is their public home). Imports torch and
Composer."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Callable, Optional

import torch
from composer.devices import DeviceCPU, DeviceGPU
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves, tree_map

__all__ = ['FakeAcceleratorDevice', 'FakeAcceleratorTensor', 'FakeAutoMicrobatchDevice', 'following_the_tag']

#: ``x.device`` of a tensor on the fake accelerator: the host's, as one object that :func:`following_the_tag` knows.
FAKE_DEVICE = torch.device('cpu')


class FakeAcceleratorTensor(torch.Tensor):
    """A host tensor tagged as living on the fake accelerator; results of torch ops on it keep the tag."""

    _compatshim_on_accelerator = True  # what compatshim.observe.recorder.is_on_device looks for

    @property
    def device(self) -> torch.device:  # type: ignore[override]  # torch's is a C attribute; the same value here
        return FAKE_DEVICE

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


class _FollowsTheTag(TorchFunctionMode):
    """Tags what a torch call makes on :data:`FAKE_DEVICE` (``device=`` or an argument) as on the fake accelerator."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Optional[dict[str, Any]] = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if kwargs.get('device') is FAKE_DEVICE or any(arg is FAKE_DEVICE for arg in args):
            return tree_map(_tagged_leaf, out)
        return out


def _tagged(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if isinstance(tensor, FakeAcceleratorTensor) else tensor.as_subclass(FakeAcceleratorTensor)


def following_the_tag(transform: Callable[[Any], Any], traced: bool = False) -> Callable[[Any], Any]:
    """``transform``, run so that a tensor it makes on its batch's device (``y.to(x.device)``, ``torch.zeros(...,
    device=x.device)``) is on the fake accelerator too, as on a GPU, not a host tensor whose next move counts as bytes
    that crossed. A rebuilt ``torch.device(str(x.device))`` is the host's: the tag follows the object. ``traced``
    (``torch.compile``: Dynamo does not trace a tensor subclass): the call gets plain tensors, and what it returns is
    tagged where the batch was on the device (read before the call, as placement is), a tensor made on the host too."""

    @functools.wraps(transform)
    def follows(batch: Any) -> Any:
        if traced:
            plain = tree_map(_plain_leaf, batch)
            if any(a is not b for a, b in zip(tree_leaves(batch), tree_leaves(plain))):
                return tree_map(_tagged_leaf, transform(plain))
            if not _holds_tag(batch):  # a host batch
                return transform(plain)
        with _FollowsTheTag():  # untraced, or a container torch's pytree does not open (a tuple subclass)
            return transform(batch)

    return follows


def _holds_tag(batch: Any) -> bool:
    """Whether ``batch`` holds a tagged tensor where Composer's ``batch_to_device`` looks (a tuple subclass too)."""
    if isinstance(batch, FakeAcceleratorTensor):
        return True
    inside = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
    return any(_holds_tag(item) for item in inside)


def _plain_leaf(leaf: Any) -> Any:
    return leaf.as_subclass(torch.Tensor) if isinstance(leaf, FakeAcceleratorTensor) else leaf


def _tagged_leaf(leaf: Any) -> Any:
    return _tagged(leaf) if isinstance(leaf, torch.Tensor) else leaf


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
