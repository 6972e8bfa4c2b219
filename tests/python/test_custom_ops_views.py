"""Libraries' own operators whose Python kernels write through views, on neuron
tensors as on CPU ones (torch_neuron/_custom_ops.py,
csrc/lazy/functionalized_custom_ops.h).

A torch.library.custom_op (or a Library("ns", "DEF") operator with a
CompositeExplicitAutograd kernel) runs its kernel below autograd and below
functionalization. On neuron tensors that kernel runs on the functional
wrappers, functionalized: a write into a view of an argument or of a new
tensor reaches the tensor it views, as on the CPU. Each test compares values
(and gradients through the operator's own autograd formula) with the CPU's, on
the lazy path and under torch.compile(backend="neuron").
"""

import copy

import pytest
import torch
import torch._dynamo

import torch_neuron

N = "neuron"

# Dynamo reset around each test, and no AOTAutograd failure (conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


# --- operators ------------------------------------------------------------------------------------


@torch.library.custom_op("views_test::grouped_mm", mutates_args=())
def grouped_mm(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """transformers' grouped_mm_fallback, as it is written: out= calls into row
    slices of a new tensor, one per group, over the offsets' values."""
    output = torch.zeros(input.size(0), weight.size(2), device=input.device, dtype=input.dtype)
    start = 0
    for i, end in enumerate(offs.tolist()):
        if start == end:
            continue
        torch.mm(input[start:end], weight[i], out=output[start:end])
        start = end
    return output


@grouped_mm.register_fake
def _(input, weight, offs):
    return input.new_empty(input.size(0), weight.size(2))


@torch.library.custom_op("views_test::grouped_mm_backward", mutates_args=())
def grouped_mm_backward(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor,
                        grad_output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    grad_input = torch.zeros_like(input)
    grad_weight = torch.zeros_like(weight)
    start = 0
    for i, end in enumerate(offs.tolist()):
        if start == end:
            continue
        torch.mm(grad_output[start:end], weight[i].T, out=grad_input[start:end])
        torch.mm(input[start:end].T, grad_output[start:end], out=grad_weight[i])
        start = end
    return grad_input, grad_weight


@grouped_mm_backward.register_fake
def _(input, weight, offs, grad_output):
    return torch.empty_like(input), torch.empty_like(weight)


def _grouped_mm_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.offs = inputs[2]


def _grouped_mm_grad(ctx, grad_output):
    input, weight = ctx.saved_tensors
    grad_input, grad_weight = grouped_mm_backward(input, weight, ctx.offs, grad_output)
    return grad_input, grad_weight, None


grouped_mm.register_autograd(_grouped_mm_grad, setup_context=_grouped_mm_setup)


@torch.library.custom_op("views_test::halves", mutates_args=())
def halves(x: torch.Tensor) -> torch.Tensor:
    """A new tensor filled through views of it: a slice written in place, a
    transposed view written by copy_, a row by an out= call."""
    out = torch.empty(x.size(0) + 1, x.size(1), device=x.device, dtype=x.dtype)
    out[: x.size(0)].copy_(x)
    out[: x.size(0) // 2].mul_(2)
    out.t()[:, -1].copy_(x.sum(0))
    torch.add(x[0], 1, out=out[0])
    return out


@halves.register_fake
def _(x):
    return x.new_empty(x.size(0) + 1, x.size(1))


def _halves_grad(ctx, grad):
    (rows,) = ctx.rows
    g = grad[:rows].clone()
    g[: rows // 2] *= 2
    g[0] = grad[0]
    return g + grad[rows]


halves.register_autograd(_halves_grad, setup_context=lambda ctx, inputs, output: setattr(
    ctx, "rows", (inputs[0].size(0),)))


@torch.library.custom_op("views_test::scale_rows_", mutates_args={"x"})
def scale_rows_(x: torch.Tensor, rows: list[int], scale: float) -> None:
    """Writes a declared-mutable argument through views of it (rows, and a
    column of its transpose)."""
    for r in rows:
        x[r].mul_(scale)
    x.t()[0].add_(1)


@scale_rows_.register_fake
def _(x, rows, scale):
    return None


def _define_library_ops(lib):
    """Library("ns", "DEF") operators with CompositeExplicitAutograd kernels:
    one that fills a new tensor through a view of it, one that writes an
    argument its schema declares read-only."""
    lib.define("padded(Tensor src, int width) -> Tensor")
    lib.define("sneaky(Tensor x) -> Tensor")

    def padded(src, width):
        out = src.new_empty(src.size(0), width)
        out[:, : src.size(1)].copy_(src)
        out.narrow(1, src.size(1), width - src.size(1)).fill_(-1)
        return out

    def sneaky(x):
        x[0].zero_()  # not declared: the CPU lets it through, neuron refuses
        return x + 1

    lib.impl("padded", padded, "CompositeExplicitAutograd")
    lib.impl("sneaky", sneaky, "CompositeExplicitAutograd")


@pytest.fixture
def library_ops():
    with torch.library._scoped_library("views_test_lib", "DEF") as lib:
        _define_library_ops(lib)
        yield torch.ops.views_test_lib


def _groups_input(seed=0, rows=7, k=4, n=3, offs=(2, 2, 5, 7)):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, k, generator=g), torch.randn(len(offs), k, n, generator=g),
            torch.tensor(offs, dtype=torch.int32))


def _leaf(t, device):
    return t.detach().to(device, copy=True).requires_grad_()


def _close(got, want):
    torch.testing.assert_close(got.cpu() if isinstance(got, torch.Tensor) else got, want, rtol=1e-5, atol=1e-5)


# --- the lazy path --------------------------------------------------------------------------------


def test_the_operators_get_the_functionalize_kernel_and_the_cpu_keeps_its_table():
    for name in ("views_test::grouped_mm", "views_test::grouped_mm_backward", "views_test::halves"):
        assert name in torch_neuron._custom_ops.functionalized()
    # An operator that writes an argument keeps PyTorch's functionalization:
    # a kernel of its own would turn torch.compile's auto_functionalize off.
    assert "views_test::scale_rows_" not in torch_neuron._custom_ops.functionalized()
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("views_test::scale_rows_", "Functionalize")
    x = torch.arange(6.0).reshape(2, 3)  # CPU calls: the kernel that was there
    _close(halves(x), torch.tensor([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0], [3.0, 5.0, 7.0]]))


def test_a_kernel_writing_into_slices_of_a_new_tensor_in_a_loop_gives_the_cpus_values_and_grads():
    input, weight, offs = _groups_input()
    results = {}
    for device in ("cpu", N):
        i, w = _leaf(input, device), _leaf(weight, device)
        out = grouped_mm(i, w, offs.to(device))
        (out * torch.arange(3.0, device=device)).sum().backward()
        results[device] = (out.detach().cpu(), i.grad.cpu(), w.grad.cpu())
    for got, want in zip(results[N], results["cpu"]):
        _close(got, want)
    # The loop's rows beyond the last offset stay zeros, as the kernel leaves them.
    input, weight, offs = _groups_input(offs=(1, 3, 3, 5))
    _close(grouped_mm(input.to(N), weight.to(N), offs.to(N)), grouped_mm(input, weight, offs))


def test_a_kernel_writing_through_views_of_a_new_tensor_it_returns():
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    results = {}
    for device in ("cpu", N):
        xd = _leaf(x, device)
        out = halves(xd)
        (out * torch.arange(15.0, device=device).view(5, 3)).sum().backward()
        results[device] = (out.detach().cpu(), xd.grad.cpu())
    for got, want in zip(results[N], results["cpu"]):
        _close(got, want)


def test_a_library_operator_fills_a_new_tensor_through_a_view(library_ops):
    src = torch.arange(6.0).reshape(2, 3)
    _close(library_ops.padded(src.to(N), 5), library_ops.padded(src, 5))
    assert "views_test_lib::padded" in torch_neuron._custom_ops.functionalized()


def test_the_kernel_goes_with_the_library_that_registered_the_operators_kernel():
    with torch.library._scoped_library("views_test_scoped", "DEF") as lib:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")
        assert "views_test_scoped::twice" in torch_neuron._custom_ops.functionalized()
    assert "views_test_scoped::twice" not in torch_neuron._custom_ops.functionalized()


def test_a_kernel_writing_an_argument_declared_read_only_is_refused(library_ops):
    x = torch.ones(2, 3)
    _close(library_ops.sneaky(x.clone()), torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]))  # the CPU
    with pytest.raises(RuntimeError, match=r"views_test_lib::sneaky's kernel wrote into its argument 'x', "
                                           r"which its schema declares read-only"):
        library_ops.sneaky(x.to(N))


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_the_kernels_run_functionalized_without_autograd_too(mode, library_ops):
    input, weight, offs = _groups_input(seed=2)
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(3))
    guard = torch.no_grad if mode == "no_grad" else torch.inference_mode
    with guard():
        got = (grouped_mm(input.to(N), weight.to(N), offs.to(N)).cpu(), halves(x.to(N)).cpu())
        padded = library_ops.padded(x.to(N), 4).cpu()
    _close(got[0], grouped_mm(input, weight, offs))
    _close(got[1], halves(x))
    _close(padded, library_ops.padded(x, 4))


# --- under torch.compile(backend="neuron") --------------------------------------------------------


def _halves_then_scale(x):
    y = halves(x) * 2
    y[1:3] *= 0.5
    return y.sum(1)


def test_compiled_regions_calling_such_operators_give_the_cpus_values_and_grads(metrics):
    compiled = torch.compile(_halves_then_scale, backend="neuron", fullgraph=True)
    for seed in range(2):
        x = torch.randn(4, 3, generator=torch.Generator().manual_seed(seed))
        xn, xc = _leaf(x, N), _leaf(x, "cpu")
        got, want = compiled(xn), _halves_then_scale(xc)
        _close(got.detach(), want.detach())
        got.pow(2).sum().backward()
        want.pow(2).sum().backward()
        _close(xn.grad, xc.grad)
    assert metrics.counters().get("dynamo.region.run.count", 0) >= 2


def _moe_like(input, weight, offs):
    return grouped_mm(input.sin(), weight, offs).relu()


def test_a_compiled_region_run_op_by_op_calls_the_loop_kernel_on_neuron_tensors(metrics):
    compiled = torch.compile(_moe_like, backend="neuron")
    input, weight, offs = _groups_input(seed=4)
    i, w = _leaf(input, N), _leaf(weight, N)
    ic, wc = _leaf(input, "cpu"), _leaf(weight, "cpu")
    with torch_neuron.config.override(TORCH_NEURON_COMPILE_FALLBACK="1"):
        with pytest.warns(UserWarning, match="views_test.grouped_mm.*runs op by op on the lazy path"):
            got = compiled(i, w, offs.to(N))
        want = _moe_like(ic, wc, offs)
        _close(got.detach(), want.detach())
        with pytest.warns(UserWarning, match="views_test.grouped_mm_backward.*runs op by op on the lazy path"):
            got.sum().backward()
    want.sum().backward()
    _close(i.grad, ic.grad)
    _close(w.grad, wc.grad)
    assert metrics.counters().get("dynamo.region.op_by_op.count", 0) >= 1


def _scaled_copy(x):
    y = x * 1
    scale_rows_(y, [0, 2], 3.0)
    return halves(y)


def test_cpu_graphs_of_such_operators_compile_as_without_torch_neuron():
    # AOTAutograd functionalizes both on CPU tensors as PyTorch does: the
    # written-argument operator through auto_functionalize, the other through
    # the kernel that was there.
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(5))
    want = _scaled_copy(x)
    _close(torch.compile(_scaled_copy, backend="aot_eager", fullgraph=True)(x), want)


# --- transformers' mixture of experts, op by op ----------------------------------------------------


def _autograd_node_names(tensor):
    names, stack, seen = set(), [tensor.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(node.name())
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


def test_transformers_moe_through_grouped_mm_fallback_trains_as_on_cpu(monkeypatch):
    # transformers takes its custom op grouped_mm_fallback where it cannot use
    # torch's grouped_mm (under Dynamo with weights other than bfloat16, and on
    # old torch on the CPU); here on both devices, so each runs the op's loop
    # kernel (and its backward op's) on the lazy path.
    transformers = pytest.importorskip("transformers")
    import transformers.integrations.moe as moe

    monkeypatch.setattr(moe, "_can_use_grouped_mm", lambda *args: False)
    config = transformers.Qwen2MoeConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
        shared_expert_intermediate_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        num_experts=4, num_experts_per_tok=2, max_position_embeddings=32, experts_implementation="grouped_mm")
    torch.manual_seed(0)
    model = transformers.Qwen2MoeForCausalLM(config)
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(1))
    results = {}
    for device in ("cpu", N):
        m = model if device == "cpu" else copy.deepcopy(model).to(N)
        out = m(input_ids=ids.to(device), labels=ids.to(device))
        assert "GeneratedBackwardFor_transformers_grouped_mm_fallback_defaultBackward" in _autograd_node_names(out.loss)
        out.loss.backward()
        grads = {name: p.grad.cpu() for name, p in m.named_parameters() if p.grad is not None}
        results[device] = (out.logits.detach().cpu(), out.loss.detach().cpu(), grads)
    want, got = results["cpu"], results[N]
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
    assert got[2].keys() == want[2].keys() and any("experts" in name for name in want[2])
    for name in want[2]:
        torch.testing.assert_close(got[2][name], want[2][name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_chunked_linear_cross_entropy_gives_the_cpus_loss_and_grads(reduction):
    # torch.nn's chunked linear_cross_entropy: custom ops (torch_nn::) whose
    # kernels fill slices of their results chunk by chunk.
    g = torch.Generator().manual_seed(6)
    input, weight, target = torch.randn(7, 5, generator=g), torch.randn(6, 5, generator=g), torch.randint(
        0, 6, (7,), generator=g)
    options = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=2, allow_retain_graph=reduction != "none")
    results = {}
    for device in ("cpu", N):
        i, w = _leaf(input, device), _leaf(weight, device)
        loss = torch.nn.functional.linear_cross_entropy(i, w, target.to(device), reduction=reduction,
                                                        options=options)
        (loss.sum() if reduction == "none" else loss).backward()
        results[device] = (loss.detach().cpu(), i.grad.cpu(), w.grad.cpu())
    assert any(name.startswith("torch_nn::") for name in torch_neuron._custom_ops.functionalized())
    for got, want in zip(results[N], results["cpu"]):
        _close(got, want)
