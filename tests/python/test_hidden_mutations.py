"""Buffers an op updates without saying so in its schema.

``aten::native_batch_norm`` updates ``running_mean`` and ``running_var`` in
training mode, yet its schema marks neither as written. A lazy device that
trusts the schema computes the new statistics and throws them away: BatchNorm
and InstanceNorm with ``track_running_stats=True`` kept their initial running
stats for ever (a silent wrong result at evaluation time). These tests compare
the buffers with the CPU's after real training-mode forwards, in lazy and in
eager mode.
"""

import pytest
import torch

import torch_neuron

DEV = "neuron"


def _pattern(*shape):
    return (torch.arange(torch.Size(shape).numel(), dtype=torch.float32).view(shape) % 7)


def test_instance_norm_running_stats_after_one_step():
    # The case: momentum 1, so the running stats are this batch's.
    x = _pattern(2, 4, 5)
    cpu = torch.nn.InstanceNorm1d(4, track_running_stats=True, momentum=1.0)
    dev = torch.nn.InstanceNorm1d(4, track_running_stats=True, momentum=1.0).to(DEV)
    cpu(x)
    dev(x.to(DEV))
    assert torch.equal(cpu.running_mean, torch.tensor([2.2, 3.0, 3.8, 2.5]))
    torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean)
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_batch_norm_running_stats_follow_cpu_over_steps(dims):
    cls = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d, 3: torch.nn.BatchNorm3d}[dims]
    shape = (4, 3) + (5,) * dims if dims > 1 else (4, 3, 6)
    torch.manual_seed(0)
    cpu = cls(3, momentum=0.3)
    dev = cls(3, momentum=0.3).to(DEV)
    for step in range(3):
        x = torch.randn(shape) * (step + 1) + step
        out_cpu = cpu(x)
        out_dev = dev(x.to(DEV))
        torch_neuron.mark_step()
        torch.testing.assert_close(out_dev.cpu(), out_cpu, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var, rtol=1e-5, atol=1e-6)
    assert int(dev.num_batches_tracked) == int(cpu.num_batches_tracked) == 3
    # Evaluation uses the running stats: the outputs agree only if they were kept.
    cpu.eval()
    dev.eval()
    x = torch.randn(shape)
    torch.testing.assert_close(dev(x.to(DEV)).cpu(), cpu(x), rtol=1e-4, atol=1e-5)


def test_batch_norm_stats_in_a_training_step_with_backward():
    torch.manual_seed(1)
    cpu = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.ReLU())
    dev = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.ReLU())
    dev.load_state_dict(cpu.state_dict())
    dev.to(DEV)
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=0.1)
    for _ in range(2):
        x = torch.randn(4, 2, 6, 6)
        for model, opt, inp in ((cpu, opt_cpu, x), (dev, opt_dev, x.to(DEV))):
            opt.zero_grad()
            model(inp).square().mean().backward()
            opt.step()
        torch_neuron.mark_step()
    for name, buf in cpu.named_buffers():
        torch.testing.assert_close(dict(dev.named_buffers())[name].cpu(), buf,
                                   rtol=1e-4, atol=1e-5, msg=name)


def test_running_stats_in_eager_mode():
    x = _pattern(2, 4, 5)
    cpu = torch.nn.InstanceNorm1d(4, track_running_stats=True, momentum=0.5)
    with torch_neuron.mode("eager"):
        dev = torch.nn.InstanceNorm1d(4, track_running_stats=True, momentum=0.5).to(DEV)
        dev(x.to(DEV))
        dev(x.to(DEV) * 2)
        mean, var = dev.running_mean.cpu(), dev.running_var.cpu()
    cpu(x)
    cpu(x * 2)
    torch.testing.assert_close(mean, cpu.running_mean)
    torch.testing.assert_close(var, cpu.running_var)


def test_evaluation_mode_leaves_running_stats_alone():
    dev = torch.nn.BatchNorm1d(4).to(DEV).eval()
    dev(torch.randn(3, 4).to(DEV) + 5)
    assert torch.equal(dev.running_mean.cpu(), torch.zeros(4))
    assert torch.equal(dev.running_var.cpu(), torch.ones(4))
