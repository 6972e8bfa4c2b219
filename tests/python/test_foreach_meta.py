"""Neuron's C++ Meta kernels of the in-place `_foreach_*_` ops (csrc/lazy/foreach_meta.cc).

Functionalization checks every in-place op on meta copies of its arguments
before it traces the op; for neuron tensors these kernels make that check
without PyTorch's Python meta functions (csrc/lazy/neuron_inplace.h). Each form
must compute what the CPU computes, reject what the CPU rejects with the CPU's
message, leave its tensors untouched when it rejects, in every autograd mode;
meta tensors, FakeTensors with symbolic sizes (torch.compile's) included, keep
PyTorch's own kernels.
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import torch_neuron
from python_calls import python_calls

SHAPES = [(4, 3), (5,)]


def lists(device, count=3, positive=False):
    """`count` tensor lists of SHAPES (the first is self), seeded."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(count):
        ts = [torch.rand(s, generator=gen) + 0.5 if positive else torch.randn(s, generator=gen) for s in SHAPES]
        out.append([t.to(device) for t in ts])
    return out


def scalar_tensor(device):
    return torch.tensor(1.5).to(device)


# overload name -> (call on (self, a, b, device), needs positive inputs)
FORMS = {
    "_foreach_add_.Scalar": (lambda s, a, b, d: torch._foreach_add_(s, 2.5), False),
    "_foreach_add_.List": (lambda s, a, b, d: torch._foreach_add_(s, a, alpha=0.5), False),
    "_foreach_add_.ScalarList": (lambda s, a, b, d: torch._foreach_add_(s, [1.0, -2.0]), False),
    "_foreach_add_.Tensor": (lambda s, a, b, d: torch._foreach_add_(s, scalar_tensor(d), alpha=2), False),
    "_foreach_sub_.Scalar": (lambda s, a, b, d: torch._foreach_sub_(s, 2.5), False),
    "_foreach_sub_.List": (lambda s, a, b, d: torch._foreach_sub_(s, a, alpha=3), False),
    "_foreach_sub_.ScalarList": (lambda s, a, b, d: torch._foreach_sub_(s, [1.0, -2.0]), False),
    "_foreach_mul_.Scalar": (lambda s, a, b, d: torch._foreach_mul_(s, 0.25), False),
    "_foreach_mul_.List": (lambda s, a, b, d: torch._foreach_mul_(s, a), False),
    "_foreach_mul_.ScalarList": (lambda s, a, b, d: torch._foreach_mul_(s, [3.0, 0.5]), False),
    "_foreach_mul_.Tensor": (lambda s, a, b, d: torch._foreach_mul_(s, scalar_tensor(d)), False),
    "_foreach_div_.Scalar": (lambda s, a, b, d: torch._foreach_div_(s, 4.0), False),
    "_foreach_div_.List": (lambda s, a, b, d: torch._foreach_div_(s, a), True),
    "_foreach_div_.ScalarList": (lambda s, a, b, d: torch._foreach_div_(s, [3.0, 0.5]), False),
    "_foreach_div_.Tensor": (lambda s, a, b, d: torch._foreach_div_(s, scalar_tensor(d)), False),
    "_foreach_clamp_min_.Scalar": (lambda s, a, b, d: torch._foreach_clamp_min_(s, 0.1), False),
    "_foreach_clamp_min_.List": (lambda s, a, b, d: torch._foreach_clamp_min_(s, a), False),
    "_foreach_clamp_min_.ScalarList": (lambda s, a, b, d: torch._foreach_clamp_min_(s, [0.0, 0.5]), False),
    "_foreach_clamp_max_.Scalar": (lambda s, a, b, d: torch._foreach_clamp_max_(s, 0.1), False),
    "_foreach_clamp_max_.List": (lambda s, a, b, d: torch._foreach_clamp_max_(s, a), False),
    "_foreach_clamp_max_.ScalarList": (lambda s, a, b, d: torch._foreach_clamp_max_(s, [0.0, 0.5]), False),
    "_foreach_pow_.Scalar": (lambda s, a, b, d: torch._foreach_pow_(s, 2.0), False),
    "_foreach_pow_.List": (lambda s, a, b, d: torch._foreach_pow_(s, a), True),
    "_foreach_pow_.ScalarList": (lambda s, a, b, d: torch._foreach_pow_(s, [2.0, 0.5]), True),
    "_foreach_addcmul_.Scalar": (lambda s, a, b, d: torch._foreach_addcmul_(s, a, b, value=0.5), False),
    "_foreach_addcmul_.ScalarList": (lambda s, a, b, d: torch._foreach_addcmul_(s, a, b, [0.5, 2.0]), False),
    "_foreach_addcdiv_.Scalar": (lambda s, a, b, d: torch._foreach_addcdiv_(s, a, b, value=0.5), True),
    "_foreach_addcdiv_.ScalarList": (lambda s, a, b, d: torch._foreach_addcdiv_(s, a, b, [0.5, 2.0]), True),
    "_foreach_lerp_.Scalar": (lambda s, a, b, d: torch._foreach_lerp_(s, a, 0.25), False),
    "_foreach_lerp_.ScalarList": (lambda s, a, b, d: torch._foreach_lerp_(s, a, [0.25, 0.75]), False),
    "_foreach_lerp_.List": (lambda s, a, b, d: torch._foreach_lerp_(s, a, b), False),
    "_foreach_sqrt_": (lambda s, a, b, d: torch._foreach_sqrt_(s), True),
    "_foreach_exp_": (lambda s, a, b, d: torch._foreach_exp_(s), False),
    "_foreach_neg_": (lambda s, a, b, d: torch._foreach_neg_(s), False),
    "_foreach_reciprocal_": (lambda s, a, b, d: torch._foreach_reciprocal_(s), True),
    "_foreach_zero_": (lambda s, a, b, d: torch._foreach_zero_(s), False),
}


@pytest.mark.parametrize("op", FORMS)
def test_form_has_a_neuron_meta_kernel_and_the_meta_key_keeps_pytorchs(op):
    assert f"aten::{op}" in torch_neuron._C._neuron_meta_ops()
    assert f"aten::{op}" in torch_neuron._C._neuron_inplace_ops_run_functional()
    meta = torch._C._dispatch_dump_table(f"aten::{op}").split("\nMeta: ")[1].splitlines()[0]
    assert "torch_neuron" not in meta and "foreach_meta.cc" not in meta


@pytest.mark.parametrize("op", FORMS)
def test_form_on_neuron_matches_cpu(op):
    call, positive = FORMS[op]
    expected = lists("cpu", positive=positive)
    call(*expected, "cpu")
    got = lists("neuron", positive=positive)
    call(*got, "neuron")
    for e, g in zip(expected[0], got[0]):
        torch.testing.assert_close(g.cpu(), e, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", FORMS)
def test_form_on_meta_tensors_keeps_their_shapes(op):
    call, _ = FORMS[op]
    self, a, b = lists("meta")
    call(self, a, b, "meta")
    assert [tuple(t.shape) for t in self] == SHAPES


def broadcast_too_far(s, a, b, d):
    """`other` of the second pair broadcasts to a bigger shape than self."""
    torch._foreach_mul_(s, [a[0], torch.ones(2, 5).to(d)])


def lerp_too_far(s, a, b, d):
    torch._foreach_lerp_(s, [a[0], torch.ones(3, 5).to(d)], 0.5)


def addcmul_too_far(s, a, b, d):
    torch._foreach_addcmul_(s, a, [b[0], torch.ones(2, 5).to(d)], value=2)


def int_self_times_float(s, a, b, d):
    torch._foreach_mul_([torch.arange(4).to(d)], 1.5)


def int_self_sqrt(s, a, b, d):
    torch._foreach_sqrt_([torch.arange(4).to(d)])


def lists_of_different_lengths(s, a, b, d):
    torch._foreach_add_(s, a[:1])


def scalars_of_another_length(s, a, b, d):
    torch._foreach_add_(s, [1.0, 2.0, 3.0])


def tensor_form_given_a_vector(s, a, b, d):
    torch._foreach_mul_(s, torch.ones(2).to(d))


BAD_CALLS = [broadcast_too_far, lerp_too_far, addcmul_too_far, int_self_times_float, int_self_sqrt,
             lists_of_different_lengths, scalars_of_another_length, tensor_form_given_a_vector]


@pytest.mark.parametrize("bad_call", BAD_CALLS, ids=lambda f: f.__name__)
def test_bad_call_raises_the_cpu_error_and_changes_nothing(bad_call):
    with pytest.raises(RuntimeError) as cpu_error:
        bad_call(*lists("cpu"), "cpu")
    neuron = lists("neuron")
    before = [t.cpu() for t in neuron[0]]
    with pytest.raises(RuntimeError) as neuron_error:
        bad_call(*neuron, "neuron")
    assert str(neuron_error.value) == str(cpu_error.value)
    for b, t in zip(before, neuron[0]):
        torch.testing.assert_close(t.cpu(), b, rtol=0, atol=0)


@pytest.mark.parametrize("bad_call", BAD_CALLS, ids=lambda f: f.__name__)
def test_bad_call_under_inference_mode_raises_the_cpu_error_and_changes_nothing(bad_call):
    # No autograd key there: the checks run from the Functionalize key.
    with pytest.raises(RuntimeError) as cpu_error:
        bad_call(*lists("cpu"), "cpu")
    neuron = lists("neuron")
    before = [t.cpu() for t in neuron[0]]
    with torch.inference_mode(), pytest.raises(RuntimeError) as neuron_error:
        bad_call(*neuron, "neuron")
    assert str(neuron_error.value) == str(cpu_error.value)
    for b, t in zip(before, neuron[0]):
        torch.testing.assert_close(t.cpu(), b, rtol=0, atol=0)


def test_symbolic_sizes_take_the_python_meta_functions():
    """FakeTensors with SymInt sizes (torch.compile's dynamic shapes) reach
    PyTorch's per-tensor loop, which handles them, and broadcasting errors
    still surface."""
    mode = FakeTensorMode(shape_env=ShapeEnv())
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC])
    self = [mode.from_tensor(torch.randn(5), symbolic_context=dynamic)]
    other = [mode.from_tensor(torch.randn(5), symbolic_context=dynamic)]
    assert isinstance(self[0].shape[0], torch.SymInt)
    with mode:
        torch._foreach_addcmul_(self, other, other, value=2)
        torch._foreach_lerp_(self, other, 0.5)
        torch._foreach_mul_(self, 3.0)
        assert isinstance(self[0].shape[0], torch.SymInt)
        with pytest.raises(RuntimeError):
            torch._foreach_add_(self, [torch.ones(2, 5)])


PYTHON_META_FILES = ("torch/_meta_registrations.py", "torch/_refs/", "torch/_prims/", "torch/_prims_common/")


def python_meta_calls(fn):
    """How many Python functions of PyTorch's meta registrations and the
    references they use run in fn()."""
    return len(python_calls(fn, lambda filename: any(f in filename for f in PYTHON_META_FILES)))


def test_foreach_adamw_step_runs_no_python_meta_function():
    """The AdamW step that motivated the kernels: none of PyTorch's Python meta
    functions runs while it is traced. A per-tensor in-place op, which keeps
    PyTorch's Python meta function, shows the count works."""
    params = [torch.nn.Parameter(torch.randn(s).neuron()) for s in SHAPES]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)
    opt.step()  # creates the state
    torch_neuron.mark_step()
    assert python_meta_calls(opt.step) == 0
    grad = params[0].grad
    assert python_meta_calls(lambda: grad.addcmul_(grad, grad)) > 0
    torch_neuron.mark_step()


# addcdiv and addcmul take their per-tensor scalars as a CPU tensor too
# (_tensor_support.py runs them as the ScalarList forms): functionalization
# handed that tensor to the Meta kernel as a meta tensor, which refused it.
SCALAR_TENSOR_FORMS = {
    "_foreach_addcdiv_.Tensor": lambda s, a, b, scalars: torch._foreach_addcdiv_(s, a, b, scalars),
    "_foreach_addcmul_.Tensor": lambda s, a, b, scalars: torch._foreach_addcmul_(s, a, b, scalars),
    "_foreach_addcdiv.Tensor": lambda s, a, b, scalars: torch._foreach_addcdiv(s, a, b, scalars),
    "_foreach_addcmul.Tensor": lambda s, a, b, scalars: torch._foreach_addcmul(s, a, b, scalars),
}


@pytest.mark.parametrize("op", SCALAR_TENSOR_FORMS)
def test_scalars_as_a_cpu_tensor_give_the_cpus_results(op):
    call = SCALAR_TENSOR_FORMS[op]
    scalars = torch.tensor([0.5, -2.0])
    expected = lists("cpu", positive=True)
    expected_out = call(*expected, scalars)
    got = lists("neuron", positive=True)
    got_out = call(*got, scalars)
    results = (got[0], expected[0]) if expected_out is None else (got_out, expected_out)
    for g, e in zip(*results):
        assert g.device.type == "neuron"
        torch.testing.assert_close(g.cpu(), e, rtol=0, atol=0)


@pytest.mark.parametrize("scalars", [
    pytest.param(lambda: torch.tensor([0.5]), id="another_length"),
    pytest.param(lambda: torch.tensor([[0.5, 2.0]]), id="two_dims"),
    pytest.param(lambda: torch.tensor([0.5, 2.0]).to("neuron"), id="on_neuron"),
])
def test_bad_scalar_tensors_raise_the_cpu_error_and_change_nothing(scalars):
    with pytest.raises(RuntimeError) as cpu_error:
        torch._foreach_addcdiv_(*lists("cpu"), scalars())
    neuron = lists("neuron")
    before = [t.cpu() for t in neuron[0]]
    with pytest.raises(RuntimeError) as neuron_error:
        torch._foreach_addcdiv_(*neuron, scalars())
    assert str(neuron_error.value) == str(cpu_error.value)
    for b, t in zip(before, neuron[0]):
        torch.testing.assert_close(t.cpu(), b, rtol=0, atol=0)
