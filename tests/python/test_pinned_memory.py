"""Pinned host memory, as DataLoader(pin_memory=True) and tensor.pin_memory()
use it: it once silently did nothing (is_pinned() stayed False). Pinned
tensors come from the device's pinned host allocator, say so, and copy to
neuron (non_blocking too) with their values."""

import torch
from torch.utils.data import DataLoader, TensorDataset


def test_pin_memory_pins_and_copies_to_neuron():
    host = torch.arange(12.0).view(3, 4)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and not host.is_pinned()
    assert torch.equal(pinned, host)
    for non_blocking in (False, True):
        on_device = pinned.to("neuron", non_blocking=non_blocking)
        torch.neuron.synchronize()
        assert torch.equal(on_device.cpu(), host)
    assert not pinned.to("neuron").cpu().is_pinned()  # a read-back is ordinary memory


def test_dataloader_pin_memory_gives_pinned_batches():
    data = TensorDataset(torch.randn(10, 3), torch.arange(10))
    batches = list(DataLoader(data, batch_size=4, pin_memory=True))
    assert len(batches) == 3
    for x, y in batches:
        assert x.is_pinned() and y.is_pinned()
    x = torch.cat([b[0] for b in batches])
    assert torch.equal(x.to("neuron").cpu(), data.tensors[0])
