"""What the library tests share (test_hf_libraries.py, test_vision_libraries.py):
a training loop that records each step's loss and the graphs the step needed,
and the comparisons of a neuron run with its CPU twin."""

import torch


def new_graphs(metrics) -> int:
    """Graphs that were not in the in-memory cache: compiled, or read from disk."""
    return metrics.counter("graph.compile.count") + metrics.counter("cache.disk_hit.count")


def per_step(totals):
    """Cumulative counts after each step -> counts in each step."""
    return [b - a for a, b in zip([0] + totals[:-1], totals)]


def train_steps(batches, loss_of, optimizer, metrics, backward=torch.Tensor.backward):
    """One optimizer step per batch, without mark_step (the optimizer's step
    ends each one). Returns the losses as floats, read after the last step so
    that no step syncs early, and the graphs each step needed."""
    losses, graphs = [], []
    for batch in batches:
        loss = loss_of(batch)
        backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
        graphs.append(new_graphs(metrics))
    return [l.item() for l in losses], per_step(graphs)


def assert_close_lists(got, expected, rtol=1e-5, atol=1e-6):
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), rtol=rtol, atol=atol)


def assert_same_parameters(model, cpu_model, rtol=1e-5, atol=1e-6):
    for (name, p_cpu), (_, p) in zip(cpu_model.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_cpu.detach(), rtol=rtol, atol=atol,
                                   msg=lambda m, name=name: f"{name}: {m}")
