"""Size-generic programs under torch.compile(backend="neuron") (issue 49, item 1).

When Dynamo makes sizes symbolic (``dynamic=True``, ``mark_dynamic``, or its
automatic dynamic shapes after a size changes), the backend traces each graph
size-generic: every SymInt argument of a traced op (a view's sizes, a slice's
bounds, a factory's sizes) is a parameter, and the graph's hash leaves out
every size. A trace at new sizes then finds the program compiled for the first
ones, in memory or on disk, and compiles nothing; each size is still traced
once, and calls at sizes already traced run without a trace.

In lazy mode, ``TORCH_NEURON_DYNAMIC_SHAPES=1`` traces every graph the same
way: a loop whose sizes change (variable lengths, routing by data) compiles
one tier-0 graph for all of them.

Graphs are counted exactly: compiles plus disk hits after emptying the
in-memory cache (tiered compilation is off in tests, conftest.py).
"""

import json

import pytest
import torch
import torch._dynamo

import torch_neuron
from child_process import run_python


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def count_graphs(metrics):
    """Graphs needed from now on that the process did not hold in memory."""
    torch_neuron._C._clear_compile_cache()
    metrics.reset()
    return lambda: metrics.counter("graph.compile.count") + metrics.counter("cache.disk_hit.count")


def regions(metrics):
    return {k: v for k, v in metrics.counters().items() if k.startswith("dynamo.region.")}


def sized(x, w):
    """Sizes in views, slices and a factory, all from the input's."""
    n = x.shape[0]
    y = torch.relu(x @ w).view(n, -1, 2).sum(-1)
    mask = torch.ones(n, y.shape[1], device=x.device).tril()
    return (y * mask).softmax(-1)[:, : n // 2], y.new_zeros(n, 3) + n


def _in_place_steps(x, w):
    g = x @ w
    a, b = g.chunk(2, dim=-1)
    # clamp with both bounds: its backward runs logical_and_ in place.
    b = b.clamp(min=-0.5, max=0.5)
    y = a * 2
    y.add_(b).clamp_(-1.0, 1.0)
    y[1:].mul_(3)
    return (y * torch.sigmoid(a)).sum()


@pytest.mark.parametrize("backend", ["aot_eager", "neuron"])
def test_in_place_ops_on_symbolic_sizes_give_the_cpus_values_and_gradients(backend):
    # Neuron's in-place checks (the CPU's overlap rules, its Meta checks) read
    # sizes(); a dynamic trace's fakes have symbolic ones, and the checks raised
    # ("Cannot call numel() on tensor with symbolic sizes", and an internal
    # assert in the backward of clamp: openai_privacy_filter under compile).
    w = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    wn = w.to("neuron").requires_grad_()
    wc = w.clone().requires_grad_()
    compiled = torch.compile(_in_place_steps, backend=backend, dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(n, 4, generator=torch.Generator().manual_seed(n))
        got = compiled(x.to("neuron"), wn)
        want = _in_place_steps(x, wc)
        got.backward()
        want.backward()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(wn.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-6)


def test_new_sizes_trace_again_but_compile_one_program(metrics):
    graphs = count_graphs(metrics)
    compiled = torch.compile(sized, backend="neuron", dynamic=True)
    w = torch.randn(8, 16)
    wn = w.to("neuron")
    for n in (4, 6, 10, 12, 7):
        x = torch.randn(n, 8)
        got = compiled(x.to("neuron"), wn)
        want = sized(x, w)
        for g, e in zip(got, want):
            assert g.shape == e.shape
            torch.testing.assert_close(g.cpu(), e)
    assert graphs() == 1
    assert regions(metrics) == {"dynamo.region.trace.count": 5}
    # A size traced before runs its program without a trace.
    x = torch.randn(6, 8)
    torch.testing.assert_close(compiled(x.to("neuron"), wn)[0].cpu(), sized(x, w)[0])
    assert regions(metrics) == {"dynamo.region.trace.count": 5, "dynamo.region.run.count": 1}
    assert graphs() == 1


def factories(x):
    """Constant factories sized by the input's length (jetmoe's router builds
    its buffers so)."""
    n = x.shape[0]
    zeros = torch.zeros(n, 3, device=x.device)
    ones = torch.ones(n, device=x.device, dtype=torch.int64)
    full = torch.full((2, n), 2.5, device=x.device)
    positions = torch.arange(n, device=x.device)
    filled = torch.empty(n, 2, device=x.device).fill_(-1.0)
    return (x[:, :3] + zeros, x.sum(-1) * ones + positions, full * x[:, 0], x.new_zeros(n, 2),
            x.new_full((n,), 4) - positions, filled, torch.ones_like(x) + x,
            torch.full((n,), n, device=x.device))


def test_factories_sized_by_the_input_run_at_new_sizes_without_a_trace(metrics):
    # A factory filled at the trace was a buffer of the traced size, a
    # constant of the program: such a trace was refused, and every length
    # traced again. As a node whose sizes are parameters it is filled when the
    # program runs, at the size it is launched with.
    graphs = count_graphs(metrics)
    compiled = torch.compile(factories, backend="neuron", dynamic=True)
    for n in (4, 7, 5, 12, 9):  # never 6: Dynamo would give both sizes one symbol
        x = torch.randn(n, 6, generator=torch.Generator().manual_seed(n))
        got = compiled(x.to("neuron"))
        want = factories(x)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            torch.testing.assert_close(g.cpu(), w)
    assert graphs() == 1
    # The first length traces; the others run its program.
    assert regions(metrics) == {"dynamo.region.trace.count": 1, "dynamo.region.run.count": 4}


def divided_by_length(x):
    return torch.arange(x.shape[0], device=x.device) + x.cumsum(0) / x.shape[0]


def test_a_size_used_as_a_tensor_value_is_traced_at_each_size(metrics):
    # x / x.shape[0] is div.Tensor(x, s0): the trace holds s0 as a constant of
    # the graph, so a program run at another length would divide by the
    # traced one. The region is traced at each new size (arange's end, a
    # Scalar, alone would be rebound: the test above).
    graphs = count_graphs(metrics)
    compiled = torch.compile(divided_by_length, backend="neuron", dynamic=True)
    for n in (3, 8, 13, 8):
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        torch.testing.assert_close(compiled(x.to("neuron")).cpu(), divided_by_length(x))
    assert graphs() == 1
    assert regions(metrics) == {"dynamo.region.trace.count": 3, "dynamo.region.run.count": 1}


def test_mark_dynamic_makes_the_first_trace_size_generic(metrics):
    graphs = count_graphs(metrics)
    compiled = torch.compile(sized, backend="neuron")
    w = torch.randn(8, 16)
    for n in (5, 9, 13):
        x = torch.randn(n, 8)
        xn = x.to("neuron")
        torch._dynamo.mark_dynamic(xn, 0)
        torch.testing.assert_close(compiled(xn, w.to("neuron"))[0].cpu(), sized(x, w)[0])
    assert graphs() == 1


def test_static_sizes_still_compile_a_program_per_size(metrics):
    graphs = count_graphs(metrics)
    compiled = torch.compile(sized, backend="neuron", dynamic=False)
    w = torch.randn(8, 16)
    for n in (4, 6):
        x = torch.randn(n, 8)
        torch.testing.assert_close(compiled(x.to("neuron"), w.to("neuron"))[0].cpu(), sized(x, w)[0])
    assert graphs() == 2


def reduce_then_view(x):
    return x.sum(0, keepdim=True).view(-1) * 2


def test_a_first_calls_result_does_not_keep_the_traced_graph(metrics):
    # A result that is a view of a value computed in the graph (a bias's
    # gradient: a keepdim sum, viewed) used to come back as traced, its base
    # holding the graph's IR: the next write through it traced the whole
    # region again on the lazy path (once per new size, and a compile each).
    compiled = torch.compile(reduce_then_view, backend="neuron", dynamic=True)
    x = torch.randn(5, 3)
    out = compiled(x.to("neuron"))
    out.add_(1)
    text = torch_neuron.debug.ir_text([out])
    assert "aten::sum" not in text and "aten::mul" not in text, text
    torch.testing.assert_close(out.cpu(), reduce_then_view(x) + 1)


def test_variable_length_training_compiles_nothing_after_the_first_two_lengths(metrics):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cpu = GPT2LMHeadModel(config)
    cpu.config._attn_implementation = "eager"
    neuron = GPT2LMHeadModel(config)
    neuron.config._attn_implementation = "eager"
    neuron.load_state_dict(cpu.state_dict())
    neuron.to("neuron")
    step = torch.compile(neuron, backend="neuron")  # Dynamo's automatic dynamic shapes
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_neuron = torch.optim.SGD(neuron.parameters(), lr=0.1)
    graphs = count_graphs(metrics)
    g = torch.Generator().manual_seed(1)
    counts = []
    for length in (8, 12, 9, 17, 23, 30, 5, 19):
        ids = torch.randint(0, 100, (2, length), generator=g)
        want = cpu(ids, labels=ids).loss
        want.backward()
        opt_cpu.step()
        opt_cpu.zero_grad()
        got = step(ids.to("neuron"), labels=ids.to("neuron")).loss
        got.backward()
        opt_neuron.step()
        opt_neuron.zero_grad()
        torch_neuron.mark_step()
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-6)
        counts.append(graphs())
    # Length 8: static programs; 12: Dynamo's dynamic recompile, size-generic
    # programs; every later length: a trace per region, no compile.
    assert counts[2:] == [counts[1]] * 6, counts
    for name, p in cpu.named_parameters():
        torch.testing.assert_close(dict(neuron.named_parameters())[name].detach().cpu(), p.detach(),
                                   rtol=1e-4, atol=1e-5)


_WORKER = """\
import json, sys, torch, torch_neuron
def f(x, w):
    n = x.shape[0]
    return torch.relu(x @ w).view(n, -1, 2).sum(-1)[:, : n // 2]
compiled = torch.compile(f, backend="neuron", dynamic=True)
w = torch.arange(128.0).reshape(8, 16) / 100
ok = []
for n in json.loads(sys.argv[1]):
    x = torch.arange(n * 8.0).reshape(n, 8) / 10
    ok.append(torch.allclose(compiled(x.to("neuron"), w.to("neuron")).cpu(), f(x, w)))
c = torch_neuron.metrics.counters()
print(json.dumps({"ok": ok, "compiles": c.get("graph.compile.count", 0),
                  "disk_hits": c.get("cache.disk_hit.count", 0)}))
"""


def test_a_second_process_runs_other_sizes_from_the_disk_cache(tmp_path):
    runs = []
    for sizes in ([4, 6], [9, 11, 14]):
        done = run_python(_WORKER, env={"TORCH_NEURON_CACHE_DIR": str(tmp_path)}, args=[json.dumps(sizes)],
                          timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first == {"ok": [True, True], "compiles": 1, "disk_hits": 0}
    # Sizes the first process never ran: its program, read from disk once.
    assert second == {"ok": [True, True, True], "compiles": 0, "disk_hits": 1}


# ------------------------------------------------- lazy mode, TORCH_NEURON_DYNAMIC_SHAPES


def lazy_lengths_run(device, lengths):
    """An MLP-and-attention-like step on batches of changing length: views,
    slices and factories sized by the length, a loss, SGD."""
    torch.manual_seed(0)
    w = torch.randn(8, 16).to(device).requires_grad_()
    losses = []
    for n in lengths:
        x = torch.randn(n, 8, generator=torch.Generator().manual_seed(n)).to(device)
        y, extra = sized(x, w)
        loss = y.sum() + extra.mean() + (x @ w).view(n, 4, 4)[:, 1:3].pow(2).mean()
        loss.backward()
        with torch.no_grad():
            w -= 0.1 * w.grad
            w.grad = None
        if device == "neuron":
            torch_neuron.mark_step()
        losses.append(loss.detach().cpu())
    return losses, w.detach().cpu()


@pytest.mark.parametrize("dynamic", ["0", "1"])
def test_lazy_mode_with_dynamic_shapes_compiles_once_for_every_length(metrics, dynamic):
    lengths = [4, 6, 9, 4, 12, 7]
    want_losses, want_w = lazy_lengths_run("cpu", lengths)
    graphs = count_graphs(metrics)
    with torch_neuron.config.override(TORCH_NEURON_DYNAMIC_SHAPES=dynamic):
        got_losses, got_w = lazy_lengths_run("neuron", lengths)
    for g, w in zip(got_losses, want_losses):
        torch.testing.assert_close(g, w)
    torch.testing.assert_close(got_w, want_w)
    # One step's graph and the loss reads' (one per length without the
    # setting, 5 lengths; one in all with it).
    assert graphs() == (1 if dynamic == "1" else 5)


def routed(x, w):
    """Rows picked by their values (a router's token choice): sizes from data."""
    picked = x[x[:, 0] > 0]
    return (picked @ w).relu().sum(0) / max(picked.shape[0], 1)


def test_lazy_mode_with_dynamic_shapes_settles_when_sizes_come_from_data(metrics):
    w = torch.randn(8, 4)
    wn = w.to("neuron")
    graphs = count_graphs(metrics)
    counts = []
    with torch_neuron.config.override(TORCH_NEURON_DYNAMIC_SHAPES="1"):
        for seed in range(6):
            x = torch.randn(16, 8, generator=torch.Generator().manual_seed(seed))
            torch.testing.assert_close(routed(x.to("neuron"), wn).cpu(), routed(x, w))
            counts.append(graphs())
    # The first call's graphs serve every later count of picked rows.
    assert counts == [counts[0]] * 6, counts


# ------------------------------- lazy mode, sizes from data (no setting needed)

EXPERTS, TOP_K, HIDDEN = 4, 2, 8


class _Expert(torch.nn.Module):
    def forward(self, x, w1, w2):
        return torch.relu(x @ w1) @ w2


class _TinyMoE(torch.nn.Module):
    """A mixture of experts routed as transformers' dbrx and switch-transformers
    route: ``torch.where`` on each expert's slice of a one-hot mask picks its
    tokens, so each expert's token count is data."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.router = torch.nn.Parameter(torch.randn(HIDDEN, EXPERTS, generator=g))
        self.w1 = torch.nn.Parameter(torch.randn(EXPERTS, HIDDEN, 16, generator=g) * 0.3)
        self.w2 = torch.nn.Parameter(torch.randn(EXPERTS, 16, HIDDEN, generator=g) * 0.3)
        self.expert = _Expert()

    def forward(self, x):
        weights, top = (x @ self.router).softmax(-1).topk(TOP_K, dim=-1)
        out = torch.zeros_like(x)
        mask = torch.nn.functional.one_hot(top, EXPERTS).permute(2, 1, 0)
        for e in range(EXPERTS):
            idx, tok = torch.where(mask[e])
            h = self.expert(x[tok], self.w1[e], self.w2[e])
            out.index_add_(0, tok, h * weights[tok, idx, None])
        return out


def moe_training(device, steps=6, graphs=None, compiled=False, traces=None):
    """SGD steps of _TinyMoE on new tokens each step: losses, parameters after,
    tokens per expert per step, and (neuron) graphs built per step (and, given
    ``traces``, a list, region traces per step appended to it)."""
    model = _TinyMoE().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    forward = torch.compile(model, backend="neuron") if compiled else model
    losses, built, counts = [], [], []
    for step in range(steps):
        x = torch.randn(12, HIDDEN, generator=torch.Generator().manual_seed(step))
        counts.append(torch.bincount((x @ model.router.detach().cpu()).topk(TOP_K, dim=-1).indices.flatten(),
                                     minlength=EXPERTS).tolist())
        before = graphs() if graphs else 0
        traced = torch_neuron.metrics.counter("dynamo.region.trace.count")
        loss = forward(x.to(device)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if device == "neuron":
            torch_neuron.mark_step()
        losses.append(loss.detach().cpu())
        if graphs:
            built.append(graphs() - before)
        if traces is not None:
            traces.append(torch_neuron.metrics.counter("dynamo.region.trace.count") - traced)
    return losses, [p.detach().cpu() for p in model.parameters()], counts, built


def test_lazy_mode_settles_when_each_experts_token_count_is_data(metrics):
    want_losses, want_params, counts, _ = moe_training("cpu")
    # The routing changes: every step gives some expert a count not seen before.
    assert all(any(c[e] not in [p[e] for p in counts[:s]] for e in range(EXPERTS))
               for s, c in enumerate(counts) if s > 0), counts
    graphs = count_graphs(metrics)
    got_losses, got_params, _, built = moe_training("neuron", graphs=graphs)
    for g, w in zip(got_losses, want_losses):
        torch.testing.assert_close(g, w)
    for g, w in zip(got_params, want_params):
        torch.testing.assert_close(g, w)
    # Ops that read a tensor whose sizes came from torch.where take their sizes
    # as parameters, and the graphs holding them are size-generic: the second
    # step's graphs serve every later count (lazy_tensor.h, size_from_data).
    # Step 1: the router's product, the loss read and the step; step 2: the
    # step again (its parameters and gradients are no longer new).
    assert built == [3, 1, 0, 0, 0, 0], built


def test_a_compiled_moe_settles_when_token_counts_are_data(metrics):
    # Under torch.compile the loop breaks Dynamo's graph at torch.where; the
    # expert's MLP is a region of its own and the loop runs lazily between.
    want_losses, want_params, _, _ = moe_training("cpu")
    graphs = count_graphs(metrics)
    traces = []
    got_losses, got_params, _, built = moe_training("neuron", graphs=graphs, compiled=True, traces=traces)
    for g, w in zip(got_losses, want_losses):
        torch.testing.assert_close(g, w)
    for g, w in zip(got_params, want_params):
        torch.testing.assert_close(g, w)
    # Step 1: the expert region's forward and backward programs (static,
    # then size-generic when Dynamo makes the count symbolic) and the lazy
    # graphs; then nothing: the lazy graphs between are size-generic.
    assert built == [10, 0, 0, 0, 0, 0], built
    # Region traces: step 1, the first expert's static trace and then one
    # size-generic trace per expert, forward and backward (each expert's
    # weights are a view at an offset of its own, part of what a trace
    # holds); step 2, the first expert, whose step-1 trace was static; from then on
    # every count runs a size-generic trace's program without a trace
    # (torch_neuron/_size_rebinding.py).
    assert traces == [8, 2, 0, 0, 0, 0], traces
