"""What libraries built on torch do to tensors, on neuron tensors as on CPU ones:
their own operators with Python kernels for PrivateUse1 (FSDP2's fsdp::
ops), direct calls of the view-copy ops (torch.split_with_sizes_copy), and
storage resizes to and from 0 bytes (FSDP2 frees unsharded parameters so)."""

import textwrap

import pytest
import torch

import torch_neuron  # noqa: F401

from child_process import run_python

N = "neuron"

# (name, call): each result is compared with the CPU's, values and strides.
VIEW_COPIES = [
    ("split_with_sizes_copy", lambda x: torch.split_with_sizes_copy(x, [1, 3], dim=1)),
    ("split_copy", lambda x: torch.split_copy(x, 3, dim=0)),
    ("unbind_copy", lambda x: torch.unbind_copy(x, 1)),
    ("narrow_copy", lambda x: torch.narrow_copy(x, 1, 1, 2)),
    ("t_copy", lambda x: torch.t_copy(x)),
    ("transpose_copy", lambda x: torch.transpose_copy(x, 0, 1)),
    ("permute_copy", lambda x: torch.permute_copy(x, (1, 0))),
    ("slice_copy", lambda x: torch.slice_copy(x, 0, 1, 5, 2)),
    ("select_copy", lambda x: torch.select_copy(x, 1, 2)),
    ("diagonal_copy", lambda x: torch.diagonal_copy(x)),
    ("expand_copy", lambda x: torch.expand_copy(x[:1], (3, 4))),
    ("as_strided_copy", lambda x: torch.as_strided_copy(x, (2, 2), (1, 4), 1)),
    ("unfold_copy", lambda x: torch.ops.aten.unfold_copy(x, 0, 2, 2)),
]


@pytest.mark.parametrize("name,call", VIEW_COPIES, ids=[n for n, _ in VIEW_COPIES])
def test_view_copy_ops_return_new_contiguous_tensors_as_on_cpu(name, call):
    x = torch.arange(24.0).reshape(6, 4)
    cpu = call(x)
    neuron = call(x.to(N))
    cpu, neuron = ([cpu], [neuron]) if isinstance(cpu, torch.Tensor) else (cpu, neuron)
    assert len(neuron) == len(cpu)
    for n, c in zip(neuron, cpu):
        assert (n.shape, n.stride(), n.is_contiguous()) == (c.shape, c.stride(), c.is_contiguous())
        torch.testing.assert_close(n.cpu(), c, rtol=0, atol=0)
    # The views themselves keep the CPU's strides (functionalization's replay).
    assert x.to(N).t().stride() == x.t().stride() == (1, 4)


def test_split_with_sizes_copy_into_views_of_one_flat_buffer():
    # FSDP2's copy-out of all-gathered parameters: the outputs are views of
    # one flat buffer each, written through the views.
    x = torch.randn(2, 6)
    results = {}
    for device in ("cpu", N):
        a, b = torch.zeros(8, device=device), torch.zeros(4, device=device)
        torch.split_with_sizes_copy(x.to(device), [4, 2], dim=1, out=[a.view(2, 4), b.view(2, 2)])
        results[device] = (a.cpu(), b.cpu())
    for n, c in zip(results[N], results["cpu"]):
        torch.testing.assert_close(n, c, rtol=0, atol=0)


def test_view_copy_out_resizes_a_wrong_sized_out_and_checks_list_lengths():
    x = torch.arange(6.0).reshape(2, 3)
    for device in ("cpu", N):
        out = torch.empty(0, device=device)
        torch.ops.aten.t_copy.out(x.to(device), out=out)
        assert out.shape == (3, 2) and out.stride() == (2, 1)
        torch.testing.assert_close(out.cpu(), x.t(), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="expected an out= argument of size 2"):
        torch.split_with_sizes_copy(x.to(N), [1, 2], dim=1, out=[torch.empty(0, device=N)])


def _define_gather_rows(namespace):
    """An operator as FSDP2 defines its own: a mutable out= list and Python
    kernels for CPU and PrivateUse1 written in torch ops (in-place writes, an
    out= call)."""
    lib = torch.library.Library(namespace, "DEF")
    lib.define("copy_rows(Tensor src, int[] rows, *, Tensor(a!)[] out) -> ()")
    lib.define("scaled_sum(Tensor[] xs, Tensor scale) -> Tensor")

    def copy_rows(src, rows, *, out):
        for o, r in zip(out, rows):
            o.copy_(src[r])
            o.mul_(2)

    def scaled_sum(xs, scale):
        total = torch.zeros_like(xs[0])
        for x in xs:
            total.add_(x)
        return torch.mul(total, scale, out=torch.empty_like(total))

    for key in ("CPU", "PrivateUse1"):
        lib.impl("copy_rows", copy_rows, key)
        lib.impl("scaled_sum", scaled_sum, key)
    return lib


def test_a_custom_op_with_python_kernels_runs_on_neuron_as_on_cpu():
    lib = _define_gather_rows("neuron_test_ops")  # after import torch_neuron: Library.impl sees it
    assert "neuron_test_ops::copy_rows" in torch_neuron._custom_ops.installed()
    src = torch.arange(12.0).reshape(4, 3)
    results = {}
    for device in ("cpu", N):
        flat = torch.zeros(6, device=device)
        outs = [flat[:3], flat[3:]]
        torch.ops.neuron_test_ops.copy_rows(src.to(device), [2, 0], out=outs)
        total = torch.ops.neuron_test_ops.scaled_sum([src.to(device), src.to(device) * 3], torch.tensor(0.5, device=device))
        results[device] = (flat.cpu(), total.cpu())
    for n, c in zip(results[N], results["cpu"]):
        torch.testing.assert_close(n, c, rtol=0, atol=0)
    del lib


def test_custom_ops_defined_before_import_are_found():
    code = textwrap.dedent("""
        import torch, sys
        sys.path.insert(0, "tests/python")
        from test_custom_ops import _define_gather_rows
        lib = _define_gather_rows("defined_first")
        import torch_neuron
        assert "defined_first::copy_rows" in torch_neuron._custom_ops.installed()
        flat = torch.zeros(6, device="neuron")
        torch.ops.defined_first.copy_rows(torch.arange(12.0).reshape(4, 3).to("neuron"), [1, 3],
                                          out=[flat[:3], flat[3:]])
        print(flat.cpu().tolist())
    """)
    done = run_python(code, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([6.0, 8.0, 10.0, 18.0, 20.0, 22.0])


def test_storage_resizes_to_and_from_zero_bytes():
    # FSDP2's free_storage / alloc_storage, then its copy-in of new values.
    t = torch.arange(6.0, device=N)
    view = t[2:]
    storage = t.untyped_storage()
    assert storage.size() == 24 and storage.data_ptr() != 0
    storage.resize_(0)
    assert storage.size() == 0 and t.untyped_storage().size() == 0 and storage.data_ptr() == 0
    storage.resize_(24)
    assert storage.size() == 24
    t.copy_(torch.arange(6.0) * 2)
    torch.testing.assert_close(t.cpu(), torch.arange(6.0) * 2)
    torch.testing.assert_close(view.cpu(), torch.arange(2.0, 6.0) * 2)
    with pytest.raises(RuntimeError, match="only to 0 bytes or from 0 bytes.*from 24 to 12 bytes"):
        storage.resize_(12)
    cpu = torch.arange(4.0).untyped_storage()
    cpu.resize_(32)  # a CPU storage resizes as before
    assert cpu.size() == 32

