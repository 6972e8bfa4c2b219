"""complex64 and complex128 are neuron dtypes: real models build rotary
embeddings with torch.polar and view_as_complex (Llama 4, DeepSeek-V2) and mix
tokens with FFTs (FNet). Each check compares with the CPU, at both opt levels
(complex ops stay ATen calls at tier 1), gradients and checkpoints included."""

import io

import pytest
import torch

import torch_neuron


@pytest.fixture(params=["0", "1"], autouse=True)
def opt_level(request):
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL=request.param):
        yield request.param


def rotary(x, freqs):
    """Rotary position embedding as Llama 4 writes it: pairs as complex numbers."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    rotated = torch.view_as_real(pairs * freqs).flatten(-2)
    return rotated.type_as(x)


def test_rotary_embedding_with_polar_matches_the_cpu():
    torch.manual_seed(0)
    seq, dim = 6, 8
    theta = torch.outer(torch.arange(seq).float(), 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))
    x = torch.randn(2, seq, dim, requires_grad=True)
    freqs = torch.polar(torch.ones_like(theta), theta)
    assert freqs.dtype == torch.complex64
    xn = x.detach().to("neuron").requires_grad_()
    freqs_n = torch.polar(torch.ones_like(theta).to("neuron"), theta.to("neuron"))
    out, out_n = rotary(x, freqs), rotary(xn, freqs_n)
    (out * out).sum().backward()
    (out_n * out_n).sum().backward()
    torch.testing.assert_close(out_n.detach().cpu(), out.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xn.grad.cpu(), x.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_arithmetic_scalars_and_reductions(dtype):
    torch.manual_seed(1)
    a, b = torch.randn(5, 3, dtype=dtype), torch.randn(5, 3, dtype=dtype)
    an, bn = a.to("neuron"), b.to("neuron")
    cases = {
        "mul": (an * bn, a * b), "scalar": (an * (2 - 1j) + 1j, a * (2 - 1j) + 1j),
        "abs": (an.abs(), a.abs()), "angle": (an.angle(), a.angle()), "exp": (an.exp(), a.exp()),
        "conj": (an.conj() * bn, a.conj() * b), "matmul": (an @ bn.mT, a @ b.mT),
        "sum": (an.sum(0), a.sum(0)), "real+imag": (an.real + an.imag, a.real + a.imag),
    }
    for name, (got, want) in cases.items():
        assert got.dtype == want.dtype, name
        torch.testing.assert_close(got.cpu(), want, msg=name)


def test_fft_token_mixing_as_fnet_does():
    torch.manual_seed(2)
    h = torch.randn(2, 8, 16)
    mixed = torch.fft.fftn(h.to("neuron"), dim=(-2, -1)).real
    torch.testing.assert_close(mixed.cpu(), torch.fft.fftn(h, dim=(-2, -1)).real, rtol=1e-4, atol=1e-4)


def test_a_result_with_atens_conjugate_bit_is_read_as_values():
    # lu_solve with left=False writes its result through result.mH(): the CPU
    # kernel returns a tensor whose bytes are conjugated lazily. Its bytes once
    # left the device unresolved: a silently wrong result.
    torch.manual_seed(3)
    a, b = torch.randn(3, 3, dtype=torch.complex64), torch.randn(4, 3, dtype=torch.complex64)
    lu, piv = torch.linalg.lu_factor(a)
    got = torch.linalg.lu_solve(lu.to("neuron"), piv.to("neuron"), b.to("neuron"), adjoint=True, left=False)
    torch.testing.assert_close(got.cpu(), torch.linalg.lu_solve(lu, piv, b, adjoint=True, left=False))


def test_complex_tensors_print_save_and_load():
    a = torch.tensor([1 + 2j, -0.5j], dtype=torch.complex64)
    n = a.to("neuron")
    assert str(n) == "tensor([1.+2.0000j, -0.-0.5000j], device='neuron:0')"
    buffer = io.BytesIO()
    torch.save({"z": n}, buffer)
    for location, device in ((None, "neuron:0"), ("cpu", "cpu")):
        loaded = torch.load(io.BytesIO(buffer.getvalue()), map_location=location)["z"]
        assert loaded.device == torch.device(device) and torch.equal(loaded.cpu(), a)


def _eigenvectors(op, a):
    if op == "eig":
        return torch.linalg.eig(a).eigenvectors
    return torch.linalg.eigh(a + a.mH).eigenvectors


def _backward_error(loss_fn, a):
    """The error the backward of loss_fn(a) raises, with the forward passing."""
    a = a.clone().requires_grad_()
    loss = loss_fn(a)
    with pytest.raises(RuntimeError) as err:
        loss.backward()
    return str(err.value)


@pytest.mark.parametrize("op", ["eig", "eigh"])
def test_a_loss_depending_on_the_eigenvectors_phase_is_refused_as_on_the_cpu(op):
    # ATen skips this check for tensors it counts as subclasses, which every
    # neuron tensor is (a functional wrapper); neuron makes it itself.
    torch.manual_seed(0)
    a = torch.randn(3, 3, dtype=torch.complex64)

    def loss(x):
        return _eigenvectors(op, x).sum().abs()

    expected = _backward_error(loss, a)
    assert expected.startswith(f"linalg_{op}_backward: The eigenvectors in the complex case")
    assert _backward_error(loss, a.to("neuron")) == expected


@pytest.mark.parametrize("op", ["eig", "eigh"])
@pytest.mark.parametrize("dtype", [torch.complex64, torch.float64])
def test_a_phase_invariant_eigenvector_loss_has_the_cpus_gradient(op, dtype):
    torch.manual_seed(1)
    a = torch.randn(2, 4, 4, dtype=dtype)
    grads = []
    for device in ("cpu", "neuron"):
        x = a.to(device).detach().requires_grad_()
        vectors = _eigenvectors(op, x)
        (vectors.abs() ** 3).sum().backward()
        grads.append(x.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-5)
