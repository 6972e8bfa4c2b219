"""nn.LSTM, nn.GRU, nn.RNN and their cells on neuron against the CPU: outputs,
states and gradients, and a few training steps. ATen runs LSTM and GRU gates
through fused cells that only CUDA implements on devices other than the CPU;
on neuron the LSTM's graph failed when it ran and the GRU failed at the call."""

import pytest
import torch
import torch.nn as nn

import torch_neuron

DEV = "neuron"

MODULES = [
    pytest.param(lambda: nn.LSTM(4, 5, num_layers=2, batch_first=True), id="lstm_2_layers"),
    pytest.param(lambda: nn.LSTM(4, 5, bidirectional=True, bias=False), id="lstm_bidirectional_no_bias"),
    pytest.param(lambda: nn.LSTM(4, 6, proj_size=3, batch_first=True), id="lstm_projection"),
    pytest.param(lambda: nn.GRU(4, 5, num_layers=2, bidirectional=True), id="gru_2_layers_bidirectional"),
    pytest.param(lambda: nn.GRU(4, 5, batch_first=True, bias=False), id="gru_no_bias"),
    pytest.param(lambda: nn.RNN(4, 5, nonlinearity="relu"), id="rnn_relu"),
]


def _outputs_and_grads(make, device):
    torch.manual_seed(0)
    module = make().to(device)
    batch_first = module.batch_first
    x = torch.randn(2, 3, 4) if batch_first else torch.randn(3, 2, 4)
    x = x.to(device).requires_grad_()
    out, state = module(x)
    states = list(state) if isinstance(state, tuple) else [state]
    (out.pow(2).sum() + sum(s.sum() for s in states)).backward()
    grads = [p.grad for p in module.parameters()]
    return [t.detach().cpu() for t in [out, *states, x.grad, *grads]]


@pytest.mark.parametrize("make", MODULES)
def test_recurrent_layers_match_the_cpu_forward_and_backward(make):
    cpu = _outputs_and_grads(make, "cpu")
    neuron = _outputs_and_grads(make, DEV)
    assert len(neuron) == len(cpu)
    for n, c in zip(neuron, cpu):
        torch.testing.assert_close(n, c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", MODULES)
def test_recurrent_layers_match_the_cpu_under_inference_mode(make):
    # inference_mode skips the autograd keys: the fused cells must run from
    # neuron's backend key as well.
    results = []
    for device in ("cpu", DEV):
        torch.manual_seed(0)
        module = make().to(device)
        x = torch.randn(2, 3, 4) if module.batch_first else torch.randn(3, 2, 4)
        with torch.inference_mode():
            out, state = module(x.to(device))
        states = list(state) if isinstance(state, tuple) else [state]
        results.append([t.cpu() for t in (out, *states)])
    for n, c in zip(results[1], results[0]):
        torch.testing.assert_close(n, c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell])
def test_recurrent_cells_match_the_cpu(cell):
    results = []
    for device in ("cpu", DEV):
        torch.manual_seed(0)
        module = cell(3, 4).to(device)
        x, h = torch.randn(5, 3).to(device), torch.randn(5, 4).to(device)
        state = (h, torch.randn(5, 4).to(device)) if cell is nn.LSTMCell else h
        out = module(x, state)
        out = out if isinstance(out, tuple) else (out,)
        sum(o.sum() for o in out).backward()
        results.append([t.detach().cpu() for t in (*out, module.weight_ih.grad, module.bias_hh.grad)])
    for n, c in zip(results[1], results[0]):
        torch.testing.assert_close(n, c, rtol=1e-5, atol=1e-6)


def test_an_lstm_language_model_trains_as_on_the_cpu():
    def train(device):
        torch.manual_seed(0)
        embed, lstm, head = nn.Embedding(20, 8), nn.LSTM(8, 16, num_layers=2, batch_first=True), nn.Linear(16, 20)
        for m in (embed, lstm, head):
            m.to(device)
        params = [*embed.parameters(), *lstm.parameters(), *head.parameters()]
        opt = torch.optim.Adam(params, lr=0.01)
        tokens = torch.randint(0, 20, (4, 9), generator=torch.Generator().manual_seed(1)).to(device)
        losses = []
        for _ in range(4):
            out, _ = lstm(embed(tokens[:, :-1]))
            loss = nn.functional.cross_entropy(head(out).reshape(-1, 20), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if device == DEV:
                torch_neuron.mark_step()
            losses.append(loss.detach().cpu())
        return torch.stack(losses), [p.detach().cpu() for p in params]

    (loss_cpu, params_cpu), (loss_dev, params_dev) = train("cpu"), train(DEV)
    torch.testing.assert_close(loss_dev, loss_cpu, rtol=1e-5, atol=1e-6)
    for n, c in zip(params_dev, params_cpu):
        torch.testing.assert_close(n, c, rtol=1e-4, atol=1e-5)
