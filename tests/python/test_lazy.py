"""The lazy device as Python sees it: ops are traced into a graph and run only at a
sync point; a graph is compiled once and then found in the cache (Python scalars
are graph inputs, shapes are not); the pending graph prints as IR text; eager
mode runs every op at once; an error of a queued graph surfaces at the next sync.

Counter checks wait for queued graphs first (the ``quiet`` fixture): executions
run on the device's own thread and would otherwise land in the middle of a test.
"""

import gc
import inspect

import pytest
import torch

import torch_neuron
from child_process import run_python

EMPTY_GRAPH = "graph {\n  return ()\n}\n"


@pytest.fixture
def quiet(metrics):
    """No pending or queued work and zeroed counters: exact deltas from here."""
    gc.collect()  # pending tensors of earlier tests would join this test's mark_step
    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()
    metrics.reset()
    return metrics


def counts(metrics):
    """The counters of tracing, graphs, steps, transfers and fallbacks, without
    timings, node totals and memory high-water marks (the compile cache's own
    cache.* counters aside)."""
    events = ("fallback.", "graph.", "mark_step.", "trace.", "transfer.")
    return {
        k: v
        for k, v in metrics.counters().items()
        if k.startswith(events) and not k.endswith((".ns", ".nodes", ".peak_bytes", ".peak_total_bytes"))
    }


def materialized(cpu: torch.Tensor) -> torch.Tensor:
    t = cpu.to("neuron")
    torch_neuron.wait_device_ops()
    return t


# ------------------------------------------------------- nothing runs before a sync

def test_ops_are_traced_and_run_only_at_a_sync(quiet):
    x_cpu = torch.arange(18.0).reshape(2, 9) / 9  # a shape of this test only: it compiles
    x = materialized(x_cpu)
    quiet.reset()
    y = (x * 2 + 1).exp()
    assert counts(quiet) == {"trace.op.count": 3}  # no compile, no execution, no transfer
    assert torch_neuron.debug.ir_text([y]) != EMPTY_GRAPH

    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()
    assert counts(quiet) == {
        "trace.op.count": 3,
        "mark_step.count": 1,
        "graph.sync.count": 1,
        "graph.compile.count": 1,
        "graph.compile_request.count": 1,  # the missed graph, written out for the compiler once
        "graph.execute.count": 1,
    }
    assert torch_neuron.debug.ir_text([y]) == EMPTY_GRAPH  # y is device data now

    quiet.reset()
    torch.testing.assert_close(y.cpu(), (x_cpu * 2 + 1).exp())
    # Reading materialized data is a transfer, not another graph.
    assert counts(quiet) == {
        "transfer.device_to_host.count": 1,
        "transfer.device_to_host.bytes": 72,
    }


SYNC_POINTS = {
    "cpu": lambda t: t.cpu().tolist(),
    "item": lambda t: t.item(),
    "tolist": lambda t: t.tolist(),
    "bool": lambda t: bool(t),
}
EXPECTED = {
    "cpu": [7.0],
    "item": 7.0,
    "tolist": [7.0],
    "bool": True,
}


@pytest.mark.parametrize("name", SYNC_POINTS.keys())
def test_reading_a_value_syncs_its_graph_once(quiet, name):
    x = materialized(torch.tensor([3.0]))
    quiet.reset()
    y = x * 2 + 1
    assert SYNC_POINTS[name](y) == EXPECTED[name]
    assert torch_neuron.debug.ir_text([y]) == EMPTY_GRAPH
    torch_neuron.wait_device_ops()  # the execution is counted after its outputs are written
    assert quiet.counter("graph.sync.count") == 1
    assert quiet.counter("graph.execute.count") == 1


def test_iterating_over_a_pending_vector_runs_its_graph_once(quiet):
    # Each element's .item() ran the vector's whole graph again (a graph per
    # element: PyTorch's linspace test timed out in all(y[:-1] < y[1:])).
    x = torch.linspace(-3, 5, 2001)
    expected = [bool(c) for c in x[:-1] < x[1:] * 0.999]
    y = materialized(x)
    quiet.reset()
    cond = y[:-1] < y[1:] * 0.999
    assert [bool(c) for c in cond] == expected
    assert cond[-1].item() == expected[-1] and cond[7].item() == expected[7]
    torch_neuron.wait_device_ops()
    assert quiet.counter("graph.sync.count") == 1
    assert quiet.counter("transfer.device_to_host.count") == 2000 + 2  # one element each


def test_elements_read_from_a_buffer_see_later_writes_as_on_the_cpu(quiet):
    results = {}
    for device in ("cpu", "neuron"):
        v = torch.tensor([3.0, -1.0, 7.0], device=device)
        first = [x.item() for x in v]
        parts = list(v)
        e = v[-1]
        v.add_(1)
        results[device] = (first, [p.item() for p in parts], e.item(), v[0].item())
    assert results["neuron"] == results["cpu"]


def test_printing_a_pending_tensor_materializes_it(quiet):
    x = materialized(torch.tensor([3.0]))
    quiet.reset()
    y = x * 2 + 1
    assert repr(y) == "tensor([7.], device='neuron:0')"
    assert y.cpu().tolist() == [7.0]
    torch_neuron.wait_device_ops()
    assert quiet.counter("graph.execute.count") == 1
    assert torch_neuron.debug.ir_text([y]) == EMPTY_GRAPH


def test_sync_of_chosen_tensors_leaves_the_others_pending(quiet):
    x = materialized(torch.arange(4.0))
    a, b = x * 3, x + 4
    torch_neuron.sync(a)
    torch_neuron.wait_device_ops()
    assert torch_neuron.debug.ir_text([a]) == EMPTY_GRAPH
    assert "aten::add.Tensor" in torch_neuron.debug.ir_text([b])
    assert quiet.counter("graph.execute.count") == 1
    assert torch.equal(a.cpu(), torch.arange(4.0) * 3)
    assert torch.equal(b.cpu(), torch.arange(4.0) + 4)
    torch_neuron.wait_device_ops()
    assert quiet.counter("graph.execute.count") == 2


def test_mark_step_of_one_device_runs_only_that_devices_graph(quiet, two_devices):
    on0 = materialized(torch.ones(3)) * 5
    on1 = materialized(torch.ones(3)).to("neuron:1") * 6
    torch_neuron.mark_step("neuron:1")
    torch_neuron.wait_device_ops()
    assert torch_neuron.debug.ir_text([on1]) == EMPTY_GRAPH
    assert "aten::mul.Tensor" in torch_neuron.debug.ir_text([on0])
    assert quiet.counter("graph.execute.count") == 1
    assert torch.equal(on0.cpu(), torch.full((3,), 5.0))
    assert torch.equal(on1.cpu(), torch.full((3,), 6.0))


# ------------------------------------------------------------------ graph cache

def test_repeated_identical_steps_compile_once_and_then_hit_the_cache(quiet):
    # A shape no other test uses, so the first step really compiles.
    w = materialized(torch.zeros(3, 7))
    x = materialized(torch.ones(3, 7))
    expected = torch.zeros(3, 7)
    compiles, hits, executions = [], [], []
    for _ in range(4):
        w = w * 0.5 + x
        expected = expected * 0.5 + 1
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
        compiles.append(quiet.counter("graph.compile.count"))
        hits.append(quiet.counter("graph.cache_hit.count"))
        executions.append(quiet.counter("graph.execute.count"))
    assert compiles == [1, 1, 1, 1]
    assert hits == [0, 1, 2, 3]
    assert executions == [1, 2, 3, 4]
    assert quiet.counter("mark_step.count") == 4
    assert torch.equal(w.cpu(), expected)


def test_changing_a_python_scalar_does_not_recompile(quiet):
    x = materialized(torch.arange(11.0))
    results = []
    for scale in (2.5, 3.5, -7.25):
        y = x * scale
        torch_neuron.mark_step()
        results.append(y)
    torch_neuron.wait_device_ops()
    assert (quiet.counter("graph.compile.count"), quiet.counter("graph.cache_hit.count")) == (1, 2)
    for scale, y in zip((2.5, 3.5, -7.25), results):
        assert torch.equal(y.cpu(), torch.arange(11.0) * scale)
    assert torch_neuron.debug.graph_hash([x * 2.5]) == torch_neuron.debug.graph_hash([x * 3.5])


def test_changing_a_shape_recompiles(quiet):
    for n, compiled, hit in ((13, 1, 0), (14, 2, 0), (13, 2, 1)):
        y = materialized(torch.arange(float(n))) * 2.5
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
        assert (quiet.counter("graph.compile.count"), quiet.counter("graph.cache_hit.count")) == (
            compiled,
            hit,
        ), n
        assert torch.equal(y.cpu(), torch.arange(float(n)) * 2.5)
    a, b = materialized(torch.ones(13)), materialized(torch.ones(14))
    assert torch_neuron.debug.graph_hash([a * 2.5]) != torch_neuron.debug.graph_hash([b * 2.5])


# ---------------------------------------------------------------------- IR text

def test_ir_text_of_a_tiny_graph():
    x = materialized(torch.arange(6.0).reshape(2, 3))
    y = x * 2 + 1
    # The scalar 2 is a graph input (changing it reuses the graph); 0 and 1 are
    # constants, as are add's alpha=1. The Python 1 and the alpha are the same
    # constant (an i64 1), so the graph holds it once.
    assert torch_neuron.debug.ir_text([y]) == (
        "graph {\n"
        "  %0 = parameter(0, device_data) : f32[2,3]\n"
        "  %1 = parameter(1, scalar) : i64[]\n"
        "  %2 = aten::mul.Tensor(%0, %1) : f32[2,3]\n"
        "  %3 = constant(1) : i64[]\n"
        "  %4 = aten::add.Tensor(%2, %3, %3) : f32[2,3]\n"
        "  return (%4)\n"
        "}\n"
    )
    assert torch.equal(y.cpu(), torch.arange(6.0).reshape(2, 3) * 2 + 1)
    assert torch_neuron.debug.ir_text([y]) == EMPTY_GRAPH


def test_ir_text_of_a_reduction_and_a_matmul():
    x = materialized(torch.arange(6.0).reshape(2, 3))
    assert torch_neuron.debug.ir_text([(x.t() @ x).sum()]) == (
        "graph {\n"
        "  %0 = parameter(0, device_data) : f32[2,3]\n"
        "  %1 = aten::t_copy(%0) : f32[3,2]\n"
        "  %2 = aten::mm(%1, %0) : f32[3,3]\n"
        "  %3 = aten::sum(%2, None) : f32[]\n"
        "  return (%3)\n"
        "}\n"
    )


# ------------------------------------------------------------------- eager mode

def test_eager_mode_runs_each_op_at_once_with_cpu_values(quiet):
    # Ops seen for the first time are each queued as their own graph the
    # moment they are traced (test_eager.py covers what repeats run as).
    x_cpu = torch.arange(6.0).reshape(2, 3)
    x = materialized(x_cpu)
    assert torch_neuron.get_mode() == "lazy"
    with torch_neuron.mode("eager"):
        assert torch_neuron.get_mode() == "eager"
        quiet.reset()
        queued = []
        y = x * 2
        queued.append(quiet.counter("graph.sync.count"))
        z = y + 1
        queued.append(quiet.counter("graph.sync.count"))
        w = z.exp()
        queued.append(quiet.counter("graph.sync.count"))
        assert queued == [1, 2, 3]
        assert [torch_neuron.debug.ir_text([t]) for t in (y, z, w)] == [EMPTY_GRAPH] * 3
        torch_neuron.wait_device_ops()
        assert quiet.counter("graph.execute.count") == 3
    assert torch_neuron.get_mode() == "lazy"
    assert torch.equal(y.cpu(), x_cpu * 2)
    assert torch.equal(z.cpu(), x_cpu * 2 + 1)
    assert torch.equal(w.cpu(), (x_cpu * 2 + 1).exp())
    torch_neuron.wait_device_ops()
    assert quiet.counter("graph.execute.count") == 3  # reading ran nothing more


def test_mode_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="mode must be 'lazy' or 'eager', got 'fast'"):
        torch_neuron.set_mode("fast")
    assert torch_neuron.get_mode() == "lazy"


# --------------------------------------------------------------- errors in graphs

INDEX_ERROR = "neuron execution failed in aten::index_select: index out of range in self"


def test_an_error_in_a_queued_graph_surfaces_at_the_next_sync(quiet):
    x = materialized(torch.arange(6.0))
    bad = torch.index_select(x, 0, materialized(torch.tensor([0, 7])))
    line = inspect.currentframe().f_lineno + 1
    torch_neuron.mark_step()  # queues the graph: nothing is raised here
    # The CPU's exception type (IndexError), raised at the sync.
    with pytest.raises(IndexError) as info:
        torch_neuron.wait_device_ops()
    # The error names the sync that launched the failed graph.
    assert str(info.value) == f"{INDEX_ERROR} (in the graph launched by the sync at {__file__}:{line})"
    assert quiet.counter("graph.execute.errors") == 1
    # The error was raised once: the next sync is clean, the failed result stays failed.
    torch_neuron.wait_device_ops()
    with pytest.raises(IndexError, match="index out of range in self"):
        bad.cpu()
    assert torch.equal((x + 1).cpu(), torch.arange(6.0) + 1)


def test_an_error_raised_by_reading_the_failed_result_is_not_raised_again():
    x = materialized(torch.arange(6.0))
    bad = torch.index_select(x, 0, materialized(torch.tensor([0, 7])))
    with pytest.raises(IndexError, match="index out of range in self"):
        bad.cpu()
    good = x + 1
    torch_neuron.sync(good)
    torch_neuron.wait_device_ops()
    assert torch.equal(good.cpu(), torch.arange(6.0) + 1)


def test_a_graph_output_freed_right_after_the_wait_is_released_at_once():
    x = materialized(torch.ones(16))
    gc.collect()
    base = torch.neuron.memory_allocated()
    stale = 0
    for _ in range(5000):  # stops at the first stale count
        y = x * 2
        torch_neuron.sync(y)
        torch_neuron.wait_device_ops()
        del y
        if torch.neuron.memory_allocated() != base:
            stale += 1
            break
    assert stale == 0


IR_DEBUG_BACKWARD = r"""
import torch, torch_neuron
x = torch.randn(3, 4, requires_grad=True)
xn = x.detach().neuron().requires_grad_()
y = (xn.tanh() * 2).sum()
(g,) = torch.autograd.grad(y, xn)  # backward ops are traced on autograd's thread
ir = torch_neuron.debug.ir_text([y])  # before g's read, which keeps tanh's result for y
(expected,) = torch.autograd.grad((x.tanh() * 2).sum(), x)
print("grad_equal", torch.allclose(g.cpu(), expected, rtol=1e-6, atol=1e-6))
print(ir)
"""


def test_ir_debug_records_user_lines_and_survives_backward_on_autograds_thread():
    # The source-location getter is also called while autograd's worker thread
    # traces backward ops: there is no Python frame there, and that must give
    # "no location", not an exception escaping into the tracer (which aborted).
    result = run_python(IR_DEBUG_BACKWARD, {"TORCH_NEURON_IR_DEBUG": "1"})
    assert result.returncode == 0, result.stderr
    assert "grad_equal True" in result.stdout
    assert "aten::tanh(%0) : f32[3,4]  # <string>:5" in result.stdout
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr


# Python custom ops run below functionalization, where a view of a neuron tensor
# is a copy of its values: writes into a view never reach the viewed tensor.
@torch.library.custom_op("tn_test::fill_halves", mutates_args=())
def _fill_halves(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.shape[0] // 2
    out.narrow(0, 0, n).copy_(x.narrow(0, 0, n) * 2)
    out.narrow(0, n, x.shape[0] - n).copy_(x.narrow(0, n, x.shape[0] - n) + 1)
    return out


@torch.library.custom_op("tn_test::scaled_view", mutates_args=())
def _scaled_view(x: torch.Tensor) -> torch.Tensor:
    buf = torch.empty(2 * x.shape[0], dtype=x.dtype, device=x.device)
    view = buf.narrow(0, 0, x.shape[0])
    torch.mul(x, 3, out=view)
    return view.clone()


def test_custom_op_reading_back_the_view_it_wrote_matches_cpu():
    x = torch.arange(6.0)
    assert torch.equal(_scaled_view(x.neuron()).cpu(), _scaled_view(x))


def test_custom_op_writing_into_views_of_its_result_matches_cpu():
    # Its kernel runs functionalized on neuron tensors (torch_neuron/_custom_ops.py),
    # so the writes into the views reach the result.
    x = torch.arange(6.0)
    assert torch.equal(_fill_halves(x.neuron()).cpu(), _fill_halves(x))


@pytest.mark.parametrize("op", ["eq_", "lt_", "logical_and_", "logical_not_"])
def test_in_place_op_whose_functional_form_returns_another_dtype_matches_cpu(op):
    # float.eq_(other) keeps float: functionalization casts the bool result back
    # through _to_copy, which must hand it back unwrapped there.
    x = torch.tensor([1.0, 2.0, 0.0, -1.0])
    y = torch.tensor([1.0, 3.0, 0.0, 2.0])
    args = () if op == "logical_not_" else (y,)
    xn, view = x.neuron(), None
    view = xn[1:3]
    getattr(xn, op)(*[a.neuron() for a in args])
    getattr(x, op)(*args)
    assert xn.dtype == torch.float32
    assert torch.equal(xn.cpu(), x) and torch.equal(view.cpu(), x[1:3])
