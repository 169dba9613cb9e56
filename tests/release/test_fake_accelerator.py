"""The CPU fake accelerator makes placement observable, and cannot be fooled the way a ``data_ptr`` spy was."""

from __future__ import annotations

import copy
import gc
import pickle

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
