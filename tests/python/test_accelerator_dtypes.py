"""Ops that libraries call with dtypes an accelerator takes and the CPU's
kernel does not. transformers' mixture-of-experts routing counts tokens per
expert with torch.histc on int32 on any device but the CPU and MPS (as CUDA
allows); the emulated device runs ATen's CPU kernels, so the graph once failed
with '"histogram_cpu" not implemented for Int'. Such an op runs on a wider
dtype and returns what CUDA returns."""

import pytest
import torch

import torch_neuron  # noqa: F401


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int16, torch.bool])
def test_histc_of_integers_counts_like_cuda(dtype):
    values = torch.tensor([0, 3, 3, 1, 7, 2, 3, 9, 5, 5, 0], dtype=torch.int64)
    if dtype == torch.bool:
        values = values % 2
    values = values.to(dtype)
    bins, low, high = (2, 0, 1) if dtype == torch.bool else (8, 0, 7)
    counts = torch.histc(values.to("neuron"), bins=bins, min=low, max=high)
    assert counts.dtype == dtype  # CUDA counts in the input's dtype
    expected = torch.histc(values.double(), bins=bins, min=low, max=high).to(dtype)
    assert torch.equal(counts.cpu(), expected)  # 9 is outside [0, 7]: not counted


def test_histc_of_floats_is_unchanged():
    x = torch.randn(100)
    torch.testing.assert_close(torch.histc(x.to("neuron"), bins=7, min=-2, max=2).cpu(),
                               torch.histc(x, bins=7, min=-2, max=2))
