"""out= ops check their out tensor on neuron as on the CPU, at the call.

Functionalization runs an out= op as its functional op plus a converting write
into out, so the out= kernel's checks never ran: ``torch.add(x, x,
out=long_tensor)`` on float x was accepted (the CPU raises "result type Float
can't be cast to the desired output type Long") and wrote truncated values,
and ``torch.neg(complex, out=float_tensor)`` dropped the imaginary part.
csrc/lazy/out_checks.cc runs the out= op's Meta kernel first. Every out= op of
the OpInfo database is tried here on its first sample, on the CPU and on
neuron, with an out tensor of the result's dtype (both must accept it and give
the same values) and with one the result cannot be cast to (both must refuse
it, or neither). Ops whose Meta kernel cannot answer (nonzero, masked_select,
histogram, no Meta kernel) run as the CPU's kernel, outs written back.
"""

import warnings

import re

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_neuron

# The dtype an out tensor gets that the result cannot be cast to safely.
UNSAFE_FOR = {torch.float32: torch.int64, torch.int64: torch.bool, torch.bool: None,
              torch.complex64: torch.float32}


# What neuron still accepts that the CPU refuses, and why (docs/SUPPORT.md).
KNOWN_DIFFERENCES = {
    # Its Meta kernel lacks the CPU kernel's check of the out dtype (pointwise
    # ops take the CPU's checks from a probe, csrc/lazy/cpu_parity.cc).
    "linalg.solve_triangular (unsafe)": ("RuntimeError", "accepted"),
    # The CPU has no normal kernel for int64; neuron draws float32 (from the
    # neuron generator, so not on the CPU's kernel) and converts.
    "normal (unsafe)": ("NotImplementedError", "accepted"),
}


def _out_ops():
    return [op for op in op_db if op.supports_out and torch.float32 in op.supported_dtypes("cpu")]


def _first_sample(op):
    for sample in op.sample_inputs("cpu", torch.float32):
        if isinstance(sample.input, torch.Tensor):
            return sample
    return None


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: device if k == "device" else _to(v, device) for k, v in value.items()}
    return value


def _outs_like(result, device, dtype_of):
    if isinstance(result, torch.Tensor):
        dtype = dtype_of(result.dtype)
        return None if dtype is None else torch.empty(0, dtype=dtype, device=device)
    outs = [_outs_like(r, device, dtype_of) for r in result]
    return None if any(o is None for o in outs) else tuple(outs)


def _run(op, sample, device, out):
    try:
        result = op(_to(sample.input, device), *_to(sample.args, device), out=out, **_to(sample.kwargs, device))
        torch_neuron.mark_step()
        return _to(result, "cpu")
    except (RuntimeError, TypeError, ValueError, IndexError) as e:
        return type(e).__name__


def _meta(t):
    return (t.shape, t.dtype) if isinstance(t, torch.Tensor) else type(t)


def _samples():
    for op in _out_ops():
        sample = _first_sample(op)
        if sample is None:
            continue
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - a sample the CPU refuses tests nothing here
            continue
        if isinstance(expected, torch.Tensor) or (
                isinstance(expected, (tuple, list)) and all(isinstance(e, torch.Tensor) for e in expected)):
            yield op, sample, expected


def test_every_out_op_accepts_an_out_of_its_dtype_and_refuses_an_unsafe_one():
    differ, compared = {}, 0
    for op, sample, expected in _samples():
        for kind, dtype_of in (("same", lambda d: d), ("unsafe", lambda d: UNSAFE_FOR.get(d))):
            cpu_out = _outs_like(expected, "cpu", dtype_of)
            if cpu_out is None:
                continue
            cpu = _run(op, sample, "cpu", cpu_out)
            if kind == "same" and isinstance(cpu, str):
                continue  # this sample needs an out the test cannot make
            compared += 1
            dev = _run(op, sample, "neuron", _outs_like(expected, "neuron", dtype_of))
            if isinstance(cpu, str) or isinstance(dev, str):
                same = isinstance(cpu, str) and isinstance(dev, str)
            else:
                same = True  # values are the conformance sweep's business; shapes here
                for c, d in zip(cpu if isinstance(cpu, tuple) else (cpu,), dev if isinstance(dev, tuple) else (dev,)):
                    same &= _meta(c) == _meta(d)
            if not same:
                differ[f"{op.name} ({kind})"] = (cpu if isinstance(cpu, str) else "accepted",
                                                 dev if isinstance(dev, str) else "accepted")
    assert compared > 300
    assert differ == KNOWN_DIFFERENCES


BAD_OUTS = [
    (lambda d: torch.add(torch.ones(2, device=d), 1.5, out=torch.empty(2, dtype=torch.long, device=d)),
     "result type Float can't be cast to the desired output type Long"),
    (lambda d: torch.neg(torch.ones(2, dtype=torch.complex64, device=d),
                         out=torch.empty(2, device=d)), None),
    (lambda d: torch.mul(torch.ones(3, device=d, requires_grad=True), 2, out=torch.empty(3, device=d)),
     r"mul\(\): functions with out=... arguments don't support automatic differentiation"),
    (lambda d: torch.neg(torch.ones((), device=d), out=torch.empty(0, dtype=torch.float64, device=d)),
     "Found dtype Double but expected Float"),
    (lambda d: torch.floor(torch.ones(2, dtype=torch.complex64, device=d),
                           out=torch.empty(0, dtype=torch.complex64, device=d)),
     "floor is not supported for complex inputs"),
    (lambda d: torch.pow(torch.ones(2, dtype=torch.int64, device=d), -1,
                         out=torch.empty(0, dtype=torch.int64, device=d)),
     "Integers to negative integer powers are not allowed"),
    (lambda d: torch.pow(torch.ones(3, device=d), 2, out=torch.ones(1, device=d).expand(3)),
     "more than one element of the written-to tensor refers to a single memory location"),
    (lambda d: torch.linspace(1, 10, 10, out=torch.ones(1, device=d).expand(10)),
     "more than one element of the written-to tensor refers to a single memory location"),
    (lambda d: torch.all(torch.ones(3, 4, device=d), 1, out=torch.empty(3, device=d)),
     "all only supports bool tensor for result, got: Float"),
    (lambda d: torch.mode(torch.ones(10, device=d), -1, True,
                          out=(torch.ones(10, device=d), torch.ones(10, dtype=torch.int32, device=d))),
     "expected scalar type 'Long' but got 'Int' for indices output"),
    (lambda d: torch.amax(torch.ones(0, 4, device=d), 0, out=torch.empty(4, device=d)),
     "Expected reduction dim 0 to have non-zero size"),
]


@pytest.mark.parametrize("make,message", BAD_OUTS)
def test_bad_out_raises_at_the_call_as_on_the_cpu(make, message):
    with pytest.raises((RuntimeError, IndexError), match=message) as cpu:
        make("cpu")
    with pytest.raises((RuntimeError, IndexError), match=message or "") as dev:
        make("neuron")  # no sync: the error is the call's
    assert cpu.type is dev.type


@pytest.mark.parametrize("make,message", BAD_OUTS)
def test_bad_out_raises_under_inference_mode_as_on_the_cpu(make, message):
    # inference_mode skips the autograd keys, where the checks run otherwise:
    # a float result written into a long out was cast without a word.
    def outcome(device):
        try:
            with torch.inference_mode():
                make(device)  # no sync: the error is the call's
        except (RuntimeError, IndexError) as error:
            return type(error), str(error).splitlines()[0]
        return None

    cpu, dev = outcome("cpu"), outcome("neuron")
    assert (cpu is None) == (dev is None), (cpu, dev)
    if cpu is not None:
        assert cpu[0] is dev[0] and re.search(message or "", dev[1]), (cpu, dev)


def test_a_good_out_is_resized_and_written():
    out = torch.empty(0, device="neuron")
    result = torch.add(torch.arange(4.0, device="neuron"), 1, out=out)
    assert result is out
    assert out.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("make", [
    pytest.param(lambda x: torch.linspace(0, 3, 4, out=x.narrow(1, 1, 2)), id="linspace_into_a_strided_view"),
    pytest.param(lambda x: torch.logspace(0, 3, 4, base=2, out=x.narrow(1, 1, 2)), id="logspace_into_a_strided_view"),
    pytest.param(lambda x: torch.arange(1, 4, 0.5, out=x), id="arange_into_2x3"),
    # torch.range's own deprecation warning comes from Python: the ops are called.
    pytest.param(lambda x: torch.ops.aten.range.out(0, 3, 1, out=x.narrow(1, 1, 2)), id="range_into_a_strided_view"),
    pytest.param(lambda x: torch.ops.aten.range.out_(0, 5, out=x), id="range_into_2x3"),
])
def test_sequences_keep_an_out_of_their_length_in_its_shape(make):
    # The CPU's linspace/logspace/arange resize out only when its element count
    # differs; functionalization gave out the 1-d shape (and writing through a
    # view of another shape failed when the graph ran).
    def run(device):
        x = torch.zeros(2, 3, device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no resize, so no warning
            result = make(x)
        return x.cpu(), result.cpu()
    (x_cpu, r_cpu), (x_dev, r_dev) = run("cpu"), run("neuron")
    assert torch.equal(x_dev, x_cpu)
    assert torch.equal(r_dev, r_cpu)


def test_arange_into_an_out_of_another_length_warns_and_resizes_as_on_the_cpu():
    for device in ("cpu", "neuron"):
        out = torch.zeros(3, device=device)
        with pytest.warns(UserWarning, match=r"out tensor of shape \[3\] is 3 which does not match the "
                                             r"computed number of elements 4"):
            torch.arange(4, out=out)
        assert out.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_out_ops_without_an_answering_meta_kernel_run_as_the_cpus_and_write_every_written_argument():
    # nonzero's out must be int64 (its Meta kernel cannot run: a data-dependent
    # shape); _native_batch_norm_legit.out has no Meta kernel, writes its running
    # stats too, and functionalization of it put the output into running_mean.
    mask = torch.tensor([True, False, True])
    with pytest.raises(RuntimeError, match="Long"):
        torch.nonzero(mask.neuron(), out=torch.empty(0, dtype=torch.int32, device="neuron"))
    out = torch.empty(5, 5, dtype=torch.long, device="neuron")
    assert torch.nonzero(mask.neuron(), out=out) is out
    assert out.cpu().tolist() == [[0], [2]]

    torch.manual_seed(0)
    x = torch.randn(5, 5, 5)
    results = []
    for device in ("cpu", "neuron"):
        stats = [torch.zeros(5, device=device), torch.ones(5, device=device)]
        outs = [torch.empty(0, device=device) for _ in range(3)]
        torch.ops.aten._native_batch_norm_legit.out(x.to(device), None, None, *stats, True, 0.1, 1e-5,
                                                    out=outs[0], save_mean=outs[1], save_invstd=outs[2])
        results.append([t.cpu() for t in (*stats, *outs)])
    for cpu, dev in zip(*results):
        assert cpu.shape == dev.shape
        torch.testing.assert_close(dev, cpu)


def test_an_out_view_that_needs_resizing_is_refused_at_the_call():
    # The CPU restrides such a view over its base's storage; neuron cannot
    # re-point a view, and the graph failed when it ran (slice_scatter sizes).
    x = torch.tensor([3.0, 1.0, 2.0, 0.0, 5.0, 4.0], device="neuron")
    values = torch.empty(6, device="neuron")[::2]
    indices = torch.empty(6, dtype=torch.long, device="neuron")
    with pytest.raises(RuntimeError, match=r"sort\(\): the out= argument 'values' is a view of shape \[3\] "
                                           r"that the result's shape \[6\] would resize"):
        torch.sort(x, out=(values, indices))
    # A view of the result's shape is written through, as on the CPU.
    base = torch.zeros(12, device="neuron")
    torch.sort(x, out=(base[::2], indices))
    assert base.cpu().tolist() == [0.0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0]
    assert indices.cpu().tolist() == [3, 1, 2, 0, 5, 4]


def _overlap_outcome(call, device):
    x = torch.arange(6.0, device=device)
    try:
        call(x)
        return ("accepted", x.cpu().tolist())
    except RuntimeError as e:
        return (type(e).__name__, str(e))


@pytest.mark.parametrize("call", [
    pytest.param(lambda x: torch.pow(x[1:], 2, out=x[:-1]), id="pow_into_its_shifted_input"),
    pytest.param(lambda x: torch.add(x[:4], x[2:], out=x[1:5]), id="add_partly_overlapping"),
    pytest.param(lambda x: torch.cat([x[:2], x[2:4]], out=x[:4]), id="cat_into_its_inputs"),
    pytest.param(lambda x: torch.add(x, 1, out=x), id="elementwise_full_overlap_is_fine"),
    pytest.param(lambda x: torch.mul(x[:3], 2, out=x[3:]), id="disjoint_views_are_fine"),
    pytest.param(lambda x: torch.sum(x[:3], 0, out=x[0]), id="a_reduction_into_its_input_is_fine"),
    pytest.param(lambda x: torch.cat([x[:3], x[:3]], out=x), id="cat_into_a_tensor_it_reads_whole"),
    pytest.param(lambda x: torch.gather(x[:3], 0, torch.tensor([2, 1, 0], device=x.device), out=x[:3]),
                 id="gather_into_its_input"),
    pytest.param(lambda x: torch.index_select(x, 0, torch.tensor([1, 0], device=x.device), out=x[2:4]),
                 id="index_select_into_its_input"),
    pytest.param(lambda x: torch.cumsum(x[:3], 0, out=x[1:4]), id="cumsum_partly_overlapping"),
])
def test_an_out_that_partly_overlaps_an_input_is_refused_as_on_the_cpu(call):
    # neuron computed these from the inputs' values before the write, where
    # the CPU refuses them (the result would depend on the order of writes).
    assert _overlap_outcome(call, "neuron") == _overlap_outcome(call, "cpu")


@pytest.mark.parametrize("call", [
    pytest.param(lambda x: x[1:4].add_(x[:3]), id="add_partly_overlapping"),
    pytest.param(lambda x: x[:3].add_(x[:3]), id="add_itself_is_fine"),
    pytest.param(lambda x: x[1:4].lerp_(x[:3], 0.5), id="lerp_partly_overlapping"),
    pytest.param(lambda x: x.view(2, 3)[:, 1:].clamp_(min=x.view(2, 3)[:, :2]), id="clamp_tensor_bound"),
    pytest.param(lambda x: x.scatter_(0, torch.tensor([0, 1], device=x.device), x[1:3]), id="scatter_its_slice"),
    pytest.param(lambda x: x[:3].scatter_add_(0, torch.tensor([0, 1, 2], device=x.device), x[:3]),
                 id="scatter_add_itself"),
    pytest.param(lambda x: x.index_put_((torch.tensor([0, 1], device=x.device),), x[1:3]), id="index_put_"),
    pytest.param(lambda x: x.index_copy_(0, torch.tensor([0, 1], device=x.device), x[2:4]), id="index_copy_"),
    pytest.param(lambda x: x.index_add_(0, torch.tensor([0, 1], device=x.device), x[2:4]), id="index_add_"),
    pytest.param(lambda x: x.put_(torch.tensor([0, 1], device=x.device), x[2:4]), id="put_"),
    pytest.param(lambda x: x[1:].long().__ilshift__(x[:-1].long()), id="shift_of_a_copy_is_fine"),
    pytest.param(lambda x: x[:3].masked_fill_(torch.ones(3, dtype=torch.bool, device=x.device), x[3]),
                 id="masked_fill_is_fine"),
    pytest.param(lambda x: x[:3].index_fill_(0, torch.tensor([0], device=x.device), x[1]), id="index_fill_is_fine"),
    pytest.param(lambda x: x[:1].expand(3).copy_(x[3:]), id="copy_into_an_expanded_tensor"),
])
def test_an_in_place_op_writing_over_its_argument_is_refused_as_on_the_cpu(call):
    # Functionalization computes an in-place op from the values before the
    # write: these went through with a result where the CPU refuses the call.
    assert _overlap_outcome(call, "neuron") == _overlap_outcome(call, "cpu")


# --- composite out= kernels: what they return is what out holds -------------------

COMPOSITE_OUTS = [
    # linalg_matrix_rank(out=) rebinds its own reference to a new tensor for
    # tensors it counts as subclasses (a functional wrapper): out stayed unwritten.
    ("matrix_rank", lambda x, out: torch.linalg.matrix_rank(x, out=out), torch.int64),
    ("matrix_rank_atol", lambda x, out: torch.linalg.matrix_rank(x, atol=0.5, rtol=0.0, out=out), torch.int64),
    ("linalg_norm", lambda x, out: torch.linalg.norm(x, out=out), torch.float64),
    ("pinv", lambda x, out: torch.linalg.pinv(x, out=out), torch.float64),
    ("matmul", lambda x, out: torch.matmul(x, x, out=out), torch.float64),
]


@pytest.mark.parametrize("mode", ["grad", "inference_mode"])
@pytest.mark.parametrize("name, fn, dtype", COMPOSITE_OUTS, ids=[c[0] for c in COMPOSITE_OUTS])
def test_a_composite_out_op_writes_out_and_returns_it_as_on_the_cpu(name, fn, dtype, mode):
    # Under inference_mode the autograd keys are skipped: the composite met
    # functionalization's fallback, which refused it ("alias annotations").
    x = torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    context = torch.inference_mode if mode == "inference_mode" else torch.enable_grad
    with context():
        want_out = torch.full((0,), 7, dtype=dtype)
        want = fn(x, want_out)
        out = torch.full((0,), 7, dtype=dtype).to("neuron")
        got = fn(x.to("neuron"), out)
    assert (got is out) == (want is want_out)
    assert out.shape == want_out.shape
    torch.testing.assert_close(out.cpu(), want_out)


@pytest.mark.parametrize("fill", [0.0, 1.0, 2.5])
def test_compute_linear_combination_adds_into_its_out_as_on_the_cpu(fill):
    # Its CPU kernel adds the combination to what out holds (matrix_exp's
    # helper; PyTorch's test_linalg_matrix_exp_utils). Run as the CPU's kernel
    # (no Meta kernel), it got a fresh out and neuron's out lost its values.
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(3, 2, 2, generator=gen)
    coefficients = torch.rand(5, 3, generator=gen)
    results = []
    for device in ("cpu", "neuron"):
        out = torch.full((5, 2, 2), fill, device=device)
        assert torch._compute_linear_combination(x.to(device), coefficients.to(device), out=out) is out
        results.append(out.cpu())
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=1e-6)


def _resize_warnings(device):
    # Python's default warnings filter shows a message once
    # per place, so two outs must give two messages (the CPU's name the shape).
    a = torch.eye(2, device=device)
    b = torch.tensor([[1.0], [2.0]], device=device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        solution, cloned = torch.triangular_solve(b, a, out=(torch.empty(1, device=device),
                                                             torch.empty(1, device=device)))
    messages = [str(w.message) for w in caught if "was resized" in str(w.message)]
    return messages, solution.cpu(), cloned.cpu()


def test_resize_warnings_name_each_out_as_on_cpu():
    # triangular_solve's Meta kernel is Python's (out_wrapper), whose warning
    # lacked the required shape: the filter dropped the second out's.
    cpu_messages, *cpu_results = _resize_warnings("cpu")
    assert len(cpu_messages) == 2
    messages, *results = _resize_warnings("neuron")
    assert messages == cpu_messages
    for result, expected in zip(results, cpu_results):
        torch.testing.assert_close(result, expected, rtol=0, atol=0)
