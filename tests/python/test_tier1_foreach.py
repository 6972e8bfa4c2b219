"""Tier 1 expands multi-tensor `_foreach_*` ops (the default path of PyTorch's
optimizers on the neuron device) into per-tensor ops, which elementwise fusion
then fuses: an AdamW step becomes one kernel per parameter. These tests check
each default optimizer's foreach step against the CPU at both optimization
levels, and the shape of the compiled AdamW graph.
"""

import pytest
import torch

import torch_neuron

SHAPES = [(40, 30), (30,), (7, 3, 5)]

OPTIMIZERS = {
    "sgd_momentum": lambda p, **kw: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                                    weight_decay=0.01, **kw),
    "adam": lambda p, **kw: torch.optim.Adam(p, lr=1e-2, **kw),
    "adamw_amsgrad": lambda p, **kw: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True, **kw),
    "rmsprop": lambda p, **kw: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5, centered=True, **kw),
    "adagrad": lambda p, **kw: torch.optim.Adagrad(p, lr=1e-1, **kw),
    "nadam": lambda p, **kw: torch.optim.NAdam(p, lr=1e-2, **kw),
    "radam": lambda p, **kw: torch.optim.RAdam(p, lr=1e-2, **kw),
}


def run(name, device, steps=3):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s).to(device)) for s in SHAPES]
    grads = [[torch.randn(s) for s in SHAPES] for _ in range(steps)]
    # foreach=True on the neuron device: the path the optimizers choose there by
    # default. The CPU reference takes the per-tensor loop.
    opt = OPTIMIZERS[name](params, foreach=(device == "neuron"))
    for step in range(steps):
        for p, g in zip(params, grads[step]):
            p.grad = g.to(device)
        opt.step()
        if device == "neuron":
            torch_neuron.mark_step()
    return [p.detach().cpu() for p in params]


@pytest.mark.parametrize("level", ["0", "1"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_foreach_optimizer_step_matches_cpu(name, level):
    expected = run(name, "cpu")
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL=level):
        got = run(name, "neuron")
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=2e-5, atol=2e-6)


def test_foreach_adamw_compiles_to_one_shared_kernel_per_parameter():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s).neuron()) for s in SHAPES]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)
    torch_neuron.mark_step()
    # The step stays pending to be inspected (the optimizer's step would end it).
    with torch_neuron.config.override(TORCH_NEURON_STEP_ON_OPTIMIZER="0"):
        opt.step()
    state = [v for p in params for k, v in opt.state[p].items() if k != "step"]
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        ir, sources = torch_neuron.debug.compiled_text(params + state)
    assert "_foreach" not in ir
    assert ir.count("= neuron::fused_kernel(") == len(SHAPES)
    # The tensors' kernels have one body, generated and compiled once.
    assert ir.count(", tn_k0, [") == len(SHAPES)
    # (one function, with its strided path)
    assert sources.count('extern "C" void ') == 2 and sources.count('void tn_k0_strided(') == 1


def test_foreach_op_without_a_per_tensor_form_stays_one_call():
    xs = [torch.randn(5).neuron(), torch.randn(3).neuron()]
    torch_neuron.mark_step()
    norms = torch._foreach_norm(xs)
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        ir, _ = torch_neuron.debug.compiled_text(list(norms))
        got = [n.cpu() for n in norms]
    assert "aten::_foreach_norm.Scalar(" in ir
    torch.testing.assert_close(got, [x.cpu().norm() for x in xs])
