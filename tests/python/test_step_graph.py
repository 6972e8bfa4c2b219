"""Captured steps (torch_neuron.NeuronGraph): a training step traced once and
replayed without tracing trains exactly like the traced loop and like the CPU."""

import pytest
import torch
import torch.nn.functional as F

import torch_neuron
from models import MLP, TinyDecoder, loss_fn, make_batches, seeded_mlp

STEPS = 8


def batches(steps=STEPS):
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(32, 8, generator=gen) for _ in range(steps)]
    return [(x, x[:, :3].argmax(dim=1)) for x in xs]  # learnable labels


def cpu_training(make_optimizer, data):
    model = seeded_mlp()
    optimizer = make_optimizer(model.parameters())
    losses = []
    for x, y in data:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model


def replayed_training(make_optimizer, data, metrics=None):
    """Step 1 traced (warm-up: optimizer state), step 2 captured, the rest replayed;
    each batch is copied into the tensors the captured step reads."""
    model = seeded_mlp().to("neuron")
    optimizer = make_optimizer(model.parameters())
    static_x = torch.zeros(data[0][0].shape, device="neuron")
    static_y = torch.zeros(data[0][1].shape, dtype=torch.long, device="neuron")

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(static_x), static_y)
        loss.backward()
        optimizer.step()
        return loss

    losses = []
    static_x.copy_(data[0][0])
    static_y.copy_(data[0][1])
    losses.append(step().item())
    graph = torch_neuron.NeuronGraph()
    static_x.copy_(data[1][0])
    static_y.copy_(data[1][1])
    with torch_neuron.graph(graph):
        loss = step()
    losses.append(loss.item())
    if metrics is not None:
        torch_neuron.wait_device_ops()
        metrics.reset()
    for x, y in data[2:]:
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        losses.append(loss.item())
    return losses, model, optimizer, graph


def test_replayed_sgd_steps_match_cpu_training_and_trace_nothing(metrics):
    sgd = lambda params: torch.optim.SGD(params, lr=0.3, momentum=0.9)  # noqa: E731
    data = batches()
    cpu_losses, cpu_model = cpu_training(sgd, data)
    losses, model, optimizer, graph = replayed_training(sgd, data, metrics)

    replays = STEPS - 2
    assert metrics.counter("step_graph.replay.count") == replays
    assert metrics.counter("graph.execute.count") == replays
    assert metrics.counter("trace.op.count") == 0
    assert metrics.counter("mark_step.count") == 0
    assert cpu_losses[-1] < 0.8 * cpu_losses[0]  # it learned: the comparison means something
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-5, atol=0)
    for (name, p_cpu), p in zip(cpu_model.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-6, msg=name)
    # 6 parameters and their momentum buffers, plus the batch, feed the step, and
    # backward's seed gradient (a constant made in the step); the parameters,
    # gradients, momentum buffers and the loss receive its outputs, and so do the
    # transposed weights and reshaped biases the linear layers left alive.
    assert graph.links() == {"linked_inputs": 14, "frozen_inputs": 1, "linked_outputs": 19,
                             "other_outputs": 6}


def test_replayed_capturable_adamw_matches_cpu_adamw():
    data = batches()
    cpu_losses, cpu_model = cpu_training(lambda p: torch.optim.AdamW(p, lr=0.01), data)
    # On the device the step counter is a tensor (capturable), so bias
    # correction follows the replays instead of freezing at the captured step.
    losses, model, _, graph = replayed_training(
        lambda p: torch.optim.AdamW(p, lr=0.01, capturable=True), data)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-5, atol=0)
    for (name, p_cpu), p in zip(cpu_model.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-6, msg=name)
    assert graph.links()["frozen_inputs"] == 1  # backward's seed gradient


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_replays_draw_dropout_masks_as_traced_steps_do(kind):
    def run(capture: bool):
        torch.manual_seed(0)
        model = {"mlp": lambda: MLP(p=0.5), "transformer": TinyDecoder}[kind]().to("neuron")
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, capturable=True)
        x, y = make_batches(kind, 1, batch=8)[0]
        x, y = x.to("neuron"), y.to("neuron")
        torch.neuron.manual_seed(7)

        def step():
            optimizer.zero_grad()
            loss = loss_fn(kind, model, x, y)
            loss.backward()
            optimizer.step()
            return loss

        def traced_step():
            loss = step()
            torch_neuron.mark_step()  # the same graph as the captured step's
            return loss.item()

        losses = [traced_step()]
        if not capture:
            losses += [traced_step() for _ in range(4)]
            return losses, model
        graph = torch_neuron.NeuronGraph()
        with torch_neuron.graph(graph):
            loss = step()
        losses.append(loss.item())
        for _ in range(3):
            graph.replay()
            losses.append(loss.item())
        return losses, model

    (traced, traced_model), (replayed, replayed_model) = run(capture=False), run(capture=True)
    # Same programs, same draws in the same order: bit for bit.
    assert replayed == traced
    assert len(set(traced)) == len(traced)
    for p, q in zip(traced_model.parameters(), replayed_model.parameters()):
        assert torch.equal(p.cpu(), q.cpu())


def test_a_batch_moved_inside_the_captured_step_stays_as_captured():
    model = seeded_mlp().to("neuron")
    (x0, y0), (x1, y1) = batches(2)
    with torch.no_grad():
        graph = torch_neuron.NeuronGraph()
        with torch_neuron.graph(graph):
            out = model(x0.to("neuron"))
        first = out.cpu()
        x0.copy_(x1)  # the CPU tensor changes; the captured copy of it does not
        graph.replay()
    torch.testing.assert_close(out.cpu(), first, rtol=0, atol=0)
    assert graph.links()["frozen_inputs"] == 1


@pytest.mark.parametrize("sync", ["item", "mark_step", "cpu"])
def test_a_sync_inside_the_capture_raises_and_leaves_the_work_pending(sync):
    x = torch.ones(4, device="neuron")
    torch_neuron.mark_step()
    graph = torch_neuron.NeuronGraph()
    with pytest.raises(RuntimeError, match="while a step is being captured"):
        with torch_neuron.graph(graph):
            y = x * 3
            {"item": lambda: y.sum().item(), "mark_step": torch_neuron.mark_step,
             "cpu": lambda: y.cpu()}[sync]()
    assert not graph.captured
    assert y.cpu().tolist() == [3.0] * 4  # the device syncs again after the capture failed
    with pytest.raises(RuntimeError, match="nothing captured"):
        graph.replay()


def test_replay_rejects_an_input_that_changed_shape():
    x = torch.ones(4, device="neuron")
    torch_neuron.mark_step()
    graph = torch_neuron.NeuronGraph()
    with torch_neuron.graph(graph):
        y = x * 2
    x.data = torch.ones(5, device="neuron")
    with pytest.raises(ValueError, match=r"was f32\[4\] at the capture and is f32\[5\] now"):
        graph.replay()
    graph.reset()
    assert not graph.captured
    assert y.cpu().tolist() == [2.0] * 4


def test_capture_needs_lazy_mode_and_a_graph_and_does_not_nest():
    with pytest.raises(TypeError, match="NeuronGraph"):
        torch_neuron.graph(object())
    graph = torch_neuron.NeuronGraph()
    with torch_neuron.mode("eager"):
        with pytest.raises(RuntimeError, match="lazy mode"):
            graph.capture_begin()
    with pytest.raises(RuntimeError, match="already capturing"):
        with torch_neuron.graph(graph):
            with torch_neuron.graph(torch_neuron.NeuronGraph()):
                pass
    assert not graph.captured


def test_capturing_an_optimizers_first_step_raises():
    model = seeded_mlp().to("neuron")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(4, 8).to("neuron")
    graph = torch_neuron.NeuronGraph()
    with pytest.raises(RuntimeError, match="SGD created its state .* run one step before capturing"):
        with torch_neuron.graph(graph):
            model(x).sum().backward()
            optimizer.step()
    assert not graph.captured
    assert len(optimizer.state) == 6  # the step ran


def test_an_optimizer_counting_steps_on_the_host_warns():
    model = seeded_mlp().to("neuron")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)  # step counts on the CPU
    x = torch.randn(4, 8).to("neuron")

    def step():
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()

    step()
    graph = torch_neuron.NeuronGraph()
    with pytest.warns(UserWarning, match="Adam counts its steps in a CPU tensor.*capturable=True"):
        with torch_neuron.graph(graph):
            step()
    assert graph.captured
