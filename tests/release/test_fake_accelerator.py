"""The CPU fake accelerator makes placement observable, and cannot be fooled the way a ``data_ptr`` spy was."""

from __future__ import annotations

import copy
import gc
import pickle
import types

import pytest
import torch

from compatshim.testing import FakeAcceleratorDevice, FakeAcceleratorTensor, is_on_device, placement

pytestmark = pytest.mark.python


def test_moved_tensors_views_slices_and_results_stay_tagged() -> None:
    device = FakeAcceleratorDevice()
    x = device.tensor_to_device(torch.arange(12.0).reshape(3, 4))
    assert isinstance(x, FakeAcceleratorTensor)
    for derived in (x[1:], x[:, 0], x.view(4, 3), x.T, x * 2, torch.cat([x, x]), x.float(), x.clone()):
        assert is_on_device(derived), type(derived)
    assert device.tensor_to_device(x) is x  # moving twice is a no-op, as .to('cuda') is on a cuda tensor
    assert not is_on_device(x.cpu()) and type(x.cpu()) is torch.Tensor


def test_placement_of_structures() -> None:
    device = FakeAcceleratorDevice()
    host = torch.ones(2)
    moved = device.batch_to_device({'a': [host, host], 'b': (host, 'text', 3)})
    assert placement(moved) == 'device'
    assert placement({'a': host}) == 'host'
    assert placement([moved['a'][0], host]) == 'mixed'
    assert placement({'meta': 'x'}) == 'empty'


def test_a_mapping_of_any_kind_is_searched_as_composer_moves_it() -> None:
    """Hugging Face's ``BatchEncoding`` is a ``UserDict``, not a ``dict``: its tensors are found, as Composer's
    ``batch_to_device`` finds them (it was ``empty``, and the monitor warned of a batch 'on the empty')."""
    import collections

    device = FakeAcceleratorDevice()
    batch = collections.UserDict({'input_ids': torch.ones(2, 3), 'mask': torch.ones(2, 3)})
    assert placement(batch) == 'host'
    assert placement(collections.UserDict(device.batch_to_device(dict(batch)))) == 'device'


def test_not_fooled_by_address_reuse() -> None:
    """A freed moved tensor's address reused by the next host batch must not make that batch look moved."""
    device = FakeAcceleratorDevice()
    addresses = set()
    for _ in range(50):
        moved = device.tensor_to_device(torch.randn(256))
        addresses.add(moved.data_ptr())
        del moved  # freed by its reference count (a young collection for safety: a full one costs 0.2 s here)
        gc.collect(0)
        host = torch.randn(256)
        if host.data_ptr() in addresses:
            break
    assert not is_on_device(host)


def test_copy_and_pickle_keep_the_tag() -> None:
    x = FakeAcceleratorDevice().tensor_to_device(torch.ones(3))
    for clone in (copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
        assert is_on_device(clone) and torch.equal(clone.cpu(), torch.ones(3))


def test_the_tag_follows_a_tensor_made_on_x_device() -> None:
    """Issue 46: a transform that rebuilt a tensor with ``.to(x.device)`` lost the tag, and shim-batch reported 393 KB
    of float32 "to the device" that would not cross on a GPU. A result of ``x`` keeps the tag; a tensor made on
    ``x.device`` keeps it under ``following_the_tag`` (what the bench's checked legs run), a host tensor does not."""
    from compatshim.devices.fake import following_the_tag

    x = FakeAcceleratorDevice().tensor_to_device(torch.ones(2, 3))
    assert x.device == torch.device('cpu') and str(x.device) == 'cpu'
    for kept in (x.to(x.device), torch.empty_like(x), x.new_tensor([1.0]), x.new_zeros(3), torch.zeros_like(x)):
        assert is_on_device(kept), type(kept)

    def made_on_x_device(x: torch.Tensor) -> list[torch.Tensor]:
        return [
            torch.ones(2).to(x.device),
            torch.ones(2).to(device=x.device),
            torch.zeros(2, device=x.device),
            torch.from_numpy(x.numpy()).to(x.device),
        ]

    assert not any(is_on_device(t) for t in made_on_x_device(x))
    assert all(is_on_device(t) for t in following_the_tag(made_on_x_device)(x))
    assert not is_on_device(following_the_tag(lambda x: torch.ones(2).to('cpu'))(x))


def test_a_compiled_transform_is_traced_on_plain_tensors_and_its_results_are_where_its_batch_was() -> None:
    """Issue 59: Dynamo does not trace the fake accelerator's tensor subclass (it ran the compiled function eagerly
    here; on other torch releases it raised), so a ``torch.compile``d transform was never measured as compiled on the
    device's legs. Traced, the call gets plain tensors (the backend sees no subclass) and what it returns is tagged
    where the batch was on the device, left plain where it was not; where it was is read before, as placement is."""
    from compatshim.bench.work import compiled
    from compatshim.devices.fake import following_the_tag

    given: list[list[type]] = []

    def backend(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> object:
        given.append([type(t) for t in inputs])
        return graph.forward

    @torch.compile(backend=backend)
    def scale(x: torch.Tensor) -> torch.Tensor:
        return torch.flip(x * 2, (0,))

    def transform(batch: tuple[torch.Tensor, str]) -> tuple[torch.Tensor, str]:
        return scale(batch[0]), batch[1]

    x = FakeAcceleratorDevice().tensor_to_device(torch.arange(4.0))
    out, label = following_the_tag(transform, traced=True)((x, 'label'))
    assert given == [[torch.Tensor]] and is_on_device(out) and label == 'label'
    following_the_tag(transform)((x * 1, 'label'))  # the control: handed the subclass, Dynamo runs it eagerly (torch
    assert [torch.Tensor] not in given[1:]  # 2.4) or traces the subclass (2.7+), never the plain code as on a GPU
    assert torch.equal(out.as_subclass(torch.Tensor), torch.tensor([6.0, 4.0, 2.0, 0.0]))
    assert not is_on_device(following_the_tag(transform, traced=True)((torch.arange(4.0), ''))[0])  # a host batch

    class Pair(tuple):  # a container torch's pytree does not open: the tag followed as for any transform
        pass

    assert is_on_device(following_the_tag(lambda batch: batch[0] + 1, traced=True)(Pair((x, 'label'))))
    assert compiled(transform) and compiled(scale) and compiled(torch.compile(torch.nn.Identity(), backend=backend))
    assert not compiled(lambda batch: batch) and not compiled(copy.deepcopy)
    assert not compiled(torch.compiler.disable(lambda batch: batch))  # marked by Dynamo, never compiled
    beside = types.ModuleType('beside')  # a compiled model at the top of the transform's module is not its own
    exec('import torch\nmodel = torch.compile(torch.nn.Identity(), backend="eager")\n'
         'def plain(batch):\n    return batch\ndef uses(batch):\n    return model(batch)\n', vars(beside))  # fmt: skip
    assert not compiled(beside.plain) and compiled(beside.uses)
