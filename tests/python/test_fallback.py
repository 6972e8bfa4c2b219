"""Ops on neuron tensors give the CPU result on the neuron device. Ordinary ops are
traced into the graph and never count as CPU fallbacks; only ops that cannot be
traced (data-dependent output shapes, no Meta kernel) run through the CPU
fallback, counted once per run by op name. TORCH_NEURON_FALLBACK=0 makes exactly
those ops raise. Tensors from another device are refused."""

import pytest
import torch
import torch.nn.functional as F

import torch_neuron


def to_neuron(value):
    return value.neuron() if isinstance(value, torch.Tensor) else value


def assert_same_as_cpu(fn, *cpu_args, exact=True):
    """Runs fn on the CPU arguments and on neuron copies; results must match and
    every neuron result must be on neuron:0."""
    expected = fn(*cpu_args)
    actual = fn(*[to_neuron(a) for a in cpu_args])
    if isinstance(expected, torch.Tensor):
        expected, actual = (expected,), (actual,)
    assert len(actual) == len(expected)
    for e, a in zip(expected, actual):
        assert a.device == torch.device("neuron:0")
        assert a.dtype == e.dtype and a.shape == e.shape
        if exact:
            assert torch.equal(a.cpu(), e)
        else:
            torch.testing.assert_close(a.cpu(), e)


def inputs(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


A, B = inputs(4, 5, seed=1), inputs(4, 5, seed=2)
W = inputs(5, 3, seed=3)
IMAGES, KERNEL = inputs(2, 3, 8, 8, seed=4), inputs(4, 3, 3, 3, seed=5)

# ------------------------------------------------------------------ op spread

OPS = {
    # elementwise
    "add": (torch.add, A, B),
    "mul_scalar": (lambda a: a * 2.5 - 1, A),
    "exp": (torch.exp, A),
    "where": (lambda a, b: torch.where(a > 0, a, b), A, B),
    "clamp": (lambda a: a.clamp(-0.5, 0.5), A),
    "int_floor_divide": (lambda t: t // 3, torch.arange(-6, 6)),
    "bitwise_and": (lambda a: a & 5, torch.arange(12)),
    "half_add": (lambda a, b: a.half() + b.half(), A, B),
    # reductions
    "sum": (lambda a: a.sum(), A),
    "mean_dim": (lambda a: a.mean(1), A),
    "max_dim": (lambda a: a.max(1), A),
    "argmax": (torch.argmax, A),
    "cumsum": (lambda a: a.cumsum(1), A),
    "any_all": (lambda a: torch.stack([(a > 2).any(), (a > -5).all()]), A),
    # linear algebra
    "matmul": (torch.matmul, A, W),
    "bmm": (lambda a: torch.bmm(a.unsqueeze(0), a.t().unsqueeze(0)), A),
    # nn
    "softmax": (lambda a: F.softmax(a, dim=-1), A),
    "log_softmax": (lambda a: F.log_softmax(a, dim=0), A),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), IMAGES),
    "layer_norm": (lambda x: F.layer_norm(x, (8,)), IMAGES),
    "embedding": (lambda w, i: F.embedding(i, w), W, torch.tensor([[0, 4], [2, 2]])),
    # indexing
    "index_cpu_indices": (lambda a: a[torch.tensor([0, 2])], A),
    "index_device_indices": (lambda a, i: a[i], A, torch.tensor([3, 1, 3])),
    "boolean_mask": (lambda a: a[a > 0], A),
    "strided_view_then_op": (lambda a: a[1::2, ::2] * a.t()[::2, 1::2].t(), A),
    "gather": (lambda a, i: a.gather(1, i), A, torch.tensor([[0], [4], [2], [1]])),
    "masked_fill": (lambda a: a.masked_fill(a < 0, 7.0), A),
    # joining
    "cat": (lambda a, b: torch.cat([a, b], 0), A, B),
    "stack": (lambda a, b: torch.stack([a, b], 1), A, B),
    # data-dependent shapes
    "nonzero": (lambda a: torch.nonzero(a > 0), A),
    "unique": (lambda t: torch.unique(t, return_inverse=True, return_counts=True),
               torch.tensor([3, 1, 2, 3, 3, 1])),
    # ordering
    "sort": (lambda a: torch.sort(a, dim=1, descending=True), A),
    "topk": (lambda a: torch.topk(a, 2), A),
    "argsort": (lambda a: a.argsort(0), A),
}


# ATen decomposes layer_norm into native_batch_norm for backends other than CPU and
# CUDA, so the neuron result may differ from CPU's fused kernel in the last bit.
# Tier 1 computes softmax over the last dim in a generated row kernel (its own
# exp and summation order), equal to CPU's within rounding, not bit for bit.
APPROXIMATE = {"layer_norm", "softmax"}

# The only ops of OPS that cannot be traced: their output shape depends on the data.
FALLBACKS = {
    "boolean_mask": {"aten::index.Tensor": 1},
    "nonzero": {"aten::nonzero": 1},
    "unique": {"aten::_unique2": 1},
}


@pytest.mark.parametrize("name", OPS.keys())
def test_op_on_neuron_equals_cpu_and_only_untraceable_ops_fall_back(name, metrics):
    fn, *args = OPS[name]
    assert_same_as_cpu(fn, *args, exact=name not in APPROXIMATE)
    assert metrics.fallback_counts() == FALLBACKS.get(name, {})


@pytest.mark.parametrize("op", ["conv1d", "conv2d", "conv_transpose2d"])
def test_convolution_on_neuron_equals_cpu_without_fallback(op, metrics):
    cases = {
        "conv1d": (lambda x, k: F.conv1d(x, k, padding=1), inputs(2, 3, 10), inputs(4, 3, 3)),
        "conv2d": (lambda x, k: F.conv2d(x, k, padding=1), IMAGES, KERNEL),
        "conv_transpose2d": (lambda x, k: F.conv_transpose2d(x, k), IMAGES, inputs(3, 2, 3, 3)),
    }
    fn, *args = cases[op]
    assert_same_as_cpu(fn, *args)
    assert metrics.fallback_counts() == {}


def test_in_place_add_updates_the_device_tensor_and_its_views():
    expected = A.clone().add_(B, alpha=2)
    actual = A.neuron()
    row = actual[2]  # a view taken before the write sees it
    returned = actual.add_(B.neuron(), alpha=2)
    assert returned is actual
    assert torch.equal(actual.cpu(), expected)
    assert torch.equal(row.cpu(), expected[2])


def test_out_variants_write_into_the_given_tensor():
    out = torch.empty(4, 5, device="neuron")
    column = out[:, 1]  # a view taken before the write sees it
    assert torch.mul(A.neuron(), B.neuron(), out=out) is out
    assert torch.equal(out.cpu(), A * B)
    assert torch.equal(column.cpu(), (A * B)[:, 1])

    resized = torch.empty(0, device="neuron")
    torch.add(A.neuron(), B.neuron(), out=resized)
    assert resized.shape == (4, 5) and torch.equal(resized.cpu(), A + B)

    values = torch.empty(4, device="neuron")
    indices = torch.empty(4, dtype=torch.int64, device="neuron")
    torch.max(A.neuron(), 1, out=(values, indices))
    assert torch.equal(values.cpu(), A.max(1).values)
    assert torch.equal(indices.cpu(), A.max(1).indices)


def test_index_put_with_cpu_and_device_indices_matches_cpu():
    expected = A.clone()
    expected[torch.tensor([0, 2])] = -1.0
    expected[expected > 1] = 0.0
    actual = A.neuron()
    actual[torch.tensor([0, 2])] = -1.0
    actual[actual > 1] = 0.0
    assert torch.equal(actual.cpu(), expected)


def test_backward_of_a_small_mlp_matches_cpu():
    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))

    torch.manual_seed(0)
    cpu_model, device_model = mlp(), mlp()
    device_model.load_state_dict(cpu_model.state_dict())
    device_model.neuron()
    x, y = inputs(6, 5, seed=7), torch.tensor([0, 2, 1, 1, 0, 2])

    cpu_loss = F.cross_entropy(cpu_model(x), y)
    cpu_loss.backward()
    device_loss = F.cross_entropy(device_model(x.neuron()), y.neuron())
    device_loss.backward()

    assert device_loss.device == torch.device("neuron:0")
    torch.testing.assert_close(device_loss.cpu(), cpu_loss)
    for (name, p_cpu), p_dev in zip(cpu_model.named_parameters(), device_model.parameters()):
        assert p_dev.grad.device == torch.device("neuron:0"), name
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, msg=name)


# ------------------------------------------------------------------- counting

def counters_without_timings(metrics):
    return {k: v for k, v in metrics.counters().items() if not k.endswith(".ns")}


def test_simple_expression_is_traced_not_run_through_the_fallback(metrics):
    a, b = A.neuron(), B.neuron()
    metrics.reset()
    result = (a * b + a).sum()
    assert counters_without_timings(metrics) == {"trace.op.count": 3}
    torch.testing.assert_close(result.cpu(), (A * B + A).sum())
    torch_neuron.wait_device_ops()  # the execution is counted after its outputs are written
    assert metrics.fallback_counts() == {}
    assert metrics.counter("graph.execute.count") == 1


def test_fallback_counts_accumulate_over_repeated_untraceable_ops(metrics):
    x = torch.tensor([0.0, 1.0, 0.0, 2.0], device="neuron")
    metrics.reset()
    results = [torch.nonzero(x) for _ in range(5)]
    for _ in range(5):
        x = x + 1  # traced: not counted
    assert metrics.fallback_counts() == {"aten::nonzero": 5}
    assert metrics.counter("trace.op.count") == 5
    assert all(torch.equal(r.cpu(), torch.tensor([[1], [3]])) for r in results)
    assert x.cpu().tolist() == [5.0, 6.0, 5.0, 7.0]


def test_report_lists_fallback_ops_with_counts(metrics):
    x = torch.tensor([0.0, 1.0, 2.0, 3.0], device="neuron")
    metrics.reset()
    torch.nonzero(x)
    torch.nonzero(x)
    torch.masked_select(x, x > 1)
    x * 2  # traced ops are not in the fallback section
    x.exp()
    lines = metrics.report().splitlines()
    assert lines[0] == "torch_neuron metrics"
    assert lines[-3:] == [
        "  CPU fallback: 3 op runs, 2 distinct ops",
        "    aten::nonzero        2",
        "    aten::masked_select  1",
    ]


def test_copies_are_not_fallbacks(metrics):
    x = torch.arange(4.0).neuron()
    x.cpu()
    x.to("neuron", torch.float64).cpu()
    assert metrics.fallback_counts() == {}


# ----------------------------------------------------------- fallback disabled

UNTRACEABLE = {
    "nonzero": (lambda a: torch.nonzero(a > 0), "aten::nonzero",
                "its output shape depends on the data"),
    "masked_select": (lambda a: torch.masked_select(a, a > 0), "aten::masked_select",
                      "its output shape depends on the data"),
    "boolean_mask_index": (lambda a: a[a > 0], "aten::index.Tensor",
                           "it has no Meta kernel for these inputs"),
}


@pytest.mark.parametrize("name", UNTRACEABLE.keys())
def test_fallback_off_raises_not_implemented_naming_the_untraceable_op(name):
    fn, op, reason = UNTRACEABLE[name]
    a, b = A.neuron(), B.neuron()
    with torch_neuron.config.override(TORCH_NEURON_FALLBACK="0") as settings:
        assert settings["allow_cpu_fallback"] is False
        with pytest.raises(NotImplementedError) as info:
            fn(a)
        assert str(info.value) == (
            f"operator {op} cannot run on the neuron device ({reason}) and the CPU fallback "
            "is off (TORCH_NEURON_FALLBACK=0)"
        )
        # Traced ops and copies do not need the fallback: they keep working.
        assert torch.equal((a + b).cpu(), A + B)
        # BLAS may order the sums of a transposed operand differently: close, not equal.
        torch.testing.assert_close((a @ b.t()).cpu(), A @ B.t())
        assert torch.equal(b.cpu(), B)
    # The override ends with the block.
    assert torch.equal(fn(a).cpu(), fn(A))


def test_fallback_off_does_not_count_the_refused_op(metrics):
    a = A.neuron()
    metrics.reset()
    with torch_neuron.config.override(TORCH_NEURON_FALLBACK="off"):
        with pytest.raises(NotImplementedError, match="aten::nonzero"):
            torch.nonzero(a)
    assert metrics.fallback_counts() == {}


# ------------------------------------------------------------- mixed devices

@pytest.mark.parametrize(
    "op",
    [
        lambda n, c: torch.add(n, c),
        lambda n, c: c + n,
        lambda n, c: torch.matmul(n, c.t()),
        lambda n, c: torch.cat([n, c]),
        lambda n, c: torch.where(n > 0, n, c),
    ],
    ids=["add", "radd", "matmul", "cat", "where"],
)
def test_non_scalar_cpu_tensor_with_neuron_tensor_raises(op):
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        op(A.neuron(), B)


def test_zero_dim_cpu_tensor_is_accepted_as_a_scalar():
    scale = torch.tensor(2.5)
    assert torch.equal((A.neuron() * scale).cpu(), A * scale)
    assert torch.equal(torch.add(A.neuron(), scale).cpu(), A + scale)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("lengths", ["cpu", "neuron", "list", "mixed"])
def test_ctc_loss_takes_its_lengths_from_the_cpu_as_cuda_does(lengths, reduction):
    # Speech recipes keep the length tensors on the CPU (CUDA's kernels read
    # them there); the values and the gradient must equal the CPU's.
    torch.manual_seed(0)
    T, N, C = 12, 3, 6
    log_probs = torch.randn(T, N, C).log_softmax(2)
    targets = torch.randint(1, C, (N, 4))
    input_lengths, target_lengths = torch.full((N,), T), torch.tensor([4, 3, 2])
    cpu_in = log_probs.clone().requires_grad_()
    expected = torch.nn.functional.ctc_loss(cpu_in, targets, input_lengths, target_lengths,
                                            reduction=reduction)
    expected.sum().backward()
    x = log_probs.to("neuron").requires_grad_()
    if lengths == "list":
        il, tl = input_lengths.tolist(), target_lengths.tolist()
    elif lengths == "mixed":
        il, tl = input_lengths, target_lengths.to("neuron")
    else:
        il, tl = input_lengths.to(lengths), target_lengths.to(lengths)
    loss = torch.nn.functional.ctc_loss(x, targets.to("neuron"), il, tl, reduction=reduction)
    loss.sum().backward()
    torch.testing.assert_close(loss.cpu(), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad.cpu(), cpu_in.grad, rtol=1e-5, atol=1e-6)
    with torch.inference_mode():  # no autograd key: the same kernel from neuron's backend key
        loss = torch.nn.functional.ctc_loss(x.detach(), targets.to("neuron"), il, tl, reduction=reduction)
    torch.testing.assert_close(loss.cpu(), expected.detach(), rtol=1e-5, atol=1e-6)


def test_tensors_on_neuron_zero_and_neuron_one_do_not_mix(two_devices):
    with pytest.raises(RuntimeError, match="neuron:0 and neuron:1"):
        torch.add(A.to("neuron:0"), B.to("neuron:1"))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(A.to("neuron:0"), W.to("neuron:1"))


def test_op_on_neuron_one_runs_there_while_current_device_is_zero(two_devices):
    a, b = A.to("neuron:1"), B.to("neuron:1")
    result = a * b + 1
    assert result.device == torch.device("neuron:1")
    assert torch.equal(result.cpu(), A * B + 1)


def test_data_dependent_ops_in_a_loop_match_cpu_and_counters_say_what_ran(metrics):
    # Boolean indexing, masked_select, nonzero and unique run on the CPU (their
    # output shape depends on the data) and return to the device; the lazy ops
    # after them compile once per distinct output size and hit the cache after.
    steps = [torch.tensor([1., -2, 3, -4, 5, -6]), torch.tensor([1., 2, 3, 4, 5, -6]),
             torch.tensor([-1., 2, -3, 4, 5, -6])]

    def step(y):
        return (y[y > 0] * 2 + 1, torch.masked_select(y, y < 0).sum(),
                torch.nonzero(y > 2).squeeze(1) + 10, torch.unique(y.abs().round()))

    compiles, hits = [], []
    for x in steps:
        results = step(x.neuron())
        torch_neuron.mark_step()
        for got, want in zip(results, step(x)):
            assert got.device == torch.device("neuron:0")
            assert torch.equal(got.cpu(), want)
        compiles.append(metrics.counter("graph.compile.count"))
        hits.append(metrics.counter("graph.cache_hit.count"))
    # Step 1: each fallback first runs the graph of its input (4 graphs), then
    # mark_step compiles the rest (selected sizes 3 and 2), size-generic: its
    # tensors' sizes came from data (issue 49). Step 2: the 4 input graphs hit
    # the cache, and so does the rest at the new sizes (5 and 3). Step 3:
    # everything hits.
    assert compiles == [5, 5, 5]
    assert hits == [0, 5, 10]
    assert metrics.fallback_counts() == {"aten::index.Tensor": 3, "aten::masked_select": 3,
                                         "aten::nonzero": 3, "aten::_unique2": 3}


# nn.EmbeddingBag's op returns, beside the bags, bookkeeping tensors whose sizes
# the CPU kernel picks by its code path (offset2bag is empty on the sum fast
# path, bag_size counts offsets or bags) where torch's Meta kernel always gives
# one answer. The device must return what the CPU returns: it refused its own
# outputs for max mode, include_last_offset, padding_idx and int32 offsets.
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("padding_idx", [None, 1])
@pytest.mark.parametrize("index_dtypes", [(torch.int64, torch.int64), (torch.int32, torch.int32),
                                          (torch.int32, torch.int64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_embedding_bag_returns_what_the_cpu_returns(mode, include_last_offset, padding_idx, index_dtypes, dtype,
                                                    metrics):
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(6, 3, dtype=dtype, generator=g)
    indices = torch.tensor([0, 2, 1, 5, 3, 1, 4], dtype=index_dtypes[0])
    # Four bags, an empty one included; with include_last_offset the offsets end
    # at len(indices) (indices past the last offset are in no bag: the CPU's
    # backward reads past its gradient for them).
    offsets = torch.tensor([0, 2, 2, 5] + [7] * include_last_offset, dtype=index_dtypes[1])
    samples = torch.rand(7, dtype=dtype, generator=g) if mode == "sum" else None
    args = (False, ["sum", "mean", "max"].index(mode), False)
    tail = (include_last_offset, -1 if padding_idx is None else padding_idx)
    for op in (torch.ops.aten._embedding_bag, torch.ops.aten._embedding_bag_forward_only):
        expected = op(weight, indices, offsets, *args, samples, *tail)
        actual = op(weight.neuron(), indices.neuron(), offsets.neuron(), *args,
                    None if samples is None else samples.neuron(), *tail)
        # max_indices holds values only in max mode (the CPU leaves it unwritten otherwise)
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert (a.shape, a.dtype) == (e.shape, e.dtype), (op.__name__, i)
            if i < 3 or mode == "max":
                assert torch.equal(a.cpu(), e), (op.__name__, i)

    # The module, trained one step: the forward's bookkeeping feeds the backward.
    bag = torch.nn.EmbeddingBag(6, 3, mode=mode, include_last_offset=include_last_offset, padding_idx=padding_idx,
                                dtype=dtype)
    with torch.no_grad():
        bag.weight.copy_(weight)
    on_neuron = torch.nn.EmbeddingBag(6, 3, mode=mode, include_last_offset=include_last_offset,
                                      padding_idx=padding_idx, dtype=dtype).neuron()
    with torch.no_grad():
        on_neuron.weight.copy_(weight.neuron())
    kwargs = dict(per_sample_weights=samples) if samples is not None else {}
    bag(indices, offsets, **kwargs).square().sum().backward()
    kwargs = dict(per_sample_weights=samples.neuron()) if samples is not None else {}
    on_neuron(indices.neuron(), offsets.neuron(), **kwargs).square().sum().backward()
    torch.testing.assert_close(on_neuron.weight.grad.cpu(), bag.weight.grad, rtol=1e-6, atol=1e-6)
    assert metrics.fallback_counts() == {}


# nansum over an empty dim list reduces every dim on the CPU, as sum does;
# torch's Meta kernel reduced none, and the device refused its own result.
@pytest.mark.parametrize("dim,keepdim", [([], False), ([], True), ([1], False), (None, False)])
def test_nansum_reduces_the_dims_the_cpu_reduces(dim, keepdim, metrics):
    x = torch.tensor([[1.0, float("nan")], [3.0, 4.0]])
    expected = torch.nansum(x, dim=dim, keepdim=keepdim)
    actual = torch.nansum(x.neuron(), dim=dim, keepdim=keepdim).cpu()
    assert actual.shape == expected.shape and torch.equal(actual, expected)
    assert metrics.fallback_counts() == {}


# multilabel_margin_loss of one sample (a 1-d or 0-dim input) is 0-dim on the
# CPU whatever the reduction; torch's Meta kernel said [1] without one, and the
# graph failed at the sync ("produced output 0 with sizes [], expected [1]").
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shape", [(4,), (), (2, 4)])
def test_multilabel_margin_loss_has_the_cpus_shapes(shape, reduction, metrics):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen, requires_grad=True)
    target = torch.tensor([3, 0, -1, 1]) if len(shape) == 1 else (
        torch.tensor(0) if not shape else torch.tensor([[3, 0, -1, 1], [1, -1, 2, 2]]))
    expected = torch.nn.functional.multilabel_margin_loss(x, target, reduction=reduction)
    expected.sum().backward()
    x_neuron = x.detach().neuron().requires_grad_()
    actual = torch.nn.functional.multilabel_margin_loss(x_neuron, target.neuron(), reduction=reduction)
    assert actual.shape == expected.shape
    actual.sum().backward()
    torch.testing.assert_close(actual.cpu(), expected.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(x_neuron.grad.cpu(), x.grad, rtol=1e-6, atol=1e-6)
    # The forward is traced (the backward has no Meta kernel: the CPU's runs).
    assert metrics.fallback_counts() == {"aten::multilabel_margin_loss_backward": 1}


# An input the CPU kernel sees expanded (a sum's gradient is ones expanded to the
# input's shape): the fallback gives the CPU kernel the same strides, and the
# copy into them failed ("more than one element of the written-to tensor refers
# to a single memory location").
def test_fallback_gives_the_cpu_kernel_an_expanded_input_with_its_values(metrics):
    base = torch.tensor([[0.0], [2.0], [3.0]])
    expected = torch.nonzero(base.expand(3, 4))
    actual = torch.nonzero(base.neuron().expand(3, 4))
    assert torch.equal(actual.cpu(), expected)
    # A view that is offset and expanded: values land at their storage indices.
    wide = (torch.arange(6.0).view(2, 3) - 1)[:, :2].unsqueeze(1).expand(2, 3, 2)
    assert torch.equal(torch.nonzero(wide.neuron()).cpu(), torch.nonzero(wide))
    assert metrics.fallback_counts() == {"aten::nonzero": 2}


# Sparse gradients (Embedding(sparse=True)) would be a sparse neuron tensor: the
# op that makes one is refused at the call, naming it, not traced into a graph
# that fails when it runs.
def test_sparse_gradient_is_refused_at_the_backward_naming_the_op():
    bag = torch.nn.EmbeddingBag(5, 2, mode="sum", sparse=True).neuron()
    out = bag(torch.tensor([3, 1, 4], device="neuron"), torch.tensor([0, 1], device="neuron"))
    with pytest.raises(NotImplementedError, match=r"sparse layouts are not supported.*_embedding_bag_backward"):
        out.sum().backward()
    embedding = torch.nn.Embedding(5, 2, sparse=True).neuron()
    with pytest.raises(NotImplementedError, match="sparse layouts are not supported"):
        embedding(torch.tensor([1, 2], device="neuron")).sum().backward()


@pytest.mark.parametrize("which", ["input_lengths", "target_lengths"])
def test_ctc_loss_refuses_lengths_that_are_not_integers_as_the_cpu_does(which):
    log_probs = torch.randn(6, 2, 4).log_softmax(2)
    targets = torch.randint(1, 4, (2, 3))
    lengths = {"input_lengths": torch.full((2,), 6), "target_lengths": torch.tensor([3, 2])}
    lengths[which] = lengths[which].float()

    def message(device):
        with pytest.raises(RuntimeError) as error:
            torch.nn.functional.ctc_loss(log_probs.to(device), targets.to(device), **lengths)
        return str(error.value).splitlines()[0]

    assert message("neuron") == message("cpu") == f"{which} must be integral"


@pytest.mark.parametrize("op", ["_foreach_addcdiv", "_foreach_addcmul", "_foreach_addcdiv_", "_foreach_addcmul_"])
@pytest.mark.parametrize("scalars", ["ok", "neuron", "2d", "short", "strided"])
@pytest.mark.parametrize("inference", [False, True], ids=["grad_mode", "inference_mode"])
def test_foreach_ops_with_packed_scalars_match_the_cpu(op, scalars, inference):
    torch.manual_seed(0)
    cpu = [[torch.randn(3) + 2 for _ in range(2)] for _ in range(3)]
    packed = {"ok": torch.tensor([0.5, -2.0]), "neuron": torch.tensor([0.5, -2.0]),
              "2d": torch.ones(2, 1), "short": torch.ones(1), "strided": torch.ones(4)[::2]}[scalars]

    def run(device):
        lists = [[t.clone().to(device) for t in ts] for ts in cpu]
        given = packed.to("neuron") if scalars == "neuron" and device == "neuron" else packed
        try:
            with torch.inference_mode(inference):
                out = getattr(torch, op)(*lists, given)
        except RuntimeError as error:
            return str(error).splitlines()[0]
        return [t.cpu() for t in (lists[0] if op.endswith("_") else out)]

    expected, got = run("cpu"), run("neuron")
    if scalars == "neuron":  # a neuron tensor where the CPU takes a CPU one: the device's name differs
        assert got == "Expected scalars to be on CPU, got neuron:0 instead."
        return
    if isinstance(expected, str):
        assert got == expected
    else:
        torch.testing.assert_close(got, expected)
