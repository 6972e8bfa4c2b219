"""torch.inference_mode() on neuron: ops, views and modules under it equal the
CPU's, and inference tensors get the CPU's errors where autograd meets them.

One deviation (docs/SUPPORT.md): a view of an inference tensor is a normal
tensor on neuron (bridge.h, MakeViewTensor, says why)."""

import pytest
import torch

import torch_neuron  # noqa: F401


def models():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.BatchNorm2d(6), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(6 * 4 * 4, 5))
    encoder = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    embed = torch.nn.Embedding(20, 8)
    return {
        "mlp": (mlp, lambda g: torch.randn(5, 8, generator=g)),
        "cnn": (cnn.eval(), lambda g: torch.randn(2, 3, 8, 8, generator=g)),
        "encoder": (encoder.eval(), lambda g: torch.randn(2, 7, 16, generator=g)),
        "embedding": (embed, lambda g: torch.randint(0, 20, (3, 4), generator=g)),
    }


@pytest.mark.parametrize("name", ["mlp", "cnn", "encoder", "embedding"])
def test_module_forward_under_inference_mode_equals_cpu(name):
    model, make_input = models()[name]
    x = make_input(torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = model(x)
    model.to("neuron")
    with torch.inference_mode():
        out = model(x.to("neuron"))
        # Results made in the mode are inference tensors, as on the CPU.
        assert out.is_inference() and expected.is_inference()
        # Slicing, transposing and reading them inside the mode.
        torch.testing.assert_close(out[..., 1:].transpose(0, -1).cpu(), expected[..., 1:].transpose(0, -1))
    torch.testing.assert_close(out.cpu(), expected)


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_views_of_normal_tensors_inside_the_mode_stay_normal_and_share_versions(device):
    w = torch.randn(3, 4).to(device)
    with torch.inference_mode():
        for view in (w[:, 1:], w.t(), w.view(12), w.detach(), w.unbind(0)[1], w.split(2)[0]):
            assert not view.is_inference()
            assert view._version == w._version
        w.add_(1)  # an in-place op on a normal tensor is allowed in the mode
        assert w._version == 1
        assert not w[1:].is_inference()
    # ...and its views read the update, outside the mode too.
    assert torch.equal(w[:, 1:].cpu(), w.cpu()[:, 1:])


def test_in_place_update_inside_the_mode_equals_cpu():
    base = torch.arange(12.0).reshape(3, 4)
    results = {}
    for device in ("cpu", "neuron"):
        cache = base.clone().to(device)  # made outside the mode, like a KV cache
        with torch.inference_mode():
            cache[:, 1].mul_(10)
            cache.index_copy_(0, torch.tensor([2]).to(device), torch.ones(1, 4).to(device))
            results[device] = (cache + cache[0]).cpu()
        results[device + "-after"] = cache.t().cpu()
    assert torch.equal(results["cpu"], results["neuron"])
    assert torch.equal(results["cpu-after"], results["neuron-after"])


# Composite ops whose kernels reshape or restride a strided view. Under the mode
# they run below functionalization (the autograd keys are skipped), where
# reshape calls _reshape_alias with strides that address the view's storage
# layout, not the device's dense data: matmul of a transposed batch was wrong
# there (a diffusers UNet's attention under inference_mode, silently).
STRIDED_COMPOSITES = {
    "matmul_transposed_3d_by_2d": lambda x, w: x.transpose(1, 2).matmul(w),
    "linear_of_a_transposed_batch": lambda x, w: torch.nn.functional.linear(x.transpose(1, 2), w.t()),
    "matmul_of_a_permuted_4d": lambda x, w: x[None].permute(0, 1, 3, 2).matmul(w),
    "matmul_of_a_sliced_batch": lambda x, w: x[:, :, 1:].matmul(w[1:]),
    "einsum_over_a_transpose": lambda x, w: torch.einsum("bij,jk->bik", x.transpose(1, 2), w),
    "tensordot_of_a_transpose": lambda x, w: torch.tensordot(x.transpose(1, 2), w, dims=1),
    "flatten_of_a_transpose": lambda x, w: x.transpose(1, 2).flatten(1) * 2,
    "reshape_of_an_expand": lambda x, w: x[:, :1].expand(2, 6, 6).reshape(12, 6) + 1,
    "as_strided_of_a_transpose": lambda x, w: torch.as_strided(x.transpose(1, 2).contiguous(), (2, 3), (6, 1)),
    # LongT5's local attention: einsum's bmm reads a reshape whose clone (to a
    # contiguous layout) shared the permuted value, and the program's
    # _unsafe_view failed on those strides ("view size is not compatible").
    "einsum_over_blocks": lambda x, w: torch.einsum("...hqk,...khd->...qhd", x.reshape(2, 3, 2, 2, 3)[..., :2],
                                                    x.reshape(2, 3, 2, 2, 3)),
    "einsum_over_blocks_then_linear": lambda x, w: torch.nn.functional.linear(
        torch.einsum("...hqk,...khd->...qhd", x.reshape(2, 3, 2, 2, 3)[..., :2], x.reshape(2, 3, 2, 2, 3))
        .contiguous().view(2, -1, 6), w),
}


@pytest.mark.parametrize("name", sorted(STRIDED_COMPOSITES))
def test_composites_over_strided_views_equal_the_cpu_in_the_mode(name):
    fn = STRIDED_COMPOSITES[name]
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 6, 6, generator=g), torch.randn(6, 6, generator=g)
    with torch.inference_mode():
        expected = fn(x, w)
        got = fn(x.to("neuron"), w.to("neuron"))
        assert (got.shape, got.stride()) == (expected.shape, expected.stride())
        torch.testing.assert_close(got.cpu(), expected)


# Conversions by composites under the mode: .to(other) and type_as run below
# functionalization there and call _to_copy, whose result the fallback wraps
# (roberta's and mpnet's position ids, in sentence-transformers' encode, raised
# functionalization's internal assert).
CONVERSIONS = {
    "type_as_after_a_promoting_cumsum": lambda m: torch.cumsum(m, 1).type_as(m),
    "type_as_after_a_sum": lambda m: m.sum(1).type_as(m),
    "to_other_tensor": lambda m: (m * 2).to(m.float()),
    "to_dtype_and_device": lambda m: m.to("neuron" if m.is_neuron else "cpu", torch.float64),
    "roberta_position_ids": lambda m: (torch.cumsum(m.ne(0).int(), dim=1).type_as(m.ne(0).int()) * m.ne(0).int())
    .long() + 1,
}


@pytest.mark.parametrize("name", sorted(CONVERSIONS))
def test_conversions_by_composites_equal_the_cpu_in_the_mode(name):
    fn = CONVERSIONS[name]
    ids = torch.tensor([[2, 5, 6, 0, 0], [2, 7, 0, 0, 0]], dtype=torch.int32)
    with torch.inference_mode():
        expected = fn(ids)
        got = fn(ids.to("neuron"))
        assert got.device.type == "neuron" and got.dtype == expected.dtype
        assert torch.equal(got.cpu(), expected)
    assert torch.equal((got + 1).cpu(), expected + 1)


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_inference_tensors_raise_the_cpus_errors_outside_the_mode(device):
    with torch.inference_mode():
        x = torch.ones(2, 3).to(device)
    assert x.is_inference()
    weight = torch.ones(2, 3, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (x * weight).sum().backward()
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        x.add_(1)
    # A clone is a normal tensor that autograd takes.
    weight.grad = None
    (x.clone() * weight).sum().backward()
    assert torch.equal(weight.grad.cpu(), x.cpu())
