"""End to end: a small MLP trained with SGD + momentum on neuron follows the same
loss curve as on CPU, with one mark_step per iteration."""

import torch
import torch.nn.functional as F

import torch_neuron
from models import seeded_mlp

STEPS = 20


def make_data():
    gen = torch.Generator().manual_seed(1)
    return torch.randn(32, 8, generator=gen), torch.randint(0, 3, (32,), generator=gen)


def train(device: str):
    model = seeded_mlp()
    x, y = make_data()  # made on CPU, then moved: both runs see the same data
    if device == "neuron":
        assert model.neuron() is model
    x, y = x.to(device), y.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if device == "neuron":
            torch_neuron.mark_step()
        losses.append(loss.item())
    return losses, model, optimizer


def test_mlp_trained_on_neuron_matches_cpu_losses_and_weights(metrics):
    cpu_losses, cpu_model, _ = train("cpu")
    assert metrics.counter("mark_step.count") == 0
    neuron_losses, neuron_model, optimizer = train("neuron")

    # Each step is ended twice: by the optimizer's step (TORCH_NEURON_STEP_ON_OPTIMIZER),
    # then by the loop's own mark_step, which finds nothing pending.
    assert metrics.counter("step.ended_by_optimizer.count") == STEPS
    assert metrics.counter("mark_step.count") == 2 * STEPS
    assert cpu_losses[-1] < 0.8 * cpu_losses[0]  # it did learn, so the comparison means something
    torch.testing.assert_close(
        torch.tensor(neuron_losses), torch.tensor(cpu_losses), rtol=1e-5, atol=0
    )
    for (name, p_cpu), p_neuron in zip(cpu_model.named_parameters(), neuron_model.parameters()):
        assert p_neuron.device == torch.device("neuron:0"), name
        torch.testing.assert_close(p_neuron.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-6)
    momentum = [optimizer.state[p]["momentum_buffer"] for p in neuron_model.parameters()]
    assert {m.device for m in momentum} == {torch.device("neuron:0")}


def test_mark_step_counts_each_call_and_nothing_else(metrics):
    for _ in range(3):
        torch_neuron.mark_step()
    torch_neuron.sync()
    assert metrics.counters() == {"mark_step.count": 4}
