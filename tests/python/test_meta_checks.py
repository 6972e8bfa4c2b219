"""In-place ops reject bad input on neuron as on the CPU, at the call.

Neuron ops are checked by their Meta kernels at trace time; PyTorch's Python
Meta kernels of in-place ops skipped the CPU's broadcast check (about thirty
binary ops) and its internal-overlap check (all of them), so neuron accepted
``x.atan2_(y)`` with ``y`` broadcasting ``x`` bigger and wrote into expanded
tensors. csrc/lazy/cpu_parity.h adds the checks. Every in-place op that has
them is tried here with both kinds of bad input on the CPU and on neuron: both
must raise the same error, or neither. The checks are neuron's Meta kernels
(csrc/lazy/neuron_meta.h): meta tensors keep PyTorch's own
(test_dispatch_isolation.py).
"""

import subprocess
import sys
import warnings

import pytest
import torch

import torch_neuron
from python_calls import python_calls

DEV = "neuron"

PYTHON_META_FILES = ("torch/_meta_registrations.py", "torch/_refs/", "torch/_prims/", "torch/_prims_common/")


def _op(name):
    """The OpOverload of "aten::add_.Tensor"."""
    packet, _, overload = name[len("aten::"):].partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _inplace_ops():
    # The in-place ops (self written, no out=) with neuron's CPU-parity Meta
    # kernel, sorted.
    ops = []
    for name in torch_neuron._C._neuron_meta_ops():
        op = _op(name)
        first = op._schema.arguments[0] if op._schema.arguments else None
        if (first is None or str(first.type) != "Tensor" or first.alias_info is None
                or not first.alias_info.is_write or any(a.is_out for a in op._schema.arguments)):
            continue
        ops.append(op)
    return ops


def _arguments(op, device, bad):
    """Arguments for `op`: self of shape [3] (expanded to [2, 3] when bad is
    "overlap"), other tensors of shape [2, 3] when bad is "broadcast" (else [3]).
    None when the schema needs something this cannot make."""
    args = []
    for i, arg in enumerate(op._schema.arguments):
        if arg.kwarg_only:
            break
        kind = str(arg.type)
        if kind == "Tensor":
            if i == 0 and bad == "dtype":
                args.append(torch.arange(1, 4, dtype=torch.int32).to(device))
            elif i == 0:
                x = torch.rand(3) + 0.5
                args.append((x.expand(2, 3) if bad == "overlap" else x).to(device))
            else:
                other = torch.rand(2, 3) if bad == "broadcast" else torch.rand(3)
                args.append((other + 0.5).to(device))
        elif kind in ("Scalar", "float"):
            args.append(0.5)
        elif kind == "int":
            args.append(1)
        elif arg.has_default_value():
            break
        else:
            return None
    return args


def _outcome(op, device, bad):
    args = _arguments(op, device, bad)
    if args is None:
        return None
    if device == DEV and bad == "overlap":
        # .to() of an expanded CPU tensor materializes it; expand on the device.
        args[0] = args[0][0].expand(2, 3)
    try:
        op(*args)
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
    except (RuntimeError, IndexError, TypeError) as e:
        return type(e).__name__ + ": " + str(e).split("\n")[0]
    return "accepted"


@pytest.mark.parametrize("bad", ["broadcast", "overlap"])
def test_every_inplace_op_rejects_what_the_cpu_rejects(bad):
    differ, compared = {}, 0
    for op in _inplace_ops():
        cpu = _outcome(op, "cpu", bad)
        if cpu is None or not cpu.startswith(("accepted", "RuntimeError: output with",
                                              "RuntimeError: unsupported operation")):
            continue  # other errors: the op needs other arguments than these
        compared += 1
        dev = _outcome(op, DEV, bad)
        if bad == "overlap" and cpu == "accepted" and dev.startswith("NotImplementedError: "):
            # Writes the CPU allows into overlapping memory (fill_, tril_...):
            # refused by name on neuron rather than summed on write-back.
            assert "elements share memory" in dev, dev
            continue
        if dev != cpu:
            differ[str(op)] = (cpu, dev)
    assert compared >= 80
    assert not differ, "\n".join(f"{op}: CPU {c!r}, neuron {d!r}" for op, (c, d) in differ.items())


def _checks_broadcast(op):
    # cpu_parity.cc: pointwise ops, and the elementwise ops without the tag.
    traits = torch_neuron._C._cpu_parity_traits(f"{op._schema.name}.{op._overloadname}".replace(".default", ""))
    return torch.Tag.pointwise in op.tags or traits["elementwise_untagged"]


def test_every_meta_kernel_that_accepts_a_broadcast_of_self_is_behind_the_broadcast_check():
    # Every op whose own Meta kernel accepts the broadcast the CPU refuses
    # gets the CPU's check: a torch upgrade that breaks another one shows here.
    lax = set()
    keyset = torch._C._dispatch_keys(torch.empty(0, device="meta"))
    for op in _inplace_ops():
        cpu = _outcome(op, "cpu", "broadcast")
        if cpu is None or not cpu.startswith("RuntimeError: output with shape"):
            continue
        try:
            kernel = torch.library.get_kernel(op, "Meta")
        except RuntimeError:
            continue
        args = _arguments(op, "meta", "broadcast")
        if args is None or sum(isinstance(a, torch.Tensor) for a in args) < 2:
            continue
        try:
            kernel.call_boxed(keyset, *args)
        except Exception:
            continue
        lax.add(op)
    lax.discard(torch.ops.aten.rrelu_with_noise_.default)  # noise is not broadcast: the CPU checks it elsewhere
    assert lax, "no lax Meta kernel left: the checks may be dropped"
    unchecked = sorted(str(op) for op in lax if not _checks_broadcast(op))
    assert not unchecked, unchecked


def test_atan2_and_pow_broadcast_errors_at_the_call():
    x = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
        x.atan2_(torch.ones(2, 3, device=DEV))
    with pytest.raises(RuntimeError, match="The size of tensor a"):
        x.pow_(torch.ones(4, device=DEV))
    # Broadcasting the other operand to self's shape is fine, with CPU values.
    y = torch.arange(6.0).view(2, 3) + 1
    got = y.to(DEV).atan2_(torch.tensor([1.0, 2.0, 3.0], device=DEV))
    torch.testing.assert_close(got.cpu(), y.clone().atan2_(torch.tensor([1.0, 2.0, 3.0])))
    assert torch.equal(x.cpu(), torch.ones(3))  # the rejected calls wrote nothing


def test_writing_into_an_expanded_tensor_errors_at_the_call():
    base = torch.zeros(3, device=DEV)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        base.expand(2, 3).add_(1)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        base.expand(2, 3).mul_(torch.ones(2, 3, device=DEV))
    # Allowed on the CPU (every copy gets 2), but functionalization's write-back
    # through expand sums the copies (base would read 4): refused by name.
    with pytest.raises(NotImplementedError, match="elements share memory"):
        base.expand(2, 3).fill_(2)
    assert torch.equal(base.cpu(), torch.zeros(3))
    torch.zeros(3, device="meta").expand(2, 3).fill_(2)  # meta tensors: as the CPU


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode, torch.enable_grad])
def test_in_place_checks_hold_in_every_autograd_mode(mode):
    # Under inference_mode no autograd key runs: the checks run from the
    # Functionalize key (csrc/lazy/neuron_inplace.h) in every mode.
    x = torch.ones(3, device=DEV)
    with mode():
        with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
            x.atan2_(torch.ones(2, 3, device=DEV))
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Int"):
            torch.ones(3, dtype=torch.int32, device=DEV).mul_(torch.ones(3, device=DEV))
        x.add_(torch.ones(3, device=DEV), alpha=2)
    assert torch.equal(x.cpu(), torch.full((3,), 3.0))


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int64])
def test_an_unsafe_in_place_cast_raises_the_cpus_error(dtype):
    # The refs' Meta kernels word it "Attempting to cast from torch.float32 to
    # out tensor with dtype ..."; tests and users match the CPU's words.
    for device in ("cpu", DEV):
        x = torch.ones(3, dtype=dtype, device=device)
        with pytest.raises(RuntimeError, match="^result type Float can't be cast to the desired output type "):
            x.fmod_(1.5)


def test_every_inplace_op_refuses_a_result_its_dtype_cannot_hold_as_the_cpu_does():
    # self int32, other operands float32 (a Python 0.5 for Scalars): the CPU
    # computes in float32 and refuses to write it into int32 (unsafe cast);
    # comparisons and ops whose result is self's dtype are accepted.
    differ, compared = {}, 0
    for op in _inplace_ops():
        cpu = _outcome(op, "cpu", "dtype")
        if cpu is None or not cpu.startswith(("accepted", "RuntimeError: result type")):
            continue  # other errors: the op needs other arguments than these
        compared += 1
        dev = _outcome(op, DEV, "dtype")
        if dev != cpu:
            differ[str(op)] = (cpu, dev)
    assert compared >= 60
    assert not differ, "\n".join(f"{op}: CPU {c!r}, neuron {d!r}" for op, (c, d) in differ.items())


def _outcomes(call, errors=(RuntimeError,), words=lambda e: str(e)):
    """What `call(device)` does on the CPU and on neuron: "accepted" or the error."""
    outcomes = []
    for device in ("cpu", DEV):
        try:
            call(device)
            outcomes.append("accepted")
        except errors as e:
            outcomes.append(f"{type(e).__name__}: {words(e)}")
    return outcomes


_C64 = torch.ones(2, dtype=torch.complex64)
_F32, _I64 = torch.ones(2), torch.ones(2, dtype=torch.int64)


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: torch.heaviside(_C64.to(d), _C64.to(d)), id="heaviside_complex"),
    pytest.param(lambda d: torch.heaviside(_F32.to(d), _I64.to(d)), id="heaviside_mixed_dtypes"),
    pytest.param(lambda d: torch.heaviside(_F32.to(d), _I64.to(d), out=torch.empty(2, device=d)),
                 id="heaviside_out"),
    pytest.param(lambda d: _F32.to(d).heaviside_(_I64.to(d)), id="heaviside_inplace"),
    pytest.param(lambda d: torch.heaviside(_F32.to(d), torch.tensor(0.5).to(d)), id="heaviside_ok"),
    pytest.param(lambda d: torch.maximum(_C64.to(d), _C64.to(d)), id="maximum_complex"),
    pytest.param(lambda d: torch.max(_F32.to(d), _C64.to(d)), id="max_mixed_complex"),
    pytest.param(lambda d: torch.fmin(_C64.to(d), _C64.to(d), out=torch.empty(2, dtype=torch.complex64, device=d)),
                 id="fmin_out_complex"),
    pytest.param(lambda d: torch.minimum(_F32.to(d), _F32.to(d)), id="minimum_ok"),
    pytest.param(lambda d: _F32.to(d).clamp_(), id="clamp_inplace_without_bounds"),
    pytest.param(lambda d: _F32.to(d).clamp(), id="clamp_without_bounds"),
    pytest.param(lambda d: torch.randperm(257, dtype=torch.uint8, device=d), id="randperm_past_uint8"),
    pytest.param(lambda d: torch.randperm(2050, dtype=torch.half, device=d), id="randperm_past_half"),
    pytest.param(lambda d: torch.randperm(2**24 + 2, out=torch.empty(0, device=d)), id="randperm_out_past_float"),
    pytest.param(lambda d: torch.randperm(-1, out=torch.empty(0, dtype=torch.long, device=d)),
                 id="randperm_negative"),
    pytest.param(lambda d: torch.randperm(2049, dtype=torch.half, device=d), id="randperm_half_ok"),
    pytest.param(lambda d: torch.empty(3, device=d).random_(5, 2), id="random_from_past_to"),
    pytest.param(lambda d: torch.empty(3, dtype=torch.uint8, device=d).random_(-1, 5), id="random_below_uint8"),
    pytest.param(lambda d: torch.empty(3, dtype=torch.half, device=d).random_(2**20), id="random_past_half"),
    pytest.param(lambda d: torch.empty(3, dtype=torch.bool, device=d).random_(0, 3), id="random_past_bool"),
    pytest.param(lambda d: torch.empty(3, device=d).random_(0, 7), id="random_ok"),
    pytest.param(lambda d: torch.empty(3, device=d).uniform_(2, 1), id="uniform_reversed"),
    pytest.param(lambda d: torch.empty(3, dtype=torch.int64, device=d).uniform_(), id="uniform_of_int"),
    pytest.param(lambda d: torch.empty(3, device=d).normal_(0, -1), id="normal_negative_std"),
    pytest.param(lambda d: torch.normal(0.0, -1.0, (3,), device=d), id="normal_functional_negative_std"),
    pytest.param(lambda d: torch.empty(3, device=d).exponential_(-1), id="exponential_negative"),
    pytest.param(lambda d: torch.empty(3, device=d).geometric_(2), id="geometric_past_one"),
    pytest.param(lambda d: torch.empty(3, device=d).cauchy_(0, -1), id="cauchy_negative_sigma"),
    pytest.param(lambda d: torch.empty(3, device=d).log_normal_(0, -1), id="log_normal_negative_std"),
    pytest.param(lambda d: torch.empty(3, device=d).bernoulli_(2.0), id="bernoulli_inplace_past_one"),
    pytest.param(lambda d: torch.bernoulli(torch.zeros(3, device=d), 2.0), id="bernoulli_past_one"),
    pytest.param(lambda d: torch.bernoulli(torch.zeros(3, device=d), 0.5), id="bernoulli_ok"),
    pytest.param(lambda d: torch.empty(3, dtype=torch.int32, device=d).normal_(), id="normal_of_int"),
    pytest.param(lambda d: torch.empty(3, dtype=torch.int32, device=d).geometric_(0.5), id="geometric_of_int"),
    pytest.param(lambda d: torch.complex(_F32.to(d), _F32.double().to(d)), id="complex_mixed_dtypes"),
    pytest.param(lambda d: torch.complex(_I64.to(d), _I64.to(d)), id="complex_of_ints"),
    pytest.param(lambda d: torch.complex(_F32.to(d), _F32.to(d), out=torch.empty(0, dtype=torch.complex128, device=d)),
                 id="complex_out_of_another_dtype"),
    pytest.param(lambda d: torch.polar(_F32.double().to(d), _F32.to(d)), id="polar_mixed_dtypes"),
    pytest.param(lambda d: torch.complex(_F32.to(d), _F32.to(d)), id="complex_ok"),
    # abs and angle of a complex tensor into a complex out: the CPU takes it
    # (the Python Meta kernel wanted the float dtype exactly), not another width.
    pytest.param(lambda d: torch.abs(_C64.to(d), out=torch.empty(2, dtype=torch.complex64, device=d)).cpu(),
                 id="abs_complex_into_complex_ok"),
    pytest.param(lambda d: torch.abs(_C64.to(d), out=torch.empty(5, dtype=torch.complex64, device=d)).cpu(),
                 id="abs_complex_into_complex_resized_ok"),
    pytest.param(lambda d: torch.abs(_C64.to(d), out=torch.empty(2, dtype=torch.complex128, device=d)),
                 id="abs_complex_into_wider_complex"),
    pytest.param(lambda d: _C64.to(d).abs_(), id="abs_in_place_of_complex"),
    pytest.param(lambda d: torch.as_strided_scatter(torch.zeros(6, device=d), torch.ones(2, 2, device=d), (2, 2), (1, 0)),
                 id="as_strided_scatter_into_repeated_elements"),
    pytest.param(lambda d: torch.as_strided_scatter(torch.zeros(6, device=d), torch.ones(2, 2, device=d), (2, 2),
                                                    (1, 2)).cpu(), id="as_strided_scatter_ok"),
    pytest.param(lambda d: _F32.to(d).abs_().cpu(), id="abs_in_place_ok"),
])
def test_dtype_checks_of_cpu_kernels_raise_at_the_call(call):
    # These checks live in the CPU kernels, not in PyTorch's Meta kernels: neuron
    # traced the op and failed at a later sync. No sync here: the call raises.
    cpu, neuron = _outcomes(call)
    assert neuron == cpu


def test_random_past_a_floats_exact_integers_warns_at_every_call_as_on_the_cpu():
    messages = {}
    for device in ("cpu", DEV):
        for call in range(3):
            with warnings.catch_warnings(record=True) as warned:
                warnings.simplefilter("always")
                torch.empty(3, device=device).random_(0, 2**25)
            # (neuron may warn twice where the Meta kernel runs twice: a first call)
            messages[device, call] = {str(w.message) for w in warned}
    assert all(messages[DEV, call] == messages["cpu", call] != set() for call in range(3))


def _byte_mask_assignment(d):
    x = torch.arange(16.0, device=d).view(4, 4)
    x[torch.tensor([1, 0, 1, 0], dtype=torch.uint8, device=d)] = torch.tensor([3.0, 4.0, 5.0, 6.0], device=d)
    return x


def _byte_mask_accumulate(d):
    y = torch.ones(3, 4, device=d)
    y.index_put_((torch.tensor([0, 1, 1], dtype=torch.uint8, device=d),), torch.full((4,), 2.0, device=d),
                 accumulate=True)
    return y


def _two_byte_masks(d):
    z = torch.zeros(2, 3, device=d)
    z.index_put_((torch.tensor([1, 0], dtype=torch.uint8, device=d),
                  torch.tensor([0, 1, 1], dtype=torch.uint8, device=d)), torch.tensor(7.0, device=d))
    return z


@pytest.mark.parametrize("call", [_byte_mask_assignment, _byte_mask_accumulate, _two_byte_masks])
def test_index_put_with_uint8_masks_warns_at_every_call_as_on_the_cpu(call):
    # The CPU's kernel warns once per uint8 mask; neuron warns at the call (not
    # where the graph runs) and writes the CPU's values.
    results, warned = {}, {}
    for device in ("cpu", DEV):
        for _ in range(2):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                results[device] = call(device).cpu()
            # (the words, not where they were raised: "Triggered internally at ...")
            warned.setdefault(device, []).append([str(m.message).split(" (Triggered")[0] for m in w])
    assert warned[DEV] == warned["cpu"]
    assert warned["cpu"][0] and all("indexing with dtype torch.uint8 is now deprecated" in m for m in warned["cpu"][0])
    assert torch.equal(results[DEV], results["cpu"])


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: torch.normal(torch.zeros(3, device=d), torch.tensor([1.0, -1.0, 2.0], device=d)),
                 id="tensor_mean_tensor_std"),
    pytest.param(lambda d: torch.normal(0.0, torch.tensor([-1.0], device=d)), id="float_mean_tensor_std"),
    pytest.param(lambda d: torch.normal(0.0, torch.tensor([-1.0], device=d), out=torch.empty(1, device=d)),
                 id="out"),
    pytest.param(lambda d: torch.normal(0.0, torch.ones(2, dtype=torch.complex64, device=d)), id="complex_std"),
])
def test_normal_refuses_a_negative_std_tensor_at_the_call(call):
    # Accepted at the call, the draw failed at the next sync, in another line.
    cpu, neuron = _outcomes(call)
    assert cpu.startswith("RuntimeError: normal expects")
    assert neuron == cpu
    assert torch.ones(2, device=DEV).sum().item() == 2.0  # nothing bad left pending


def test_normal_with_a_std_tensor_draws_the_cpus_values():
    draws = []
    for device in ("cpu", DEV):
        torch.manual_seed(3)
        draws.append(torch.normal(torch.zeros(5, device=device), torch.arange(5.0, device=device)).cpu())
    torch.testing.assert_close(draws[1], draws[0])


def test_checks_of_random_ops_leave_the_users_generators_alone():
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    torch.empty(3, device=DEV).uniform_(0, 1)  # checked on an empty CPU tensor first
    torch.empty(3, device=DEV).bernoulli_(0.5)
    assert torch.equal(torch.rand(4), expected)


_W64 = torch.zeros(5, 2, dtype=torch.float64)
_BAD_INDICES = torch.zeros(2, 0, 0, 6, 6, dtype=torch.long)


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: torch._embedding_bag(_W64.to(d), _BAD_INDICES.to(d), _BAD_INDICES.to(d)), id="indices_5d"),
    pytest.param(lambda d: torch._embedding_bag_forward_only(_W64.to(d), _BAD_INDICES.to(d), _BAD_INDICES.to(d)),
                 id="forward_only_indices_5d"),
    pytest.param(lambda d: torch._embedding_bag(_W64.to(d), torch.tensor([1, 2], device=d), _BAD_INDICES.to(d)),
                 id="offsets_5d"),
    pytest.param(lambda d: torch.embedding_bag(torch.zeros(2, 2, 2, device=d), torch.tensor([1, 0], device=d),
                                               torch.tensor([0], device=d)), id="weight_3d"),
    pytest.param(lambda d: torch._embedding_bag(_W64.to(d), torch.tensor([1, 2], device=d), torch.tensor([0], device=d),
                                                False, 0, False, torch.ones(2, device=d)), id="per_sample_weights_dtype"),
    pytest.param(lambda d: torch._embedding_bag(_W64.to(d), torch.tensor([1, 2], device=d), torch.tensor([0], device=d),
                                                False, 0, False, torch.ones(2, dtype=torch.float64, device=d)), id="ok"),
])
def test_embedding_bag_refuses_bad_shapes_and_dtypes_at_the_call(call):
    cpu, neuron = _outcomes(call, words=lambda e: str(e).split(" (while checking")[0])
    assert neuron == cpu


_X34 = torch.zeros(3, 4)


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: torch.rand([], device=d).index_put([], torch.tensor([1.0], device=d), True),
                 id="no_index_tensors_accumulating_values_of_another_shape"),
    pytest.param(lambda d: torch.empty(10, 0, device=d)[:, [0, 1]], id="index_into_a_dim_of_size_0"),
    pytest.param(lambda d: torch.empty(10, 0, device=d)[torch.tensor([True] * 10, device=d), [0]],
                 id="index_into_a_dim_of_size_0_after_a_mask"),
    pytest.param(lambda d: torch.empty(10, 0, device=d)[:, torch.empty(0, dtype=torch.long, device=d)].cpu(),
                 id="an_empty_index_into_a_dim_of_size_0_is_fine"),
    pytest.param(lambda d: torch.empty(0, 3, device=d)[[], [0]].cpu(), id="an_empty_index_broadcast_is_fine"),
    pytest.param(lambda d: _X34.to(d).index_put_((torch.tensor([0, 1], device=d), torch.tensor([0, 1, 2], device=d)),
                                                 torch.tensor(1.0, device=d)), id="indices_do_not_broadcast"),
    pytest.param(lambda d: _X34.to(d).index_put_((torch.tensor([0, 1], device=d),), torch.ones(5, 1, 4, device=d)),
                 id="values_do_not_broadcast"),
    pytest.param(lambda d: _X34.to(d).__setitem__(torch.tensor([0, 1], device=d), torch.ones(3, 4, device=d)),
                 id="setitem_values"),
    pytest.param(lambda d: torch.index_put(_X34.to(d), (torch.tensor([0, 1], device=d),), torch.ones(3, 4, device=d)),
                 id="functional"),
    pytest.param(lambda d: _X34.double().to(d).__setitem__((slice(None), [1]), torch.zeros(3, 1, dtype=torch.int, device=d)),
                 id="values_of_another_dtype"),
    pytest.param(lambda d: _X34.to(d).__setitem__(torch.tensor([True, False, True], device=d),
                                                  torch.zeros(2, 4, dtype=torch.float64, device=d)),
                 id="mask_values_of_another_dtype"),
    pytest.param(lambda d: _X34.to(d).__setitem__((slice(None), torch.tensor([0, 1], device=d)),
                                                  torch.ones(1, 3, 2, device=d)), id="ok"),
])
def test_index_put_refuses_shapes_that_do_not_broadcast_at_the_call(call):
    cpu, neuron = _outcomes(call, errors=(RuntimeError, IndexError))
    assert neuron == cpu


def _scripted_mask_assign(x, value: float):
    x[x < 50] = value
    return x


def _scripted_index_assign(x, rows, value):
    x[rows, None] = value
    return x


def test_index_put_from_torchscript_checks_and_computes_as_on_the_cpu():
    # TorchScript passes the indices as a generic list (not an optional-tensor
    # list), which the index_put check read with an assert.
    mask_assign = torch.jit.script(_scripted_mask_assign)
    index_assign = torch.jit.script(_scripted_index_assign)
    data = torch.arange(100, dtype=torch.float).view(10, 10)
    rows = torch.tensor([1, 3])
    expected = mask_assign(data.clone(), 1.0)
    torch.testing.assert_close(mask_assign(data.clone().to(DEV), 1.0).cpu(), expected)
    expected = index_assign(data.clone(), rows, torch.ones(2, 1, 10))
    torch.testing.assert_close(index_assign(data.clone().to(DEV), rows.to(DEV), torch.ones(2, 1, 10, device=DEV)).cpu(),
                               expected)
    cpu, neuron = _outcomes(lambda d: index_assign(data.clone().to(d), rows.to(d), torch.ones(3, 1, 10, device=d)))
    assert "shape mismatch: value tensor of shape [3, 1, 10] cannot be broadcast" in cpu
    assert neuron == cpu


def _runs_python_meta(call):
    """Whether PyTorch's Python Meta kernels (torch._refs, _meta_registrations) run in call()."""
    return len(python_calls(call, lambda filename: any(f in filename for f in PYTHON_META_FILES))) > 0


def test_a_passed_signature_skips_the_python_meta_kernel_and_another_is_checked():
    # Pointwise in-place ops remember the signatures that passed their checks
    # (a torch._refs Meta kernel cost about 100 us a call, every call); a new
    # signature, a bad one included, is checked as before.
    x, y = torch.ones(5, 7, device="neuron"), torch.ones(5, 7, device="neuron")
    ran = [_runs_python_meta(call) for call in (
        lambda: x.add_(y), lambda: x.add_(y),
        lambda: x.add_(y, alpha=0.5),
        lambda: x.add_(y, alpha=0.25),  # float values are not part of the signature
        lambda: x.add_(y, alpha=2))]  # an integer's value is
    assert ran == [True, False, True, False, True]
    with pytest.raises(RuntimeError, match=r"output with shape \[5, 7\] doesn't match the broadcast shape"):
        x.add_(torch.ones(2, 5, 7, device="neuron"))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single"):
        torch.ones(1, 7, device="neuron").expand(5, 7).add_(y)
    i = torch.ones(3, dtype=torch.int64, device="neuron")
    i.add_(2)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        i.add_(0.5)
    torch.testing.assert_close(x.cpu(), torch.full((5, 7), 5.75))


def test_out_ops_remember_passed_signatures_and_still_resize_a_new_out():
    x = torch.arange(6.0, device="neuron").reshape(2, 3)
    out = torch.empty(2, 3, device="neuron")
    small = torch.empty(0, device="neuron")
    again = torch.empty(0, device="neuron")
    ran = [_runs_python_meta(call) for call in (
        lambda: torch.mul(x, 2.0, out=out),
        lambda: torch.mul(x, 3.0, out=out),  # float values are not part of the signature
        lambda: torch.mul(x, 2.0, out=small),  # resized: its signature is not remembered
        lambda: torch.mul(x, 2.0, out=again))]
    assert ran == [True, False, True, True]
    assert small.shape == (2, 3) and again.shape == (2, 3)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        torch.mul(x, 2.0, out=torch.empty(2, 3, dtype=torch.int64, device="neuron"))
    torch.testing.assert_close(out.cpu(), torch.arange(6.0).reshape(2, 3) * 3)
    torch.testing.assert_close(again.cpu(), torch.arange(6.0).reshape(2, 3) * 2)


_E204 = torch.zeros(2, 0, 4)


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: torch.max(_E204.to(d), 1), id="max_dim"),
    pytest.param(lambda d: torch.min(_E204.to(d), -2, keepdim=True), id="min_negative_dim"),
    pytest.param(lambda d: torch.median(_E204.to(d), 1), id="median_dim"),
    pytest.param(lambda d: torch.nanmedian(_E204.to(d), 1), id="nanmedian_dim"),
    pytest.param(lambda d: torch.mode(torch.zeros(3, 0, device=d)), id="mode_default_dim"),
    pytest.param(lambda d: torch.max(_E204.to(d), 1, out=(torch.empty(0, device=d),
                                                         torch.empty(0, dtype=torch.long, device=d))), id="max_out"),
    pytest.param(lambda d: torch.max(_E204.to(d)), id="max_of_empty"),
    pytest.param(lambda d: torch.min(_E204.to(d)), id="min_of_empty"),
    pytest.param(lambda d: torch.median(_E204.to(d)).cpu(), id="median_of_empty_is_nan"),
    pytest.param(lambda d: torch.max(_E204.to(d), 2).values.cpu(), id="max_over_a_nonempty_dim"),
    pytest.param(lambda d: torch.max(_E204.to(d), _E204.to(d)).cpu(), id="elementwise_max"),
    # mode(out=) keeps the CPU's dtype checks of its outs as well.
    pytest.param(lambda d: torch.mode(torch.ones(10, dtype=torch.uint8, device=d), -1, True,
                                      out=(torch.ones(10, dtype=torch.int8, device=d),
                                           torch.ones(10, dtype=torch.long, device=d))), id="mode_out_dtype"),
])
def test_reductions_over_an_empty_dim_fail_at_the_call_as_on_the_cpu(call):
    # The Meta kernels gave empty results; the CPU refuses (there is no value).
    cpu, neuron = _outcomes(call, errors=(RuntimeError, IndexError))
    assert neuron == cpu


_D65 = torch.zeros([1] * 65)


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: torch.nansum(_D65.to(d), dim=-1), id="nansum"),
    pytest.param(lambda d: torch.argmax(_D65.to(d), dim=64), id="argmax"),
    pytest.param(lambda d: torch.argmin(_D65.to(d), dim=0, keepdim=True), id="argmin"),
    pytest.param(lambda d: torch.sum(_D65.to(d), dim=3), id="sum"),
    pytest.param(lambda d: torch.argmax(_D65.to(d)).cpu(), id="argmax_of_all_is_fine"),
    pytest.param(lambda d: torch.nansum(_D65.to(d)).cpu(), id="nansum_of_all_is_fine"),
])
def test_reductions_over_a_dim_of_a_tensor_of_65_dims_fail_at_the_call(call):
    # The CPU's dim mask holds 64 dims; nansum, argmax and argmin were accepted
    # and failed when the graph ran.
    cpu, neuron = _outcomes(call)
    assert neuron == cpu


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: torch.bucketize(torch.ones(2, 3, device=d), torch.ones(2, 3, device=d)),
                 id="bucketize_2d_boundaries"),
    pytest.param(lambda d: torch.bucketize(2, torch.ones(2, 3, device=d)), id="bucketize_scalar_2d_boundaries"),
    pytest.param(lambda d: torch.searchsorted(torch.arange(4, device=d), torch.arange(4, device=d),
                                              out=torch.empty(4, device=d)), id="searchsorted_float_out"),
    pytest.param(lambda d: torch.searchsorted(torch.arange(4, device=d), torch.arange(4, device=d), out_int32=True,
                                              out=torch.empty(4, dtype=torch.int64, device=d)),
                 id="searchsorted_long_out_of_int32"),
    pytest.param(lambda d: torch.searchsorted(torch.arange(4, device=d), torch.arange(4, device=d), out_int32=True,
                                              out=torch.empty(4, dtype=torch.int32, device=d)).cpu(),
                 id="searchsorted_int32_out_is_fine"),
    pytest.param(lambda d: torch.searchsorted(torch.arange(4.0, device=d), torch.ones(2, device=d), side="bad"),
                 id="searchsorted_bad_side"),
    pytest.param(lambda d: torch.searchsorted(torch.arange(4.0, device=d), torch.ones(2, device=d),
                                              sorter=torch.arange(3, device=d)), id="searchsorted_short_sorter"),
    pytest.param(lambda d: torch.searchsorted(torch.arange(4.0, device=d), torch.ones(2, device=d),
                                              sorter=torch.arange(4.0, device=d)), id="searchsorted_float_sorter"),
    pytest.param(lambda d: torch.bucketize(torch.ones(2, 3, device=d), torch.arange(3.0, device=d)).cpu(),
                 id="bucketize_1d_boundaries_is_fine"),
])
def test_bucketize_and_searchsorted_refuse_what_the_cpu_refuses_at_the_call(call):
    cpu, neuron = _outcomes(call)
    assert neuron == cpu


_NON_CONTIGUOUS_SEARCH = """
import warnings
import torch
device = {device!r}
boundaries = torch.tensor([[1.0, 3.0], [2.0, 4.0]]).t()  # each column sorted
values = torch.tensor([[2, 0], [3, 5]]).t()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = torch.searchsorted(boundaries.to(device), values.to(device))
    again = torch.bucketize(values.to(device), torch.tensor([1, 2, 3], device=device))
for w in caught:
    if "non-contiguous" in str(w.message):
        print(str(w.message).split(",")[0])
assert torch.equal(result.cpu(), torch.searchsorted(boundaries, values))
assert torch.equal(again.cpu(), torch.bucketize(values, torch.tensor([1, 2, 3])))
"""


def test_searchsorted_warns_of_non_contiguous_arguments_as_the_cpu_does():
    # Once per process each: a fresh process per device.
    printed = {}
    for device in ("cpu", DEV):
        run = subprocess.run([sys.executable, "-c", _NON_CONTIGUOUS_SEARCH.format(device=device)],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        printed[device] = run.stdout.splitlines()
    assert printed[DEV] == printed["cpu"] == [
        "torch.searchsorted(): input value tensor is non-contiguous",
        "torch.searchsorted(): boundary tensor is non-contiguous"]


_B2 = torch.ones(2, dtype=torch.bool)


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: _B2.to(d) - 1, id="bool_minus_a_number"),
    pytest.param(lambda d: 1 - _B2.to(d), id="a_number_minus_bool"),
    pytest.param(lambda d: torch.zeros(2, device=d).sub_(_B2.to(d)), id="sub_in_place_of_a_bool_tensor"),
    pytest.param(lambda d: torch.add(_B2.to(d), _B2.to(d), alpha=1.5), id="bool_add_float_alpha"),
    pytest.param(lambda d: torch.add(torch.ones(2, device=d), 1, alpha=True), id="bool_alpha_of_a_float_result"),
    pytest.param(lambda d: torch.add(_B2.to(d), _B2.to(d), alpha=2).cpu(), id="bool_add_int_alpha_is_fine"),
    pytest.param(lambda d: (torch.arange(3, device=d) - 1.5).cpu(), id="int_minus_a_float_is_fine"),
])
def test_add_and_sub_refuse_what_the_cpu_refuses_at_the_call(call):
    # Accepted at the call, these failed when the graph ran (at a later sync).
    cpu, neuron = _outcomes(call)
    assert neuron == cpu


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: _I64.to(d).addcdiv_(_I64.to(d), _I64.to(d)), id="in_place"),
    pytest.param(lambda d: torch.addcdiv(_I64.to(d), _I64.to(d), _I64.to(d)), id="functional"),
    pytest.param(lambda d: torch.addcdiv(_I64.to(d), _I64.to(d), _I64.to(d), out=_I64.to(d)), id="out"),
    pytest.param(lambda d: _F32.to(d).addcdiv_(_F32.to(d), _F32.to(d), value=2).cpu(), id="floats_are_fine"),
])
def test_integer_addcdiv_is_refused_in_the_cpus_words(call):
    # addcdiv_'s Python Meta kernel words it as a tuple of its sentences.
    cpu, neuron = _outcomes(call)
    assert neuron == cpu


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: torch._foreach_sub([_B2.to(d)], 1), id="bool_minus_a_number"),
    pytest.param(lambda d: torch._foreach_sub([_B2.to(d)], [_B2.to(d)]), id="bool_minus_bool"),
    pytest.param(lambda d: torch._foreach_sub([_B2.to(d)], [2]), id="bool_minus_a_number_of_a_list"),
    pytest.param(lambda d: torch._foreach_add([_I64.to(d)], [_I64.to(d)], alpha=1.5), id="int_add_float_alpha"),
    pytest.param(lambda d: torch._foreach_sub([_I64.to(d)], [_I64.to(d)], alpha=0.5), id="int_sub_float_alpha"),
])
def test_foreach_add_and_sub_refuse_what_the_cpu_refuses_at_the_call(call):
    # The loop's per-tensor Python Meta kernels accepted a bool subtraction
    # (the graph failed at the next sync) and worded the float alpha their way.
    cpu, neuron = _outcomes(call)
    assert cpu.startswith("RuntimeError: ")
    assert neuron == cpu


@pytest.mark.parametrize("call", [
    pytest.param(lambda ts: torch._foreach_sub(ts, 1), id="sub_scalar"),
    pytest.param(lambda ts: torch._foreach_sub(ts, [t.flip(0) for t in ts], alpha=2), id="sub_list"),
    pytest.param(lambda ts: torch._foreach_sub(ts, [1.5, -2, 3]), id="sub_scalar_list"),
    pytest.param(lambda ts: torch._foreach_add(ts, 2.5), id="add_scalar"),
    pytest.param(lambda ts: torch._foreach_add(ts, ts, alpha=3), id="add_list"),
    pytest.param(lambda ts: torch._foreach_add(ts, [1, 0.5, 2]), id="add_scalar_list"),
])
def test_foreach_add_and_sub_give_the_cpus_values_and_dtypes(call):
    tensors = [torch.arange(6, dtype=torch.int32).view(2, 3), torch.linspace(-1, 1, 5),
               torch.tensor([3, 4], dtype=torch.uint8)]
    expected = call(tensors)
    got = call([t.to(DEV) for t in tensors])
    assert [g.dtype for g in got] == [e.dtype for e in expected]
    for e, g in zip(expected, got):
        torch.testing.assert_close(g.cpu(), e, rtol=0, atol=1e-6)


_I32 = torch.tensor([1, 2, 3], dtype=torch.int32)


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: _I32.to(d).pow_(-1), id="int_inplace_negative"),
    pytest.param(lambda d: torch.tensor([True, False]).to(d).pow_(-2), id="bool_inplace_negative"),
    pytest.param(lambda d: torch.pow(_I32.to(d), -1, out=torch.empty(3, dtype=torch.int32, device=d)),
                 id="int_out_negative"),
    pytest.param(lambda d: _I32.to(d).pow(-1), id="int_negative"),
])
def test_an_integer_tensor_to_a_negative_integer_power_fails_at_the_call(call):
    # The CPU refuses at the call; pow_'s Meta kernel did not, so neuron traced
    # the op and raised at the next sync, pointing at the wrong line.
    cpu, neuron = _outcomes(call)
    assert cpu == "RuntimeError: Integers to negative integer powers are not allowed."
    assert neuron == cpu


@pytest.mark.parametrize("call", [
    pytest.param(lambda d: _I32.to(d).pow_(2), id="int_positive"),
    pytest.param(lambda d: _I32.to(d).pow_(0), id="int_zero"),
    pytest.param(lambda d: _I32.to(d).double().pow_(-1), id="double_negative"),
    pytest.param(lambda d: _I32.to(d).pow(torch.tensor([-1, 1, 2], dtype=torch.int32).to(d)), id="int_tensor"),
])
def test_integer_powers_the_cpu_accepts_give_its_values(call):
    torch.testing.assert_close(call(DEV).cpu(), call("cpu"))


_X34 = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("make,good,bad", [
    pytest.param(lambda p: lambda d: torch.linalg.vector_norm(torch.empty(0, device=d), p), 2, -1,
                 id="vector_norm_of_an_empty_tensor"),
    pytest.param(lambda p: lambda d: torch.linalg.vector_norm(torch.empty(0, 3, device=d), p, dim=0), 2.5, -0.5,
                 id="vector_norm_over_an_empty_dim"),
    pytest.param(lambda p: lambda d: torch.renorm(_X34.to(d), p, 0, 1.0), 2, -1, id="renorm_p"),
    pytest.param(lambda p: lambda d: torch.renorm(_X34.to(d), 2, 0, p), 1.5, -1.5, id="renorm_maxnorm"),
    pytest.param(lambda p: lambda d: torch.celu(_X34.to(d), p), 1.5, 0.0, id="celu_alpha"),
    pytest.param(lambda p: lambda d: torch.bernoulli(_X34.to(d), p).sum() * 0, 0.5, 1.5, id="bernoulli_p"),
])
def test_a_scalar_value_the_meta_kernel_refuses_fails_at_the_call_after_a_good_one(make, good, bad):
    # The Meta result of a traced op is cached by its signature, scalar values
    # left out; a good value's result answered for a bad one (and skipped the
    # CPU probes of celu and bernoulli), which passed the call and failed at
    # the sync (PyTorch's test_vector_norm).
    torch.testing.assert_close(make(good)(DEV).cpu(), make(good)("cpu"))
    cpu, neuron = _outcomes(make(bad))
    assert cpu.startswith("RuntimeError: ")
    assert neuron == cpu
