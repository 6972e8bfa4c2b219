"""CompileRequest: the pending graph of a real training step written out as the
self-contained request the compile service receives, read back in this process,
gives the same graph hash and compiles to the same program (the IR after the
passes and the generated kernels, text for text) as the live graph; bytes that
are not a request raise ValueError naming what is wrong."""

import pytest
import torch
import torch_neuron
from torch_neuron import _C

from models import MLP, SmallCNN, TinyDecoder, loss_fn, make_batches

MODELS = {"mlp": MLP, "cnn": SmallCNN, "transformer": TinyDecoder}


def _pending_step(kind):
    """Everything one AdamW step leaves pending: the loss, the gradients, the
    updated weights and the optimizer's state (after a first step has run, so
    the state exists)."""
    torch.manual_seed(0)
    model = MODELS[kind]().to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    roots = []
    for i, (x, y) in enumerate(make_batches(kind, 2, batch=4)):
        opt.zero_grad()
        loss = loss_fn(kind, model, x.to("neuron"), y.to("neuron"))
        loss.backward()
        with torch_neuron.config.override(TORCH_NEURON_STEP_ON_OPTIMIZER="0"):  # left pending
            opt.step()
        if i == 0:
            torch_neuron.mark_step()
        else:
            roots = [loss] + [p for p in model.parameters()]
            roots += [v for state in opt.state.values() for v in state.values()
                      if isinstance(v, torch.Tensor) and v.device.type == "neuron"]  # "step" stays on the CPU
    return roots


@pytest.mark.parametrize("opt_level", ["0", "1"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_a_training_step_read_back_from_its_request_compiles_to_the_same_program(kind, opt_level):
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL=opt_level):
        roots = _pending_step(kind)
        request = _C._compile_request(roots)
        graph_hash, nodes, optimized, kernels = _C._compile_from_request(request)
        assert graph_hash == _C._graph_hash(roots)
        assert nodes == _C._ir_text(roots).count("\n  %")  # every node of the live graph
        assert (optimized, kernels) == tuple(_C._compiled_text(roots))
        assert (opt_level == "1") == ("extern \"C\"" in kernels or "void " in kernels)
        torch_neuron.mark_step()


def test_bytes_that_are_not_a_request_raise_a_clear_error():
    x = torch.ones(3, device="neuron") * 2
    request = _C._compile_request([x])
    with pytest.raises(ValueError, match="malformed CompileRequest: not a CompileRequest message"):
        _C._compile_from_request(b"\xff" * 7)
    with pytest.raises(ValueError, match="CompileRequest format 0"):
        _C._compile_from_request(b"")
    # Flipping a shape's byte keeps a well-formed message: the nodes no longer
    # hash to the stored graph hash.
    assert b"\x03" in request
    changed = request.replace(b"\x03", b"\x05", 1)
    with pytest.raises(RuntimeError, match="do not hash to its graph hash"):
        _C._compile_from_request(changed)


def test_a_graph_of_symbolic_scalars_compiles_through_its_request_as_the_cpu_computes():
    """Scalars that are a ShapeEnv's SymInts (backed: each has a value) are
    hashed by that value (ir/node.cc guards them) and written into the request
    as the same value, so their graph has a request form and compiles through
    it like any other; 0 and 1 are graph constants, 3 a parameter."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv(specialize_zero_one=False)
    zero, one, three = (env.create_symintnode(env.create_symbol(v, ConstantSource(f"s{v}")), hint=v)
                        for v in (0, 1, 3))
    assert all(isinstance(s, torch.SymInt) for s in (zero, one, three))

    def compute(x, y):
        return torch.add(x * three, y, alpha=one), torch.add(y, x, alpha=zero), x.clamp(min=zero)

    x_cpu, y_cpu = torch.arange(-3.0, 3.0), torch.linspace(0.5, 3.0, 6)
    expected = compute(x_cpu, y_cpu)
    x, y = x_cpu.to("neuron"), y_cpu.to("neuron")
    torch_neuron.mark_step()
    before = torch_neuron.metrics.counters()
    roots = list(compute(x, y))
    request = _C._compile_request(roots)
    graph_hash, nodes, _, _ = _C._compile_from_request(request)
    assert graph_hash == _C._graph_hash(roots)
    assert nodes == _C._ir_text(roots).count("\n  %")
    torch_neuron.mark_step()
    after = torch_neuron.metrics.counters()
    assert after["graph.compile_request.count"] - before.get("graph.compile_request.count", 0) == 1
    assert after["graph.compile.count"] - before.get("graph.compile.count", 0) == 1
    for got, want in zip(roots, expected):
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
