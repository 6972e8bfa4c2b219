"""The signature cache of neuron's CPU-parity Meta kernels of pointwise in-place
and out= ops (csrc/lazy/cpu_parity.h).

Neuron checks every in-place op on meta copies of its arguments before it
traces the op (csrc/lazy/neuron_inplace.h), and every out= op before it writes
(csrc/lazy/out_checks.cc). A signature (dtypes, sizes, strides, number types,
integer values) that passed the checks once is not checked again, and neither
the checks nor the op's own (Python) Meta kernel run; anything else is checked
as before: new signatures, bad ones (every time). Meta and fake tensors never
reach the cache: they keep PyTorch's own Meta kernels.
"""

import threading

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import torch_neuron
from python_calls import python_calls as calls_in


def memo_counts():
    c = torch_neuron.metrics.counters()
    return c.get("trace.cpu_parity.hit.count", 0), c.get("trace.cpu_parity.miss.count", 0)


def python_calls(fn):
    """The Python functions that run in fn(), by name, but fn's own."""
    return calls_in(fn, lambda filename: filename != __file__)


def test_the_cache_is_neurons_meta_kernel_of_pointwise_in_place_and_out_ops_and_not_the_meta_keys():
    for op in ("aten::add_.Tensor", "aten::mul_.Scalar", "aten::addcmul_", "aten::mul.out"):
        assert op in torch_neuron._C._neuron_meta_ops()
        meta = torch._C._dispatch_dump(op).split("\nMeta: ")[1].splitlines()[0]
        assert "torch_neuron" not in meta and "cpu_parity.cc" not in meta, (op, meta)


def test_a_repeated_in_place_signature_runs_no_python_and_matches_the_cpu():
    gen = torch.Generator().manual_seed(0)
    x, y, z = (torch.randn(4, 6, generator=gen) for _ in range(3))
    nx, ny, nz = x.to("neuron"), y.to("neuron"), z.to("neuron")
    nz.mul_(ny).add_(nx, alpha=2)  # first time: checked, and the Meta kernels run
    z.mul_(y).add_(x, alpha=2)
    hits, misses = memo_counts()
    assert python_calls(lambda: [nz.mul_(ny).add_(nx, alpha=2) for _ in range(5)]) == []
    for _ in range(5):
        z.mul_(y).add_(x, alpha=2)
    assert memo_counts() == (hits + 10, misses)
    torch.testing.assert_close(nz.cpu(), z)


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_a_failing_signature_fails_every_time(device):
    # Bad signatures are never remembered, whichever was checked before them.
    x = torch.ones(3, device=device)
    x.add_(torch.ones(3, device=device))
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
            x.add_(torch.ones(2, 3, device=device))
    i = torch.ones(3, dtype=torch.int32, device=device)
    i.mul_(torch.ones(3, dtype=torch.int32, device=device))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Int"):
            i.mul_(torch.ones(3, device=device))


def test_integer_values_are_part_of_the_signature_and_float_values_are_not():
    # Integer and bool values can decide a check (pow_ of an integer tensor
    # by a negative integer); a float's value cannot. (A Python number the binding wrapped
    # into a tensor reaches the checks as a meta tensor, as functionalization
    # makes its meta copies: its value is not seen.)
    x, y = torch.ones(3, 4, device="neuron"), torch.ones(3, 4, device="neuron")
    x.add_(y)  # alpha=1
    outcomes = []
    for call in (lambda: x.add_(y, alpha=2), lambda: x.add_(y, alpha=2), lambda: x.add_(y, alpha=0.5),
                 lambda: x.add_(y, alpha=0.25), lambda: x.add_(y, alpha=3), lambda: x.add_(y, alpha=4),
                 lambda: x.add_(y, alpha=4)):
        hits, misses = memo_counts()
        call()
        outcomes.append("hit" if memo_counts() == (hits + 1, misses) else "miss")
    assert outcomes == ["miss", "hit", "miss", "hit", "miss", "miss", "hit"]
    torch_neuron.mark_step()


def test_fake_tensors_keep_pytorchs_meta_kernels():
    mode = FakeTensorMode(shape_env=ShapeEnv())
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC])
    x = mode.from_tensor(torch.randn(5), symbolic_context=dynamic)
    y = mode.from_tensor(torch.randn(5), symbolic_context=dynamic)
    assert isinstance(x.shape[0], torch.SymInt)
    before = memo_counts()
    with mode:
        x.add_(y, alpha=2)
        x.add_(y, alpha=2)
        assert isinstance(x.shape[0], torch.SymInt)
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            x.add_(torch.ones(2, 5))
    assert memo_counts() == before


def test_an_out_that_was_resized_is_checked_again():
    x = torch.ones(4, 5, device="neuron")
    torch.mul(x, 2.0, out=torch.empty(4, 5, device="neuron"))
    hits, misses = memo_counts()
    torch.mul(x, 2.0, out=torch.empty(4, 5, device="neuron"))
    assert memo_counts() == (hits + 1, misses)
    with pytest.warns(UserWarning, match="was resized"):
        torch.mul(x, 2.0, out=torch.empty(3, device="neuron"))
    with pytest.warns(UserWarning, match="was resized"):
        torch.mul(x, 2.0, out=torch.empty(3, device="neuron"))
    assert memo_counts() == (hits + 1, misses + 2)
    torch_neuron.mark_step()


def test_threads_checking_at_once_get_their_own_results():
    # The cache is shared by threads that trace at once (the GIL is released
    # around each op); every thread sees its own shapes' outcome.
    errors = []

    def work(n):
        try:
            for _ in range(50):
                x = torch.ones(n, device="neuron")
                x.add_(torch.ones(n, device="neuron"))
                with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
                    x.add_(torch.ones(2, n, device="neuron"))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in (3, 4, 5, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_a_signature_that_warns_warns_at_every_call(device):
    # The CPU warns at every call of std over a reduced dim of one element;
    # such a signature is not cached, so neuron's checks warn every time too.
    x = torch.randn(1, 3, device=device)
    out = torch.empty(3, device=device)
    for _ in range(3):
        with pytest.warns(UserWarning, match=r"std\(\): degrees of freedom is <= 0"):
            torch.std(x, dim=[0], out=out)
    assert torch.isnan(out.cpu()).all()
