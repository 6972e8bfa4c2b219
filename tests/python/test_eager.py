"""Adaptive eager mode (TORCH_NEURON_MODE=eager, csrc/eager/): ops are cut into
groups by content-defined chunking; a group seen for the first time runs op by
op while its graph compiles in the background, later occurrences run as that
one graph, a group whose compile fails runs op by op for good.

Background compiles are waited for (``_eager_wait_compiles``) where a test
counts what ran as a graph, so the counts are exact, not a race with the
compile workers.
"""

import inspect
import re

import pytest
import torch
import torch.nn.functional as F

import torch_neuron
from models import MLP, SmallCNN, TinyDecoder, loss_fn, make_batches

MODELS = {"mlp": MLP, "cnn": SmallCNN, "transformer": TinyDecoder}
C = torch_neuron._C


@pytest.fixture
def eager(metrics):
    """Eager mode with an empty in-memory cache, so every group is new."""
    C._eager_wait_compiles()
    C._clear_compile_cache()
    with torch_neuron.mode("eager"):
        yield metrics
    C._eager_wait_compiles()


def train(kind, steps, after_step=None, optimizer="adam"):
    """Adam (or SGD with momentum) with dropout and gradient clipping, one
    mark_step per step; the per-step losses and final parameters on the CPU.
    ``after_step(step)`` runs after each step's mark_step."""
    torch.manual_seed(0)
    model = MODELS[kind]().to("neuron")
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(1)
    losses = []
    for step, (x, y) in enumerate(make_batches(kind, steps, batch=8), start=1):
        opt.zero_grad()
        loss = loss_fn(kind, model, x.to("neuron"), y.to("neuron"))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        torch_neuron.mark_step()
        losses.append(loss.detach())
        if after_step is not None:
            after_step(step)
    return [l.item() for l in losses], {n: p.detach().cpu() for n, p in model.named_parameters()}


def groups_since(mark):
    return C._eager_recent_groups()[mark:]


# ------------------------------------------------------------------ grouping

def test_every_iteration_of_a_training_loop_is_cut_into_the_same_groups(eager):
    per_step = []
    mark = [len(C._eager_recent_groups())]

    def record(step):
        groups = C._eager_recent_groups()
        per_step.append([(key, ops) for key, ops, _ in groups[mark[0]:]])
        mark[0] = len(groups)

    train("transformer", 4, after_step=record)
    # The first step differs (Adam's moments are new buffers); from then on
    # every step is cut into exactly the same groups, key for key.
    assert len(per_step[1]) > 3
    assert per_step[2] == per_step[1]
    assert per_step[3] == per_step[1]
    assert all(2 <= ops <= 256 for _, ops in per_step[1][:-1])


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_groups_seen_before_run_as_one_compiled_graph(eager, kind):
    stats = []
    mark = [len(C._eager_recent_groups())]

    def wait_and_count(step):
        C._eager_wait_compiles()  # this step's groups are compiled before the next one
        stats.append({name: eager.counter(f"eager.{name}") for name in (
            "op.count", "op.grouped.count", "group.count", "group.hit.count",
            "group.replay.count", "group.compile.count", "group.fallback.count")})
        # A group of one op (a step's tail after a boundary, say) is not
        # compiled: its op's own executable runs it.
        groups = C._eager_recent_groups()
        stats[-1]["single_op_groups"] = sum(ops == 1 for _, ops, _ in groups[mark[0]:])
        mark[0] = len(groups)
        C._metrics_reset()  # the counters only: the steps stay for the share below

    train(kind, 4, after_step=wait_and_count)
    first, third, fourth = stats[0], stats[2], stats[3]
    # Step 1 ran op by op and compiled its groups in the background (a group
    # that occurs twice in one step, like a repeated layer, may already run as
    # a graph the second time, if its compile was quick enough).
    assert first["op.grouped.count"] < first["op.count"] / 2
    assert first["group.compile.count"] > 0 and first["group.fallback.count"] == 0
    # By step 3 every op of a group of two or more runs inside its compiled
    # group: nothing compiles or replays.
    for step in (third, fourth):
        singles = step["single_op_groups"]
        assert singles <= 1  # a step's chunking leaves at most its tail alone
        assert step["group.hit.count"] == step["group.count"] - singles
        assert step["op.grouped.count"] == step["op.count"] - singles
        assert step["group.replay.count"] == 0 and step["group.compile.count"] == 0
    grouped, ops, steps = C._eager_grouped_share(2)
    assert (grouped, ops, steps) == (third["op.grouped.count"] + fourth["op.grouped.count"],
                                     third["op.count"] + fourth["op.count"], 2)
    assert torch_neuron.metrics.grouped_share(2) == grouped / ops


def test_a_group_whose_compile_fails_runs_op_by_op_for_good(eager):
    compiles = []
    def wait(step):
        C._eager_wait_compiles()
        compiles.append((eager.counter("eager.group.compile.count"),
                         eager.counter("eager.group.fallback.count"),
                         eager.counter("eager.group.hit.count")))

    C._eager_fail_group_compiles_for_testing(True)
    try:
        losses, params = train("mlp", 4, after_step=wait)
    finally:
        C._eager_wait_compiles()
        C._eager_fail_group_compiles_for_testing(False)
    # Each distinct group compiled once and failed once; no group ever ran as
    # a graph, and no failed group was compiled again.
    first = compiles[0][0]
    assert first > 0
    assert compiles[0] == (first, first, 0)
    assert compiles[-1][2] == 0
    assert compiles[-1][0] == compiles[-1][1]
    assert compiles[-1][0] == compiles[1][0]  # steps 3 and 4 cut nothing new
    with torch_neuron.mode("lazy"):
        lazy_losses, lazy_params = train("mlp", 4)
    assert losses == pytest.approx(lazy_losses, rel=1e-5)


def test_a_sync_ends_the_group_and_results_are_those_of_the_cpu(eager):
    x_cpu = torch.randn(6, 5)
    x = x_cpu.to("neuron")
    mark = len(C._eager_recent_groups())
    for _ in range(3):
        y = (x * 2 + 1).tanh().sum(dim=1)
        value = y.max().item()  # a sync in the middle of the work
        z = (y - value).exp()
    expected_y = (x_cpu * 2 + 1).tanh().sum(dim=1)
    torch.testing.assert_close(z.cpu(), (expected_y - expected_y.max()).exp())
    ends = [ops for _, ops, _ in groups_since(mark)]
    # .item() ends the group: the first holds mul, add, tanh, sum and max; the
    # next ones sub and exp, then the next iteration's five; .cpu() ends the last.
    assert ends == [5, 7, 7, 2]


def test_each_op_runs_at_once_the_first_time(eager):
    x_cpu = torch.arange(6.0).reshape(2, 3)
    x = x_cpu.to("neuron")
    y = x * 3
    z = y - 1
    assert C._pending_count([y, z]) == 0  # nothing waits for a sync
    torch.testing.assert_close(z.cpu(), x_cpu * 3 - 1)


# ------------------------------------------------------------------ results

# At opt level 0 results equal lazy mode's bit for bit, however the ops were
# cut into groups: tier 0 gives every reader of a view a contiguous copy, as
# an op run on its own does, so BLAS and reductions sum in the same order on
# both sides. At opt level 1 a view's result (a transposed weight) that a
# matrix product reads inside one graph keeps its strides, while across a
# group boundary it arrives as a contiguous buffer, and BLAS sums the two in
# different orders (an ulp apart). SGD carries such noise along as it is; Adam
# divides it by its own RMS (see test_workloads.tolerances), so it is compared
# the looser way.
@pytest.mark.parametrize("opt_level", [0, 1], ids=["O0", "O1"])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_training_matches_lazy_mode(kind, opt_level, metrics):
    C._eager_wait_compiles()
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL=str(opt_level)):
        lazy_losses, lazy_params = train(kind, 5, optimizer="sgd")
        with torch_neuron.mode("eager"):
            eager_losses, eager_params = train(kind, 5, optimizer="sgd",
                                               after_step=lambda _: C._eager_wait_compiles())
    assert metrics.counter("eager.group.hit.count") > 0  # groups did run as graphs
    if opt_level == 0:
        assert eager_losses == lazy_losses
        for name, value in lazy_params.items():
            assert torch.equal(eager_params[name], value), name
        return
    assert eager_losses == pytest.approx(lazy_losses, rel=1e-5)
    for name, value in lazy_params.items():
        torch.testing.assert_close(eager_params[name], value, rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_adam_training_is_bit_identical_to_lazy_mode_at_opt_level_0(kind, metrics):
    C._eager_wait_compiles()
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="0"):
        lazy_losses, lazy_params = train(kind, 5)
        for groups in ("1", "0"):  # adaptive, then per-op
            with torch_neuron.config.override(TORCH_NEURON_EAGER_GROUPS=groups), torch_neuron.mode("eager"):
                eager_losses, eager_params = train(kind, 5, after_step=lambda _: C._eager_wait_compiles())
            assert eager_losses == lazy_losses, groups
            for name, value in lazy_params.items():
                assert torch.equal(eager_params[name], value), (groups, name)


def test_adam_training_matches_lazy_mode(eager):
    with torch_neuron.mode("lazy"):
        lazy_losses, lazy_params = train("transformer", 4)
    eager_losses, eager_params = train("transformer", 4, after_step=lambda _: C._eager_wait_compiles())
    assert eager_losses == pytest.approx(lazy_losses, rel=1e-4)
    for name, value in lazy_params.items():
        torch.testing.assert_close(eager_params[name], value, rtol=1e-3, atol=1e-3,
                                   msg=lambda m: f"{name}: {m}")


def test_random_draws_are_those_of_lazy_mode(eager):
    def draws():
        torch.manual_seed(7)
        x = torch.ones(64, 64, device="neuron")
        out = []
        for _ in range(4):
            out.append(F.dropout(x, 0.5) + torch.rand(64, device="neuron"))
            torch_neuron.mark_step()
            C._eager_wait_compiles()
        return [t.cpu() for t in out]

    eager_values = draws()
    with torch_neuron.mode("lazy"):
        lazy_values = draws()
    for e, l in zip(eager_values, lazy_values):
        assert torch.equal(e, l)
    assert eager.counter("eager.group.hit.count") > 0


def test_in_place_updates_and_views_read_back_as_on_the_cpu(eager):
    base_cpu = torch.arange(12.0).reshape(3, 4)
    base = base_cpu.to("neuron")
    for _ in range(3):
        view = base[1:, ::2]
        view.mul_(2).add_(1)
        base_cpu[1:, ::2].mul_(2).add_(1)
        base.t()[0].sub_(0.5)
        base_cpu.t()[0].sub_(0.5)
        torch_neuron.mark_step()
        C._eager_wait_compiles()
    torch.testing.assert_close(base.cpu(), base_cpu)
    assert eager.counter("eager.group.hit.count") > 0


def test_groups_on_two_devices_are_kept_apart(eager, two_devices):
    a_cpu, b_cpu = torch.randn(4, 8), torch.randn(8, 3)
    a0, b0 = a_cpu.to("neuron:0"), b_cpu.to("neuron:0")
    a1, b1 = a_cpu.to("neuron:1"), b_cpu.to("neuron:1")
    for _ in range(3):
        outs = []
        for a, b in ((a0, b0), (a1, b1)):
            h = (a @ b).relu() * 2
            outs.append((h.softmax(dim=1) + h.sigmoid()).sum(dim=0))
        torch_neuron.mark_step()
        C._eager_wait_compiles()
    h = (a_cpu @ b_cpu).relu() * 2
    expected = (h.softmax(dim=1) + h.sigmoid()).sum(dim=0)
    for out in outs:
        torch.testing.assert_close(out.cpu(), expected)
    assert eager.counter("eager.group.hit.count") >= 2  # each device ran its group as a graph


def test_capturing_a_step_is_refused_in_eager_mode(eager):
    with pytest.raises(RuntimeError, match="capturing a step needs lazy mode"):
        with torch_neuron.graph(torch_neuron.NeuronGraph()):
            pass


# ------------------------------------------------------------ launch blocking

def index_error(line=None):
    """The execution error of an out-of-range index_select, naming this file's
    `line` (any line if None)."""
    where = rf"{re.escape(__file__)}:{line if line is not None else r'[0-9]+'}"
    return rf"neuron execution failed in aten::index_select \({where}\): index out of range in self"


def test_an_execution_error_names_the_op_and_the_users_line(eager):
    x = torch.arange(6.0).to("neuron")
    bad = torch.tensor([0, 7]).to("neuron")
    line = inspect.currentframe().f_lineno + 1
    y = torch.index_select(x, 0, bad)  # queued at once, fails on the device queue
    with pytest.raises(IndexError, match=index_error(line)):
        y.cpu()  # the error surfaces at the next sync, naming the op's line


def test_a_failing_op_inside_a_compiled_group_names_its_line(eager):
    x = torch.arange(6.0).to("neuron")

    def body(index):
        return (torch.index_select(x * 2, 0, index) + 1).sum()

    good = torch.tensor([0, 5]).to("neuron")
    for _ in range(3):
        body(good).item()
        C._eager_wait_compiles()
    assert eager.counter("eager.group.hit.count") > 0
    line = inspect.getsourcelines(body)[1] + 1
    with pytest.raises(IndexError, match=index_error(line)):
        body(torch.tensor([0, 7]).to("neuron")).item()


def test_launch_blocking_raises_an_execution_error_at_the_op(eager):
    x = torch.arange(6.0).to("neuron")
    bad = torch.tensor([0, 7]).to("neuron")
    with torch_neuron.config.override(TORCH_NEURON_LAUNCH_BLOCKING="1"):
        line = inspect.currentframe().f_lineno + 2
        with pytest.raises(IndexError, match=index_error(line)):
            torch.index_select(x, 0, bad)
    # The device is usable afterwards.
    torch.testing.assert_close((x + 1).cpu(), torch.arange(6.0) + 1)


def test_launch_blocking_raises_at_mark_step_in_lazy_mode(metrics):
    x = torch.arange(6.0).to("neuron")
    bad = torch.tensor([0, 7]).to("neuron")
    torch_neuron.mark_step()
    y = torch.index_select(x, 0, bad)  # noqa: F841 (traced, not run)
    with torch_neuron.config.override(TORCH_NEURON_LAUNCH_BLOCKING="1"):
        # Lazy mode records no lines (unless TORCH_NEURON_IR_DEBUG=1).
        with pytest.raises(IndexError, match="failed in aten::index_select: index out of range"):
            torch_neuron.mark_step()
    del y


def test_per_op_eager_is_kept_behind_eager_groups_0(metrics):
    x = torch.arange(6.0).to("neuron")
    torch_neuron.wait_device_ops()
    metrics.reset()
    with torch_neuron.config.override(TORCH_NEURON_EAGER_GROUPS="0"), torch_neuron.mode("eager"):
        executed = []
        y = x * 2
        executed.append(metrics.counter("graph.execute.count"))
        z = y + 1
        executed.append(metrics.counter("graph.execute.count"))
    assert executed == [1, 2]
    assert metrics.counter("eager.op.count") == 0
    torch.testing.assert_close(z.cpu(), torch.arange(6.0) * 2 + 1)


def test_metrics_report_shows_the_grouped_share(eager):
    train("mlp", 3, after_step=lambda _: C._eager_wait_compiles())
    report = torch_neuron.metrics.report()
    assert "eager.group.hit.count" in report
    assert "ops in compiled groups" in report
