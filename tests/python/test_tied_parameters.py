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


def _train(model, opt, x, steps=3):
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("optimizer", ["sgd-momentum", "adamw"])
def test_an_optimizer_built_before_the_move_trains_the_model(optimizer):
    # On the CPU and CUDA, Module.to() keeps each Parameter object, so the
    # usual order (optimizer first, then .to(device)) works. Here PyTorch had
    # to make new Parameters, and the optimizer stepped the stale CPU ones
    # while the model never changed: silently wrong training.
    def make(device):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        before = list(model.parameters())
        if optimizer == "adamw":
            opt = torch.optim.AdamW(model.parameters(), lr=0.05)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model.to(device)
        assert all(p is q for p, q in zip(before, model.parameters()))
        assert all(p.device.type == device and isinstance(p, nn.Parameter) for p in before)
        return model, opt

    x = torch.randn(16, 4)
    cpu, cpu_opt = make("cpu")
    cpu_losses = _train(cpu, cpu_opt, x)
    neuron, opt = make("neuron")
    losses = _train(neuron, opt, x.to("neuron"))
    assert losses[-1] < losses[0]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-5, atol=1e-6)
    for p, q in zip(cpu.parameters(), neuron.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)


def test_a_tied_model_keeps_its_parameter_objects_and_gradients_there_and_back():
    cpu = tiny("gpt2")
    params = dict(cpu.named_parameters(remove_duplicate=False))
    ids = torch.randint(0, 64, (2, 8))
    cpu(ids, labels=ids).loss.backward()
    grads = {name: p.grad.clone() for name, p in params.items()}
    cpu.to("neuron")
    for name, p in cpu.named_parameters(remove_duplicate=False):
        assert p is params[name], name
        assert p.device.type == "neuron" and p.grad.device.type == "neuron", name
        torch.testing.assert_close(p.grad.cpu(), grads[name], msg=name)
    assert cpu.lm_head.weight is cpu.transformer.wte.weight
    cpu.cpu()
    for name, p in cpu.named_parameters(remove_duplicate=False):
        assert p is params[name] and p.device.type == "cpu", name


def test_a_parameter_that_cannot_keep_its_object_is_named_in_a_warning():
    # A view of the weight holds its CPU tensor, so the object cannot take
    # the neuron contents; the model still moves, and the user is told.
    model = nn.Linear(3, 2)
    old = model.weight
    row = old[0]
    with pytest.warns(UserWarning, match=r"parameter 'weight' moved to neuron:0 as a new Parameter"):
        model.to("neuron")
    assert model.weight is not old and old.device.type == "cpu" and row.device.type == "cpu"
    assert model.weight.device.type == "neuron" and model.bias.device.type == "neuron"
    torch.testing.assert_close(model.weight.detach().cpu(), old.detach())


def test_moving_between_forward_and_backward_is_refused_as_pytorch_does():
    # The swap poisons the old AccumulateGrad node, as PyTorch's own
    # swap_module_params_on_conversion does: a clear error, never a gradient
    # on a tensor the model no longer uses.
    model = nn.Linear(3, 2)
    loss = model(torch.randn(1, 3)).sum()
    model.to("neuron")
    with pytest.raises(RuntimeError, match="poisoned by swap_tensors"):
        loss.backward()
