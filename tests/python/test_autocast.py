"""torch.autocast("neuron"): CUDA's autocast rules (csrc/aten/autocast.cc),
checked op by op against the rules and against the CPU's autocast (which keeps
more ops in the low dtype: the differences are listed), and training runs that
track float32 within the low dtype's tolerance."""

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_neuron
from models import seeded_mlp


def cases(device):
    """name -> a call under autocast. Inputs of the float32-policy ops are
    bfloat16, so that the policy shows in the result's dtype."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 4, generator=g).to(device), torch.randn(4, 4, generator=g).to(device)
    v = torch.randn(4, generator=g).to(device)
    img, w = torch.randn(1, 2, 5, 5, generator=g).to(device), torch.randn(3, 2, 3, 3, generator=g).to(device)
    t = torch.randint(0, 4, (4,), generator=g).to(device)
    h = torch.randn(4, 4, generator=g).to(device).half()
    lo, img_lo = a.bfloat16(), img.bfloat16()
    return {
        # lower precision: the autocast dtype
        "mm": lambda: a @ b, "linear": lambda: F.linear(a, b, v), "bmm": lambda: torch.bmm(a[None], b[None]),
        "addmm": lambda: torch.addmm(v, a, b), "conv2d": lambda: F.conv2d(img, w),
        "baddbmm": lambda: torch.baddbmm(a[None], a[None], b[None]),
        "sdpa": lambda: F.scaled_dot_product_attention(a[None, None], b[None, None], a[None, None]),
        # float32
        "softmax": lambda: torch.softmax(lo, -1), "log_softmax": lambda: torch.log_softmax(lo, -1),
        "layer_norm": lambda: F.layer_norm(lo, (4,)), "group_norm": lambda: F.group_norm(img_lo, 2),
        "exp": lambda: torch.exp(lo), "log": lambda: torch.log(lo.abs()), "pow": lambda: lo.pow(2),
        "sum": lambda: lo.sum(), "cumsum": lambda: lo.cumsum(0), "prod": lambda: lo.prod(),
        "norm": lambda: lo.norm(), "cross_entropy": lambda: F.cross_entropy(lo, t),
        "mse_loss": lambda: F.mse_loss(lo, b.bfloat16()),
        # widest input type
        "addcmul": lambda: torch.addcmul(a, h, h), "dot": lambda: torch.dot(v, h[0]),
        # not in any list: as they are
        "add": lambda: a + h, "relu": lambda: torch.relu(lo), "tanh": lambda: torch.tanh(lo),
    }


EXPECTED = {name: torch.bfloat16 for name in ("mm", "linear", "bmm", "addmm", "conv2d", "baddbmm", "sdpa")}
EXPECTED.update({name: torch.float32 for name in (
    "softmax", "log_softmax", "layer_norm", "group_norm", "exp", "log", "pow", "sum", "cumsum", "prod",
    "norm", "cross_entropy", "mse_loss", "addcmul", "dot", "add")})
EXPECTED.update({"relu": torch.bfloat16, "tanh": torch.bfloat16})

# Where the CPU's autocast differs (its lists keep these in bfloat16; dot it
# does not promote, and refuses mixed dtypes).
DIFFERENT_ON_CPU = {"softmax", "log_softmax", "layer_norm", "group_norm", "exp", "log", "pow", "sum",
                    "cumsum", "norm", "dot"}
# Same dtype, other values: cross_entropy_loss asks log_softmax for the input's
# own dtype, which CUDA's rules (and neuron's) honour, so the log-softmax is
# computed in bfloat16; the CPU's list runs all of cross_entropy_loss in float32.
VALUES_DIFFER_ON_CPU = {"cross_entropy"}


def outcome(call):
    try:
        return call()
    except RuntimeError:
        return None


def test_result_dtypes_follow_cuda_autocast_rules():
    neuron, cpu = {}, {}
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert torch.get_autocast_dtype("neuron") == torch.bfloat16
        assert torch.is_autocast_enabled("neuron")
        neuron = {name: outcome(call) for name, call in cases("neuron").items()}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cpu = {name: outcome(call) for name, call in cases("cpu").items()}
    assert {name: r.dtype for name, r in neuron.items()} == EXPECTED
    differ = {name for name in neuron if cpu[name] is None or cpu[name].dtype != neuron[name].dtype}
    assert differ == DIFFERENT_ON_CPU
    # Where the rules agree, so do the values (both run the CPU's kernels on
    # the same low-precision inputs).
    for name in set(neuron) - differ - VALUES_DIFFER_ON_CPU:
        torch.testing.assert_close(neuron[name].cpu(), cpu[name], msg=lambda m: f"{name}: {m}")


def test_autocast_dtypes_and_binary_cross_entropy_refused():
    assert torch.neuron.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    x = torch.rand(4, device="neuron")
    with torch.autocast("neuron", dtype=torch.float16):
        assert (x[None] @ x[:, None]).dtype == torch.float16
        with pytest.raises(RuntimeError, match="binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast"):
            F.binary_cross_entropy(x, torch.rand(4, device="neuron"))
        assert F.binary_cross_entropy_with_logits(x, x).dtype == torch.float32
    assert not torch.is_autocast_enabled("neuron")


def train(device, steps, dtype=None, scaled=False):
    torch.manual_seed(1)
    model = copy.deepcopy(seeded_mlp()).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(device, enabled=scaled)
    g = torch.Generator().manual_seed(2)
    data = [(torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g))] * steps
    losses, compiles = [], []
    for x, y in data:
        before = torch_neuron.metrics.counters().get("graph.compile.count", 0)
        with torch.autocast(device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if device == "neuron":
            torch_neuron.mark_step()
        losses.append(loss.item())
        compiles.append(torch_neuron.metrics.counters().get("graph.compile.count", 0) - before)
    return torch.tensor(losses), compiles, scaler


@pytest.mark.parametrize("dtype,rtol", [(torch.bfloat16, 1e-2), (torch.float16, 1e-3)])
def test_autocast_training_tracks_float32(dtype, rtol):
    reference, _, _ = train("cpu", 12)
    losses, compiles, scaler = train("neuron", 12, dtype, scaled=dtype == torch.float16)
    assert losses[-1] < losses[0] * 0.85  # it trains
    torch.testing.assert_close(losses, reference, rtol=rtol, atol=0)
    # The casts are traced ops: one graph a step, compiled once (step 2 adds the
    # momentum buffers' graph, as without autocast).
    assert compiles[2:] == [0] * 10
    if dtype == torch.float16:
        assert scaler.get_scale() == 65536.0  # no overflow: no step skipped
