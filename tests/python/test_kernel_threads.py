"""Generated kernels split a large call across the kernel team
(TORCH_NEURON_KERNEL_THREADS host threads): flat kernels by elements, row
kernels by rows, column kernels by blocks of columns. A split call gives the
same bits as the call on one thread, and `kernel.split.count` counts it.
"""

import pytest
import torch

import torch_neuron

# name -> (function, input shape)
CASES = {
    "flat": (lambda x: torch.sigmoid(torch.relu(x * 2 + 1) * x), (1024, 1024)),
    "row": (lambda x: torch.softmax(x * 3, dim=-1), (512, 1024)),
    "column": (lambda x: (x * 2 + 1).sum(0), (3000, 1000)),
    # A narrowed input, read through its strides (the flat kernels' strided path).
    "strided": (lambda x: torch.relu(x[:, :1000] * 3 - 1), (1024, 1030)),
}


def run(fn, x, threads):
    """fn on the device with `threads` kernel threads: its result and the
    number of split kernel calls."""
    xn = x.neuron()
    torch_neuron.mark_step()
    torch_neuron.metrics.reset()
    with torch_neuron.config.override(TORCH_NEURON_KERNEL_THREADS=str(threads)):
        out = fn(xn)
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
    return out.cpu(), torch_neuron.metrics.counter("kernel.split.count")


@pytest.mark.parametrize("case", list(CASES))
def test_a_split_call_gives_the_bits_of_one_thread(case):
    fn, shape = CASES[case]
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    one, one_splits = run(fn, x, 1)
    two, two_splits = run(fn, x, 2)
    assert (one_splits, two_splits) == (0, 1)
    if case == "strided":
        assert torch_neuron.metrics.counter("kernel.strided.count") == 1
    assert torch.equal(one, two)
    torch.testing.assert_close(two, fn(x), rtol=1e-5, atol=1e-4)


def test_small_calls_are_not_split():
    fn, _ = CASES["flat"]
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    out, splits = run(fn, x, 2)
    assert splits == 0
    torch.testing.assert_close(out, fn(x))


def test_the_default_is_one_thread_per_core():
    assert torch_neuron.config.parse({})["kernel_threads"] == 0
