"""torch.compile(backend="neuron"): graphs traced once and run as programs
(issue 47; csrc/dynamo/compiled_graph.h), each result against the CPU's.

A graph's first call at given input shapes is traced into one program; later
calls bind their inputs and run it with nothing traced. These tests count the
regions traced and run exactly, and cover inputs written in place, views and
constants among the results, random ops, graphs that cannot be one program
(an op reading a value), library ops rewritten to static forms, streams, and
copies between graphs. The rest of torch.compile on neuron tensors is in
test_torch_compile.py.
"""

import re

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch._dynamo.utils import counters

import torch_neuron
from child_process import run_python


# Dynamo reset around each test, and no AOTAutograd failure (conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_dynamo")



def _region_counters(metrics):
    return {k: v for k, v in metrics.counters().items() if k.startswith("dynamo.region.")}


def _bump(buf, x):
    buf.add_(x)
    return buf * 2


def test_an_input_written_in_place_takes_each_calls_value_and_its_views_follow(metrics):
    compiled = torch.compile(_bump, backend="neuron")
    cpu_buf = torch.zeros(3)
    buf = cpu_buf.to("neuron")
    view, cpu_view = buf[1:], cpu_buf[1:]  # alive across the calls
    for seed in range(3):
        x = torch.randn(3, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            got, want = compiled(buf, x.to("neuron")), _bump(cpu_buf, x)
        assert torch.equal(got.cpu(), want)
        assert torch.equal(buf.cpu(), cpu_buf) and torch.equal(view.cpu(), cpu_view)
    assert _region_counters(metrics) == {"dynamo.region.trace.count": 1, "dynamo.region.run.count": 2}


def _views_and_constants(x):
    return x.t(), x[1], x + torch.tensor([1.0, 2.0, 3.0], device=x.device), x


def test_results_that_are_views_inputs_or_constants_report_what_the_cpu_reports(metrics):
    compiled = torch.compile(_views_and_constants, backend="neuron")
    for seed in range(3):
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(seed))
        for got, want in zip(compiled(x.to("neuron")), _views_and_constants(x)):
            assert torch.equal(got.cpu(), want)
            assert (got.shape, got.stride(), got.storage_offset()) == (want.shape, want.stride(), want.storage_offset())
    assert _region_counters(metrics) == {"dynamo.region.trace.count": 1, "dynamo.region.run.count": 2}


def _dropout(x):
    return F.dropout(x, 0.5, training=True) * 3


def test_random_ops_of_a_program_draw_what_the_cpu_draws_on_every_call(metrics):
    compiled = torch.compile(_dropout, backend="neuron")
    xs = [torch.randn(16, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    torch.manual_seed(5)
    want = [_dropout(x) for x in xs]
    torch.manual_seed(5)
    got = [compiled(x.to("neuron")).cpu() for x in xs]
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert _region_counters(metrics) == {"dynamo.region.trace.count": 1, "dynamo.region.run.count": 2}


def test_inputs_sharing_a_buffer_get_a_trace_of_their_own(metrics):
    # Dynamo guards on aliasing as well; the program's check is the second line.
    compiled = torch.compile(lambda a, b: a + b, backend="neuron")
    x, y = torch.randn(4, device="neuron"), torch.randn(4, device="neuron")
    assert torch.equal(compiled(x, y).cpu(), x.cpu() + y.cpu())
    assert torch.equal(compiled(x, x).cpu(), 2 * x.cpu())
    assert torch.equal(compiled(y, x).cpu(), x.cpu() + y.cpu())
    assert _region_counters(metrics) == {"dynamo.region.trace.count": 2, "dynamo.region.run.count": 1}


@torch.library.custom_op("torch_neuron_test::scale_by_max", mutates_args=())
def _scale_by_max(x: torch.Tensor) -> torch.Tensor:
    return x / x.abs().max().item()  # reads a value: cannot be part of a program


@_scale_by_max.register_fake
def _(x):
    return torch.empty_like(x)


def _reads_a_value(a):
    b = a.sin()
    return _scale_by_max(b) + 1


def test_a_graph_that_cannot_be_one_program_names_its_op_and_the_users_line(metrics):
    compiled = torch.compile(_reads_a_value, backend="neuron")
    line = _reads_a_value.__code__.co_firstlineno + 2
    with pytest.raises(NotImplementedError) as info:
        compiled(torch.randn(4, device="neuron"))
    message = str(info.value)
    assert "torch_neuron_test.scale_by_max.default" in message, message
    assert f"{__file__}:{line}" in message and "TORCH_NEURON_COMPILE_FALLBACK=1" in message, message
    assert _region_counters(metrics) == {}


def test_compile_fallback_runs_such_a_graph_op_by_op_with_a_warning(metrics):
    compiled = torch.compile(_reads_a_value, backend="neuron")
    with torch_neuron.config.override(TORCH_NEURON_COMPILE_FALLBACK="1"):
        for seed in range(3):
            x = torch.randn(4, generator=torch.Generator().manual_seed(seed))
            if seed == 0:
                with pytest.warns(UserWarning, match="scale_by_max.*runs op by op on the lazy path"):
                    got = compiled(x.to("neuron"))
            else:
                got = compiled(x.to("neuron"))
            torch.testing.assert_close(got.cpu(), _reads_a_value(x))
    assert _region_counters(metrics) == {"dynamo.region.op_by_op.count": 3}


def _one_hot_scores(x, labels):
    return F.one_hot(labels, 5).float() * x  # decomposed with two _assert_async.msg range checks


def _cpu_error(fn, *args):
    with pytest.raises(RuntimeError) as info:
        fn(*args)
    return str(info.value)


def test_a_tensor_assert_compiles_into_the_program_and_gives_the_cpus_result(metrics):
    compiled = torch.compile(_one_hot_scores, backend="neuron")
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        x, labels = torch.randn(4, 5, generator=gen), torch.randint(0, 5, (4,), generator=gen)
        assert torch.equal(compiled(x.to("neuron"), labels.to("neuron")).cpu(), _one_hot_scores(x, labels))
    # One program, traced once: the asserts are part of it, nothing ran op by op.
    assert _region_counters(metrics) == {"dynamo.region.trace.count": 1, "dynamo.region.run.count": 2}


def test_a_failed_tensor_assert_raises_its_message_at_the_next_read_or_sync(metrics):
    compiled = torch.compile(_one_hot_scores, backend="neuron")
    x, good, bad = torch.randn(4, 5), torch.tensor([0, 3, 4, 1]), torch.tensor([0, 3, 7, 1])
    # The CPU under torch.compile raises the decomposition's message at the call.
    expected = _cpu_error(torch.compile(_one_hot_scores, backend="aot_eager"), x, bad)
    assert expected == "one_hot: Class values must be smaller than num_classes."
    compiled(x.to("neuron"), good.to("neuron"))

    # Asynchronous, as CUDA's device asserts: the call returns; reading its
    # result raises, and so does what was computed from it.
    result = compiled(x.to("neuron"), bad.to("neuron"))
    derived = result * 2
    for tensor in (result, derived):
        with pytest.raises(RuntimeError, match=re.escape(expected)):
            tensor.cpu()
    # Unread, the next synchronization raises it, once.
    compiled(x.to("neuron"), bad.to("neuron"))
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        torch.neuron.synchronize()
    torch.neuron.synchronize()
    # Later calls are unaffected.
    assert torch.equal(compiled(x.to("neuron"), good.to("neuron")).cpu(), _one_hot_scores(x, good))
    assert _region_counters(metrics) == {"dynamo.region.trace.count": 1, "dynamo.region.run.count": 3}


def _positive_sum_doubled(t):
    torch._assert_async(t.sum() > 0, "the sum must be positive")
    return t * 2


def test_a_tensor_assert_on_the_lazy_path_still_reads_its_value_at_the_call():
    expected = _cpu_error(_positive_sum_doubled, -torch.ones(3))
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        _positive_sum_doubled(-torch.ones(3, device="neuron"))
    assert torch.equal(_positive_sum_doubled(torch.ones(3, device="neuron")).cpu(), torch.full((3,), 2.0))


def test_a_tensor_assert_in_a_captured_step_checks_every_replay():
    x, out = torch.ones(3, device="neuron"), torch.empty(3, device="neuron")
    g = torch_neuron.NeuronGraph()
    with torch_neuron.graph(g):
        out.copy_(_positive_sum_doubled(x))
    for value in (1.0, -1.0, 2.0):
        x.copy_(torch.full((3,), value))
        g.replay()
        if value > 0:
            assert torch.equal(out.cpu(), _positive_sum_doubled(torch.full((3,), value)))
        else:
            expected = _cpu_error(_positive_sum_doubled, torch.full((3,), value))
            with pytest.raises(RuntimeError, match=re.escape(expected)):
                torch.neuron.synchronize()
            with pytest.raises(RuntimeError, match=re.escape(expected)):
                out.cpu()


def test_a_tensor_assert_of_more_than_one_value_raises_the_cpus_error_at_the_call():
    compiled = torch.compile(lambda t: (torch._assert_async(t > 0, "m"), t + 1)[1], backend="neuron")
    expected = _cpu_error(torch.compile(lambda t: (torch._assert_async(t > 0, "m"), t + 1)[1], backend="aot_eager"),
                          torch.ones(2))
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        compiled(torch.ones(2, device="neuron"))


def _moe_inputs(seed, rows=9, k=5, n=3, groups=4):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=gen)
    w = torch.randn(groups, k, n, generator=gen)
    # Group 1 empty; the last two rows in no group (past offs[-1]), as an
    # expert-parallel layer's sentinel rows are.
    offs = torch.tensor([3, 3, 5, 7], dtype=torch.int32)
    return x, w, offs


def test_static_forms_compute_what_transformers_grouped_mm_fallback_computes():
    from transformers.integrations import moe  # noqa: F401  (registers the operators)
    from torch_neuron import _static_forms

    for seed in range(3):
        x, w, offs = _moe_inputs(seed)
        g = torch.randn(x.shape[0], w.shape[2], generator=torch.Generator().manual_seed(10 + seed))
        torch.testing.assert_close(_static_forms.grouped_mm(x, w, offs),
                                   torch.ops.transformers.grouped_mm_fallback(x, w, offs))
        for got, want in zip(_static_forms.grouped_mm_backward(x, w, offs, g),
                              torch.ops.transformers.grouped_mm_fallback_backward(x, w, offs, g)):
            torch.testing.assert_close(got, want)


def _experts(x, w, offs):
    return torch.ops.transformers.grouped_mm_fallback(x, w, offs).tanh().sum()


def test_transformers_grouped_mm_fallback_compiles_into_programs_forward_and_backward(metrics):
    from transformers.integrations import moe  # noqa: F401

    compiled = torch.compile(_experts, backend="neuron")
    for seed in range(3):
        x, w, offs = _moe_inputs(seed)
        xn, wn = x.to("neuron").requires_grad_(), w.to("neuron").requires_grad_()
        x.requires_grad_(), w.requires_grad_()
        got, want = compiled(xn, wn, offs.to("neuron")), _experts(x, w, offs)
        got.backward(), want.backward()
        torch.testing.assert_close(got.cpu(), want.detach())
        torch.testing.assert_close(xn.grad.cpu(), x.grad)
        torch.testing.assert_close(wn.grad.cpu(), w.grad)
    # A forward and a backward program, each traced once; nothing op by op.
    assert _region_counters(metrics) == {"dynamo.region.trace.count": 2, "dynamo.region.run.count": 4}


def test_eager_mode_runs_a_compiled_graph_op_by_op(metrics):
    compiled = torch.compile(lambda a: a.exp() * 2, backend="neuron")
    x = torch.randn(5)
    with torch_neuron.mode("eager"):
        got = compiled(x.to("neuron")).cpu()
    torch.testing.assert_close(got, x.exp() * 2)
    assert _region_counters(metrics) == {"dynamo.region.op_by_op.count": 1}


def test_dynamo_finds_the_neuron_device_interface_once_it_is_imported():
    done = run_python(
        "import sys, torch, torch_neuron\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "from torch._dynamo.device_interface import get_interface_for_device\n"
        "i = get_interface_for_device('neuron')\n"
        "assert get_interface_for_device('neuron:0') is i\n"
        "print(i.device_count() == torch.neuron.device_count(), i.current_device(), i.is_available(),\n"
        "      i.get_raw_stream(0), i.current_stream() == torch.neuron.current_stream())\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-5:] == ["True", "0", "True", "0", "True"]


def _on_a_stream(a):
    with torch.neuron.stream(torch.neuron.current_stream()):
        b = a * 2
    return b + 1


def test_a_stream_inside_a_region_breaks_the_graph_and_gives_the_cpus_result():
    # Dynamo inlines torch.neuron's stream calls (they are not torch.* in-graph
    # functions as CUDA's are), so it breaks the graph there.
    x = torch.randn(4)
    got = torch.compile(_on_a_stream, backend="neuron")(x.to("neuron"))
    assert torch.equal(got.cpu(), x * 2 + 1)
    assert sum(counters["graph_break"].values()) > 0


def _copies_between_graphs(a, b):
    c = a * 2
    print("between graphs")  # a graph break: what follows until the next graph runs as Python
    b.copy_(c)
    return b + 1


def test_torch_neurons_own_python_run_between_graphs_is_not_compiled_by_dynamo(capsys):
    a = torch.randn(4)
    b = torch.zeros(4, device="neuron")
    got = torch.compile(_copies_between_graphs, backend="neuron")(a.to("neuron"), b)
    assert torch.equal(got.cpu(), a * 2 + 1) and torch.equal(b.cpu(), a * 2)
    skip = torch._dynamo.trace_rules.check_file(torch_neuron._patches.__file__)
    assert skip.skipped, skip


# Inputs that are views of a parameter (issue 47, DBRX's per-expert weights):
# read in a trace, a functional view could be regenerated from its base, whose
# buffer the program then kept as a constant, so later calls read the weights
# as they were at the trace.


def _expert(x, a):
    return x @ a.t()


@pytest.mark.parametrize("dynamic", [True, False])
def test_slices_of_a_tensor_written_between_calls_read_its_new_values(dynamic):
    compiled = torch.compile(_expert, backend="neuron", dynamic=dynamic)
    w = torch.randn(3 * 4, 3, generator=torch.Generator().manual_seed(0))
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
    wn, xn = w.to("neuron"), x.to("neuron")
    for step in range(3):
        for i in (1, 0, 2):
            version = wn._version
            got = compiled(xn, wn.view(3, 4, 3)[i])
            assert torch.equal(got.cpu(), _expert(x, w.view(3, 4, 3)[i])), (step, i)
            assert wn._version == version  # read, not written (as on the CPU)
        for i in (2, 1):  # strided and offset slices too
            got = compiled(xn, wn[i::3].t().t())
            assert torch.equal(got.cpu(), _expert(x, w[i::3])), (step, i)
        w.add_(0.5)
        wn.add_(0.5)


def _scale_into(a, s):
    a.mul_(s)
    return a + 1


def test_a_slice_written_in_place_writes_into_its_base_on_every_call():
    compiled = torch.compile(_scale_into, backend="neuron", dynamic=True)
    cpu = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    dev = cpu.to("neuron")
    for step in range(2):
        for i in (1, 0, 2):
            got, want = compiled(dev[i], torch.tensor(1.5 + i, device="neuron")), _scale_into(cpu[i], 1.5 + i)
            assert torch.equal(got.cpu(), want) and torch.equal(dev.cpu(), cpu), (step, i)
        cpu.sub_(0.25)
        dev.sub_(0.25)


class _GLU(torch.nn.Module):
    def __init__(self, experts, ffn, hidden):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.w1 = torch.nn.Parameter(torch.randn(experts * ffn, hidden, generator=g) * 0.3)
        self.v1 = torch.nn.Parameter(torch.randn(experts * ffn, hidden, generator=g) * 0.3)
        self.w2 = torch.nn.Parameter(torch.randn(experts * ffn, hidden, generator=g) * 0.3)

    def forward(self, x, w1, v1, w2):
        return (F.silu(x @ w1.T) * (x @ v1.T)) @ w2


class _Experts(torch.nn.Module):
    """DBRX's expert loop: each hit expert's weights are slices of the
    parameters, its tokens a data-dependent gather."""

    def __init__(self, experts=3, ffn=16, hidden=8):
        super().__init__()
        self.experts, self.ffn, self.hidden = experts, ffn, hidden
        self.mlp = _GLU(experts, ffn, hidden)
        self.router = torch.nn.Linear(hidden, experts, bias=False)
        with torch.no_grad():
            self.router.weight.copy_(torch.randn(experts, hidden, generator=torch.Generator().manual_seed(4)))

    def forward(self, h):
        top = self.router(h).topk(2, dim=-1)
        weights = top.values.softmax(-1)
        out = torch.zeros_like(h)
        with torch.no_grad():
            mask = F.one_hot(top.indices, num_classes=self.experts + 1).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        split = (-1, self.ffn, self.hidden)
        for e in hit:
            e = e[0]
            with torch.no_grad():
                idx, tok = torch.where(mask[e])
            w1, v1, w2 = (p.view(split)[e] for p in (self.mlp.w1, self.mlp.v1, self.mlp.w2))
            states = self.mlp(h[tok], w1, v1, w2) * weights[tok, idx, None]
            out.index_add_(0, tok, states)
        return out


def test_expert_weights_sliced_from_parameters_train_as_on_the_cpu():
    cpu = _Experts()
    dev = _Experts().to("neuron")
    compiled = torch.compile(dev, backend="neuron")
    x = torch.randn(10, 8, generator=torch.Generator().manual_seed(5))
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.05)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=0.05)
    for step in range(5):
        want = cpu(x).pow(2).sum()
        want.backward()
        got = compiled(x.to("neuron")).pow(2).sum()
        got.backward()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6, msg=f"loss at step {step}")
        for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6, msg=f"{name}.grad at step {step}")
        opt_cpu.step()
        opt_dev.step()
        opt_cpu.zero_grad()
        opt_dev.zero_grad()
