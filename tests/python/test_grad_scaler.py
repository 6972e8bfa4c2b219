"""torch.amp.GradScaler on neuron: the unscale step's op returns a tensor list
and a tensor, which once aborted the process from the device's queue thread
(and left a NEFF its own reader rejected in the cache). The scaler must train
exactly as on the CPU, skipped steps and scale updates included."""

import copy

import torch

import torch_neuron
from models import seeded_mlp


def train(device, steps):
    torch.manual_seed(1)
    model = copy.deepcopy(seeded_mlp()).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10, growth_interval=2)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    losses, scales = [], []
    for step in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        # Step 2 overflows: its gradients are inf, so the scaler skips the
        # optimizer step and halves the scale.
        scaled = scaler.scale(loss * (float("inf") if step == 2 else 1.0))
        scaled.backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        if device == "neuron":
            torch_neuron.mark_step()
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales, [p.detach().cpu() for p in model.parameters()]


def test_grad_scaler_trains_as_on_the_cpu():
    cpu_losses, cpu_scales, cpu_params = train("cpu", 6)
    losses, scales, params = train("neuron", 6)
    # The scale grows every 2 clean steps and halves on the overflow.
    assert cpu_scales == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0, 2048.0]
    assert scales == cpu_scales
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-5, atol=1e-6)
    for p, q in zip(params, cpu_params):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_unscale_reports_found_inf_per_device():
    grads = [torch.tensor([1.0, 2.0]), torch.tensor([float("nan"), 4.0])]
    for inject in (False, True):
        cpu = [g.clone() if inject else g.nan_to_num() for g in grads]
        dev = [g.to("neuron") for g in cpu]
        found_cpu, found_dev = torch.zeros(1), torch.zeros(1, device="neuron")
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_cpu, torch.tensor([0.5]))
        torch._amp_foreach_non_finite_check_and_unscale_(dev, found_dev, torch.tensor([0.5], device="neuron"))
        assert found_dev.item() == found_cpu.item() == float(inject)
        for a, b in zip(dev, cpu):
            torch.testing.assert_close(a.cpu(), b, equal_nan=True)
