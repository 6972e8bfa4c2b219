"""Parameters and buffers shared between modules stay shared across
Module.to("neuron") and back, as they do on the CPU and CUDA. PyTorch cannot
convert a CPU Parameter into a neuron one in place (different tensor types),
so it made a new Parameter per module: a tied embedding and LM head then
trained as two parameters, and gradients and losses parted from the CPU's.
Checked on transformers' own tied models and on the plain PyTorch forms of
sharing."""

import copy

import pytest
import torch
from torch import nn

import torch_neuron

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


@pytest.fixture(autouse=True)
def _tier0():
    # What is checked is the modules' sharing, not the compiler: tier 0 skips
    # the kernel builds that would make these models take minutes.
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="0"):
        yield


def sharing(module):
    """The groups of parameter and buffer names that are one tensor object."""
    groups = {}
    for name, t in module.named_parameters(remove_duplicate=False):
        groups.setdefault(("p", id(t)), []).append(name)
    for name, t in module.named_buffers(remove_duplicate=False):
        groups.setdefault(("b", id(t)), []).append(name)
    return sorted(sorted(g) for g in groups.values())


def tiny(kind):
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      bos_token_id=0, eos_token_id=0)
        return transformers.GPT2LMHeadModel(cfg)
    if kind == "bert-mlm":
        cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                      intermediate_size=64, vocab_size=64, max_position_embeddings=16,
                                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return transformers.BertForMaskedLM(cfg)
    cfg = transformers.T5Config(num_layers=2, num_decoder_layers=2, d_model=32, d_kv=8, num_heads=2,
                                d_ff=64, vocab_size=64, dropout_rate=0.0, decoder_start_token_id=0,
                                pad_token_id=0, eos_token_id=1, tie_word_embeddings=True)
    return transformers.T5ForConditionalGeneration(cfg)


def batch(device):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, 64, (2, 8), generator=g)
    return {"input_ids": ids.to(device), "labels": ids.roll(1, dims=1).to(device)}


def grads_after_step(model, device, steps=2):
    """Loss per step and every parameter's gradient (by name, tied ones once)
    after `steps` SGD steps."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(**batch(device)).loss
        loss.backward()
        grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()}
        opt.step()
        if device == "neuron":
            torch_neuron.mark_step()
        losses.append(loss.item())
    return losses, grads


def move(model, how):
    if how == "to":
        return model.to("neuron")
    if how == "neuron":
        return model.neuron()
    if how == "to-dtype":
        return model.to("neuron", torch.float64)
    # to_empty: uninitialized on neuron, then the CPU model's values copied in
    # (buffers too: non-persistent ones are not in the state dict).
    values = {k: v.clone() for k, v in model.state_dict().items()}
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    moved = model.to_empty(device="neuron")
    moved.load_state_dict(values)
    with torch.no_grad():
        for name, buf in moved.named_buffers():
            buf.copy_(buffers[name])
    return moved


@pytest.mark.parametrize("how", ["to", "neuron", "to-dtype", "to_empty"])
@pytest.mark.parametrize("kind", ["gpt2", "bert-mlm", "t5"])
def test_tied_models_keep_their_sharing_and_train_as_on_the_cpu(kind, how):
    cpu = tiny(kind)
    if how == "to-dtype":
        cpu = cpu.double()
    shared = sharing(cpu)
    assert any(len(group) > 1 for group in shared)  # the model ties something
    neuron = move(copy.deepcopy(cpu), "to" if how == "to-dtype" else how)
    assert sharing(neuron) == shared
    assert all(p.device.type == "neuron" for p in neuron.parameters())
    cpu_losses, cpu_grads = grads_after_step(cpu, "cpu")
    losses, grads = grads_after_step(neuron, "neuron")
    assert grads.keys() == cpu_grads.keys()
    tol = dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), **tol)
    for name in cpu_grads:
        torch.testing.assert_close(grads[name], cpu_grads[name], **tol, msg=name)


class Shared(nn.Module):
    """The plain PyTorch forms of sharing: one Parameter registered in two
    modules, a module reached through two parents, a shared buffer, and a
    parametrized weight whose original is tied to another module's."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.b.register_parameter("weight", self.a.weight)
        inner = nn.Linear(4, 4)
        self.left = nn.Sequential(inner)
        self.right = nn.Sequential(inner)
        self.register_buffer("scale", torch.full((4,), 0.5))
        self.b.register_buffer("scale", self.scale)
        self.c = nn.Linear(4, 4)
        nn.utils.parametrize.register_parametrization(self.c, "weight", Symmetric())
        self.d = nn.Linear(4, 4)
        self.d.register_parameter("weight", self.c.parametrizations.weight.original)

    def forward(self, x):
        x = self.a(x) * self.scale
        x = self.b(x) * self.b.scale
        x = self.left(x) + self.right(x)
        return self.d(self.c(x)).sum()


class Symmetric(nn.Module):
    def forward(self, w):
        return (w + w.t()) / 2


def test_plain_sharing_survives_the_move_there_and_back():
    torch.manual_seed(0)
    cpu = Shared()
    shared = sharing(cpu)
    assert [g for g in shared if len(g) > 1] == [
        ["a.weight", "b.weight"], ["b.scale", "scale"],
        ["c.parametrizations.weight.original", "d.weight"],
        ["left.0.bias", "right.0.bias"], ["left.0.weight", "right.0.weight"]]
    neuron = copy.deepcopy(cpu).to("neuron")
    assert sharing(neuron) == shared
    assert neuron.b.weight is neuron.a.weight and neuron.left[0] is neuron.right[0]
    assert neuron.b.scale is neuron.scale
    x = torch.randn(3, 4)
    cpu(x).backward()
    neuron(x.to("neuron")).backward()
    for (name, p), q in zip(cpu.named_parameters(), neuron.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6, msg=name)
    back = neuron.cpu()
    assert sharing(back) == shared
    assert back.b.weight.grad is back.a.weight.grad  # one parameter, one gradient


def test_load_state_dict_assign_shares_as_on_the_cpu():
    # A state_dict holds a detached tensor per name, so assign=True gives each
    # module its own Parameter on the CPU too; values and later in-place
    # updates still agree, and gradients follow the CPU's.
    torch.manual_seed(0)
    cpu = tiny("gpt2")
    neuron = copy.deepcopy(cpu).to("neuron")
    cpu_state = {k: v.clone() for k, v in cpu.state_dict().items()}
    cpu.load_state_dict(cpu_state, assign=True)
    neuron.load_state_dict({k: v.to("neuron") for k, v in cpu_state.items()}, assign=True)
    assert sharing(neuron) == sharing(cpu)
    cpu_losses, cpu_grads = grads_after_step(cpu, "cpu", steps=1)
    losses, grads = grads_after_step(neuron, "neuron", steps=1)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    for name in cpu_grads:
        torch.testing.assert_close(grads[name], cpu_grads[name], rtol=1e-4, atol=1e-5, msg=name)


def test_cpu_conversions_keep_pytorchs_behaviour():
    # Shared buffers come apart under a dtype change on the CPU (PyTorch
    # converts each module's reference separately): the wrapper only steps in
    # for moves to or from neuron.
    m = nn.Module()
    m.a, m.b = nn.Module(), nn.Module()
    buf = torch.ones(2)
    m.a.register_buffer("t", buf)
    m.b.register_buffer("t", buf)
    m.half()
    assert m.a.t is not m.b.t and m.a.t.dtype == torch.half
