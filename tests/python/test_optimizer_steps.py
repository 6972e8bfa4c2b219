"""The optimizer's step ends a step (torch_neuron/_optimizer_steps.py): a loop
that never calls mark_step (Trainer, accelerate, a user's own) compiles its
step once and then nothing, gradient accumulation stays one graph per
optimizer step, an explicit mark_step still works, CPU optimizers and captured
steps are left alone, and TORCH_NEURON_STEP_ON_OPTIMIZER=0 turns it off.

Before the hook, the loop without mark_step here compiled a new, larger graph
at every read of its loss (10 compiles in 10 steps, test_guidance.py)."""

import textwrap

import pytest
import torch
import torch.nn.functional as F

import torch_neuron
from child_process import run_python

ENDED = "step.ended_by_optimizer.count"


def make_model(d_in: int, hidden: int):
    # Each test uses sizes of its own, so its graphs compile in it (exact counts).
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 3))


def make_data(d_in: int, steps: int, batch: int = 6):
    """Three fixed batches, in turn (steps: a multiple of 3)."""
    gen = torch.Generator().manual_seed(1)
    three = [(torch.randn(batch, d_in, generator=gen), torch.randint(0, 3, (batch,), generator=gen))
             for _ in range(3)]
    return [three[i % 3] for i in range(steps)]


def train(device, d_in, hidden, data, accumulate=1, mark_step=False, metrics=None):
    """SGD with momentum, one optimizer step per ``accumulate`` batches; the
    losses are read only at the end (a loop that never syncs). Returns the
    losses, the model and, with ``metrics``, the compile count after each
    optimizer step."""
    model = make_model(d_in, hidden).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, compiles = [], []
    for i, (x, y) in enumerate(data):
        loss = F.cross_entropy(model(x.to(device)), y.to(device)) / accumulate
        loss.backward()
        losses.append(loss.detach())
        if (i + 1) % accumulate == 0:
            opt.step()
            opt.zero_grad()
            if mark_step:
                torch_neuron.mark_step()
            if metrics is not None:
                compiles.append(metrics.counter("graph.compile.count"))
    return [l.item() for l in losses], model, compiles


def assert_same_training(got, expected):
    (losses, model, _), (cpu_losses, cpu_model, _) = got, expected
    last_of_first_batch = cpu_losses[(len(cpu_losses) - 1) // 3 * 3]
    assert last_of_first_batch < 0.9 * cpu_losses[0]  # it learned: the comparison means something
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-5, atol=1e-7)
    for (name, p_cpu), p in zip(cpu_model.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-6, msg=name)


def test_a_loop_without_mark_step_compiles_its_step_once(metrics):
    data = make_data(5, 9)
    expected = train("cpu", 5, 7, data)
    got = train("neuron", 5, 7, data, metrics=metrics)
    # Step 1 makes the momentum buffers (a graph of its own), step 2 is the
    # steady step; then nothing compiles, and every step was ended once.
    assert got[2] == [1, 2, 2, 2, 2, 2, 2, 2, 2]
    assert metrics.counter(ENDED) == 9
    assert metrics.counter("mark_step.count") == 9
    assert_same_training(got, expected)


def test_gradient_accumulation_ends_the_step_only_at_the_optimizer_step(metrics):
    data = make_data(5, 12)
    expected = train("cpu", 5, 9, data, accumulate=3)
    got = train("neuron", 5, 9, data, accumulate=3, metrics=metrics)
    # Four optimizer steps, each one graph of three micro-batches.
    assert metrics.counter(ENDED) == 4
    assert metrics.counter("graph.execute.count") >= 4
    assert got[2] == [1, 2, 2, 2]
    assert_same_training(got, expected)


def test_an_explicit_mark_step_after_the_optimizer_step_compiles_nothing_more(metrics):
    data = make_data(5, 6)
    expected = train("cpu", 5, 11, data)
    got = train("neuron", 5, 11, data, mark_step=True, metrics=metrics)
    assert got[2] == [1, 2, 2, 2, 2, 2]
    assert metrics.counter(ENDED) == 6
    assert metrics.counter("mark_step.count") == 12  # the loop's own found nothing pending
    assert metrics.counter("graph.sync.count") == 6
    assert_same_training(got, expected)


def test_turned_off_the_optimizer_step_leaves_the_step_pending(metrics):
    data = make_data(5, 6)
    expected = train("cpu", 5, 13, data)
    with torch_neuron.config.override(TORCH_NEURON_STEP_ON_OPTIMIZER="0"):
        model = make_model(5, 13).to("neuron")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        losses = []
        for x, y in data:
            loss = F.cross_entropy(model(x.to("neuron")), y.to("neuron"))
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        # As before the hook: nothing ran, every step is still traced ops.
        assert metrics.counter("graph.sync.count") == 0
        assert metrics.counter(ENDED) == 0
        torch_neuron.mark_step()
    assert metrics.counter("graph.compile.count") == 1  # the six steps, one graph
    assert_same_training(([l.item() for l in losses], model, None), expected)


def test_the_setting_is_read_at_each_optimizer_step(metrics):
    model = make_model(5, 15).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 5).to("neuron")
    for off in (False, True, False):
        model(x).sum().backward()
        if off:
            with torch_neuron.config.override(TORCH_NEURON_STEP_ON_OPTIMIZER="0"):
                opt.step()
        else:
            opt.step()
        opt.zero_grad()
    assert metrics.counter(ENDED) == 2


def test_an_optimizer_of_cpu_parameters_is_left_alone(metrics):
    cpu_model = make_model(5, 17)
    opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    pending = torch.ones(3, device="neuron") * 2
    cpu_model(torch.randn(4, 5)).sum().backward()
    opt.step()
    assert metrics.counter(ENDED) == 0
    assert metrics.counter("mark_step.count") == 0
    assert metrics.counter("graph.sync.count") == 0
    assert pending.cpu().tolist() == [2.0, 2.0, 2.0]


def test_an_optimizer_with_parameters_on_two_devices_ends_both_steps(metrics, two_devices):
    a = torch.nn.Parameter(torch.ones(4, device="neuron:0"))
    b = torch.nn.Parameter(torch.ones(4, device="neuron:1"))
    c = torch.nn.Parameter(torch.ones(4))  # and one on the CPU
    opt = torch.optim.SGD([a, b, c], lr=0.5)
    for p in (a, b, c):
        (p * p).sum().backward()
    opt.step()
    assert metrics.counter(ENDED) == 2
    assert metrics.counter("graph.sync.count") == 2  # one graph per device, nothing left pending
    for p in (a, b, c):
        assert p.detach().cpu().tolist() == [0.0] * 4  # 1 - 0.5 * 2


def test_a_parameter_group_added_later_is_seen(metrics, two_devices):
    a = torch.nn.Parameter(torch.ones(2, device="neuron:0"))
    opt = torch.optim.SGD([a], lr=0.5)
    (a * a).sum().backward()
    opt.step()
    assert metrics.counter(ENDED) == 1
    b = torch.nn.Parameter(torch.ones(2, device="neuron:1"))
    opt.add_param_group({"params": [b]})
    (a * a).sum().backward()
    (b * b).sum().backward()
    opt.step()
    assert metrics.counter(ENDED) == 3


def test_a_captured_step_is_not_ended_by_its_optimizer_step(metrics):
    # Inside torch_neuron.graph() a mark_step raises; the optimizer's step
    # leaves the capturing device alone, and the capture's end runs the step.
    torch.manual_seed(0)
    model = make_model(5, 19).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cpu_model = make_model(5, 19)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9)
    data = make_data(5, 6)
    static_x = torch.zeros(6, 5, device="neuron")
    static_y = torch.zeros(6, dtype=torch.long, device="neuron")

    def step(m, o, x, y):
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        o.zero_grad()
        return loss

    static_x.copy_(data[0][0].to("neuron"))
    static_y.copy_(data[0][1].to("neuron"))
    step(model, opt, static_x, static_y)  # warm-up: momentum buffers exist
    graph = torch_neuron.NeuronGraph()
    metrics.reset()
    static_x.copy_(data[1][0].to("neuron"))
    static_y.copy_(data[1][1].to("neuron"))
    with torch_neuron.graph(graph):
        loss = step(model, opt, static_x, static_y)
    assert metrics.counter(ENDED) == 0
    losses = [loss.item()]
    for x, y in data[2:]:
        static_x.copy_(x.to("neuron"))
        static_y.copy_(y.to("neuron"))
        graph.replay()
        losses.append(loss.item())
    cpu_losses = [step(cpu_model, cpu_opt, x, y).item() for x, y in data][1:]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-5, atol=1e-7)
    # After the capture the hook works again.
    metrics.reset()
    step(model, opt, static_x, static_y)
    assert metrics.counter(ENDED) == 1


EAGER_LOOP = textwrap.dedent("""
    import torch, torch.nn.functional as F, torch_neuron
    def run(device):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        gen = torch.Generator().manual_seed(1)
        x, y = torch.randn(6, 8, generator=gen), torch.randint(0, 3, (6,), generator=gen)
        losses = []
        for _ in range(10):
            loss = F.cross_entropy(m(x.to(device)), y.to(device))
            loss.backward(); opt.step(); opt.zero_grad()
            losses.append(loss.detach())
        return [l.item() for l in losses]
    cpu = run("cpu")
    with torch_neuron.config.override(TORCH_NEURON_STEP_ON_OPTIMIZER="0"):
        off = run("neuron")
    torch_neuron.metrics.reset()
    on = run("neuron")
    print(torch_neuron.get_mode(), torch_neuron.metrics.counter("step.ended_by_optimizer.count"))
    print(cpu == on, max(abs(a - b) for a, b in zip(cpu, on)), max(abs(a - b) for a, b in zip(off, on)))
""")


def test_in_eager_mode_ending_the_step_changes_no_result():
    done = run_python(EAGER_LOOP, env={"TORCH_NEURON_MODE": "eager"}, timeout=300)
    assert done.returncode == 0, done.stderr
    mode_line, diffs = done.stdout.strip().splitlines()
    assert mode_line == "eager 10"
    _, to_cpu, to_off = diffs.split()
    assert float(to_cpu) < 1e-5 and float(to_off) == 0.0
