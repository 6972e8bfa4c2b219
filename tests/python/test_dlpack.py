"""DLPack of neuron tensors, as CUDA tensors have it (lazy/dlpack.h): the
device PyTorch maps PrivateUse1 to (kDLExtDev, the index), an export that syncs
the tensor and points at its device buffer (host memory of the emulated
device's arena), an import of a neuron capsule that aliases the exported tensor,
and a CPU capsule imported to neuron by a copy, as PyTorch does for every
non-CPU device. Values are compared with the CPU's."""

import ctypes

import numpy as np
import pytest
import torch
from torch.utils.dlpack import DLDeviceType, to_dlpack

import torch_neuron


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def _dl_tensor(capsule) -> _DLTensor:
    """The DLTensor of an unread, unversioned capsule (DLManagedTensor starts with it)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return _DLTensor.from_address(get(capsule, b"dltensor"))


def test_a_neuron_tensor_reports_the_dlpack_device_pytorch_maps_privateuse1_to():
    x = torch.ones(2, device="neuron")
    assert x.__dlpack_device__() == (DLDeviceType.kDLExtDev, 0)
    assert x.__dlpack_device__() == torch._C._torchDeviceToDLDevice(x.device)


def test_the_export_syncs_and_its_buffer_holds_the_values_contiguously():
    cpu = torch.arange(12.0).reshape(3, 4) * 3 - 1
    x = (torch.arange(12.0, device="neuron").reshape(3, 4) * 3 - 1).t()  # pending, transposed
    capsule = to_dlpack(x)
    dl = _dl_tensor(capsule)
    assert (dl.device_type, dl.device_id, dl.ndim) == (DLDeviceType.kDLExtDev, 0, 2)
    assert (dl.code, dl.bits, dl.lanes) == (2, 32, 1)  # kDLFloat, 32 bits
    assert [dl.shape[i] for i in range(2)] == [4, 3]
    assert [dl.strides[i] for i in range(2)] == [3, 1]  # the buffer's logical order
    values = (ctypes.c_float * 12).from_address(dl.data)
    assert list(values) == cpu.t().reshape(-1).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8,
                                   torch.complex64, torch.bool])
def test_a_neuron_capsule_read_back_aliases_the_exported_tensor(dtype):
    cpu = torch.arange(1, 7).reshape(2, 3).to(dtype)
    x = cpu.to("neuron")
    for alias in (torch.asarray(to_dlpack(x)), torch.from_dlpack(x), torch.from_dlpack(to_dlpack(x)),
                  torch.from_dlpack(x.__dlpack__(max_version=(1, 0)))):
        assert alias.device == x.device and alias.dtype == dtype
        assert alias.data_ptr() == x.data_ptr()
        assert torch.equal(alias.cpu(), cpu)
    # A write through the alias reaches the exported tensor, as CUDA's shared memory does.
    alias = torch.asarray(to_dlpack(x))
    alias[0, 1] = cpu[1, 2]
    expected = cpu.clone()
    expected[0, 1] = cpu[1, 2]
    assert torch.equal(x.cpu(), expected)


def test_a_copy_or_another_dtype_from_a_neuron_capsule_is_a_new_tensor():
    cpu = torch.tensor([[1.5, -2.0], [3.25, 4.0]])
    x = cpu.to("neuron")
    copied = torch.asarray(to_dlpack(x), copy=True)
    assert copied.device == x.device and copied.data_ptr() != x.data_ptr()
    assert torch.equal(copied.cpu(), cpu)
    converted = torch.asarray(to_dlpack(x), dtype=torch.int32)
    assert converted.device == x.device and torch.equal(converted.cpu(), torch.asarray(cpu, dtype=torch.int32))
    assert torch.equal(torch.from_dlpack(x, copy=True).cpu(), cpu)
    assert torch.from_dlpack(x, copy=True).data_ptr() != x.data_ptr()


def test_a_capsule_is_read_once_as_pytorchs_are():
    capsule = to_dlpack(torch.ones(2, device="neuron"))
    torch.from_dlpack(capsule)
    with pytest.raises(RuntimeError) as neuron_error:
        torch.from_dlpack(capsule)
    cpu_capsule = to_dlpack(torch.ones(2))
    torch.from_dlpack(cpu_capsule)
    with pytest.raises(RuntimeError) as cpu_error:
        torch.from_dlpack(cpu_capsule)
    assert str(neuron_error.value) == str(cpu_error.value)


def test_a_cpu_capsule_comes_to_neuron_as_a_copy():
    cpu = torch.arange(5.0)
    moved = torch.from_dlpack(cpu, device="neuron")
    assert moved.device.type == "neuron" and torch.equal(moved.cpu(), cpu)
    moved[0] = 7
    assert cpu[0] == 0  # a copy, as for CUDA
    assert torch.equal(torch.asarray(to_dlpack(cpu), device="neuron").cpu(), cpu)


def test_export_to_the_cpu_device_is_a_cpu_copy():
    cpu = torch.tensor([1.0, 2.0, 3.0])
    x = cpu.to("neuron")
    assert torch.equal(torch.from_dlpack(x, device="cpu"), cpu)
    assert np.array_equal(np.from_dlpack(x, device="cpu"), cpu.numpy())
    with pytest.raises(BufferError, match="cannot move tensor from neuron:0 to cpu without copying"):
        x.__dlpack__(dl_device=(DLDeviceType.kDLCPU, 0), copy=False)


def test_export_refusals_are_the_cpus():
    for device in ("cpu", "neuron"):
        with pytest.raises(BufferError, match=r"^Can't export tensors that require gradient, use tensor.detach\(\)$"):
            torch.ones(2, device=device, requires_grad=True).__dlpack__()
        with pytest.raises(TypeError, match="stream must be ``int`` or ``none``"):
            torch.ones(2, device=device).__dlpack__(stream="s")


def test_asarray_of_a_tensor_keeps_its_own_defaults():
    # torch.asarray reads neuron capsules through torch_neuron's replacement;
    # for every other input it must act as PyTorch's own (requires_grad=None
    # keeps a tensor's own flag).
    for device in ("cpu", "neuron"):
        t = torch.ones(2, device=device, requires_grad=True)
        assert torch.asarray(t).requires_grad is True
        assert torch.asarray(t).data_ptr() == t.data_ptr()
        assert torch.asarray(t, requires_grad=False).requires_grad is False
        assert torch.asarray(t, dtype=torch.float64).dtype == torch.float64
