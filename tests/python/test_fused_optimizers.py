"""fused=True optimizers on neuron (transformers' default, adamw_torch_fused):
each step runs the CPU's fused kernel inside the step's graph, so parameters
and optimizer state equal the CPU's fused results bit for bit, with no CPU
fallback and one graph per step."""

import pytest
import torch

import torch_neuron

STEPS = 3

CASES = [
    (torch.optim.AdamW, dict(lr=0.01)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    (torch.optim.AdamW, dict(lr=torch.tensor(0.01), maximize=True)),
    (torch.optim.Adam, dict(lr=0.01)),
    (torch.optim.Adam, dict(lr=0.02, weight_decay=0.05, amsgrad=True, betas=(0.8, 0.9))),
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, maximize=True)),
    (torch.optim.Adagrad, dict(lr=0.1)),
    (torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01, weight_decay=0.1)),
]


def run(device, cls, kwargs):
    gen = torch.Generator().manual_seed(0)
    shapes = [(4, 3), (3,), (2, 2, 5)]
    params = [torch.nn.Parameter(torch.randn(*s, generator=gen).to(device)) for s in shapes]
    grads = [[torch.randn(*s, generator=gen) for s in shapes] for _ in range(STEPS)]
    kwargs = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    optimizer = cls(params, fused=True, **kwargs)
    for step in range(STEPS):
        for p, g in zip(params, grads[step]):
            p.grad = g.to(device)
        optimizer.step()
        if device == "neuron":
            torch_neuron.mark_step()
    state = [{k: v.cpu() for k, v in optimizer.state[p].items() if isinstance(v, torch.Tensor)} for p in params]
    return [p.detach().cpu() for p in params], state


@pytest.mark.parametrize("cls,kwargs", CASES, ids=lambda c: c.__name__ if isinstance(c, type) else
                         "-".join(f"{k}={v}" for k, v in c.items()))
def test_fused_step_equals_the_cpu_fused_step(cls, kwargs, metrics):
    cpu_params, cpu_state = run("cpu", cls, kwargs)
    neuron_params, neuron_state = run("neuron", cls, kwargs)
    for cpu, neuron in zip(cpu_params, neuron_params):
        assert torch.equal(cpu, neuron)
    for cpu, neuron in zip(cpu_state, neuron_state):
        assert cpu.keys() == neuron.keys()
        for key in cpu:
            assert torch.equal(cpu[key], neuron[key]), key
    counters = metrics.counters()
    assert not {k: v for k, v in counters.items() if k.startswith("fallback.") and v}
    # One graph per step: the first step (state made), then the steady step.
    assert counters["graph.sync.count"] == STEPS


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
def test_fused_adamw_unscales_and_skips_as_the_cpu_does(found_inf):
    # What GradScaler passes a fused optimizer: the scale to divide the
    # gradients by, and whether they held an inf (then nothing changes).
    def run_op(device):
        gen = torch.Generator().manual_seed(1)
        tensors = [[torch.randn(6, generator=gen).to(device)] for _ in range(4)]
        tensors[3] = [tensors[3][0].abs()]  # a second moment is never negative
        params, grads, exp_avgs, exp_avg_sqs = tensors
        steps = [torch.tensor(1.0).to(device)]
        torch._fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=0.01, beta1=0.9,
                            beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False,
                            grad_scale=torch.tensor(4.0).to(device), found_inf=torch.tensor(found_inf).to(device))
        return [t[0].cpu() for t in tensors]

    for cpu, neuron in zip(run_op("cpu"), run_op("neuron")):
        assert torch.equal(cpu, neuron)


def test_fused_step_bumps_each_written_tensor_version_once():
    p = torch.nn.Parameter(torch.zeros(3, device="neuron"))
    p.grad = torch.ones(3, device="neuron")
    optimizer = torch.optim.SGD([p], lr=0.5, fused=True)
    before = p._version
    optimizer.step()
    assert p._version == before + 1
    assert torch.equal(p.detach().cpu(), torch.full((3,), -0.5))


def test_fused_optimizer_over_neuron_and_cpu_parameters_steps_both_as_the_cpu():
    # torch.optim groups a fused step's tensors by device: each group runs
    # its own device's kernel.
    def run_on(devices):
        params = [torch.nn.Parameter(torch.arange(3.0).to(d)) for d in devices]
        for p in params:
            p.grad = torch.full((3,), 0.5).to(p.device)
        torch.optim.AdamW(params, lr=0.1, fused=True).step()
        return [p.detach().cpu() for p in params]

    for cpu, mixed in zip(run_on(["cpu", "cpu"]), run_on(["neuron", "cpu"])):
        assert torch.equal(cpu, mixed)


@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.SGD, torch.optim.Adagrad])
def test_a_learning_rate_schedule_compiles_no_graph_per_step(cls, metrics):
    # Trainer's default: fused AdamW under a schedule that changes the
    # learning rate every step. The rate is a value of the graph, not part of
    # its key.
    def run(device):
        gen = torch.Generator().manual_seed(2)
        p = torch.nn.Parameter(torch.randn(8, generator=gen).to(device))
        optimizer = cls([p], lr=0.1, fused=True)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
        compiles = []
        for _ in range(6):
            before = metrics.counter("graph.compile.count")
            p.grad = torch.randn(8, generator=gen).to(device)
            optimizer.step()  # ends the step on neuron (the optimizer step hook)
            schedule.step()
            compiles.append(metrics.counter("graph.compile.count") - before)
        return p.detach().cpu(), compiles

    cpu, _ = run("cpu")
    neuron, compiles = run("neuron")
    assert torch.equal(cpu, neuron)
    assert compiles[2:] == [0, 0, 0, 0], compiles
