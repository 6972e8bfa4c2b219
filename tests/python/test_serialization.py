"""torch.save / torch.load of neuron tensors and modules: values survive, and the
device on load follows map_location (or the saved device without one), in every
form map_location takes, as for CUDA checkpoints. A neuron tensor is saved as
its values (a CPU tensor) and its device through torch's own rebuild function,
so a neuron checkpoint loads where torch_neuron is not installed. It has no
storage, so views saved together load as independent tensors; a CPU
checkpoint's tensors that share a storage stay aliased on neuron."""

import io
import textwrap

import pytest
import torch

import torch_neuron
from child_process import run_python


def save_and_load(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


CPU_VALUES = {
    "matrix": torch.arange(12.0).reshape(3, 4),
    "int64": torch.arange(-5, 5),
    "float16": torch.linspace(-2, 2, 9, dtype=torch.float16),
    "bfloat16": torch.linspace(-2, 2, 9, dtype=torch.bfloat16),
    "bool": torch.tensor([True, False, True]),
}


@pytest.fixture
def saved_tensors():
    return {name: t.neuron() for name, t in CPU_VALUES.items()}


def test_load_with_map_location_cpu_returns_cpu_tensors_with_same_values(saved_tensors):
    loaded = save_and_load(saved_tensors, map_location="cpu")
    for name, expected in CPU_VALUES.items():
        assert loaded[name].device == torch.device("cpu"), name
        assert loaded[name].dtype == expected.dtype, name
        assert torch.equal(loaded[name], expected), name


def test_load_without_map_location_returns_tensors_on_neuron(saved_tensors):
    loaded = save_and_load(saved_tensors)
    for name, expected in CPU_VALUES.items():
        assert loaded[name].device == torch.device("neuron:0"), name
        assert torch.equal(loaded[name].cpu(), expected), name


def test_load_with_map_location_neuron_one(saved_tensors, two_devices):
    for location in ("neuron:1", torch.device("neuron", 1)):
        loaded = save_and_load(saved_tensors, map_location=location)
        for name, expected in CPU_VALUES.items():
            assert loaded[name].device == torch.device("neuron:1"), name
            assert torch.equal(loaded[name].cpu(), expected), name


def test_saved_device_is_kept_without_map_location(two_devices):
    saved = {"zero": torch.ones(2).to("neuron:0"), "one": torch.ones(2).to("neuron:1")}
    loaded = save_and_load(saved)
    assert loaded["zero"].device == torch.device("neuron:0")
    assert loaded["one"].device == torch.device("neuron:1")


def test_views_saved_together_load_as_independent_tensors_with_their_values():
    base = torch.arange(12.0).neuron()
    loaded = save_and_load({"base": base, "row": base.view(3, 4)[1]})
    assert loaded["row"].device == loaded["base"].device == torch.device("neuron:0")
    assert loaded["row"].tolist() == [4.0, 5.0, 6.0, 7.0]
    assert loaded["row"]._base is None
    loaded["row"].fill_(0)
    assert loaded["base"].cpu().tolist() == list(map(float, range(12)))  # not shared any more
    assert base.cpu().tolist()[4:8] == [4.0, 5.0, 6.0, 7.0]  # nor with the saved tensors


def test_module_state_dict_round_trips(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).neuron()
    model(torch.randn(5, 4).neuron())  # update the BatchNorm running statistics
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)

    on_cpu = torch.load(path, map_location="cpu")
    on_neuron = torch.load(path)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    fresh.load_state_dict(on_cpu)

    for name, value in model.state_dict().items():
        assert on_cpu[name].device == torch.device("cpu"), name
        assert on_neuron[name].device == torch.device("neuron:0"), name
        assert torch.equal(on_cpu[name], value.cpu()), name
        assert torch.equal(on_neuron[name].cpu(), value.cpu()), name
        assert torch.equal(fresh.state_dict()[name], value.cpu()), name


def test_tensor_made_by_arange_on_neuron_one_loads_on_neuron_one(two_devices):
    loaded = save_and_load(torch.arange(4.0, device="neuron:1"))
    assert loaded.device == torch.device("neuron:1")
    assert torch.equal(loaded.cpu(), torch.arange(4.0))


def test_requires_grad_survives_and_map_location_cpu_keeps_it(two_devices):
    saved = torch.arange(3.0).to("neuron:1").requires_grad_()
    for kwargs, device in (({}, "neuron:1"), ({"map_location": "cpu"}, "cpu")):
        loaded = save_and_load(saved, **kwargs)
        assert loaded.device == torch.device(device) and loaded.requires_grad
        assert torch.equal(loaded.detach().cpu(), torch.arange(3.0))


CPU_STATE = {"w": torch.arange(6.0).view(2, 3), "b": torch.ones(3), "n": torch.tensor([1, 2])}


def saved_bytes(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("map_location,device", [
    ("neuron", "neuron:0"), ("neuron:1", "neuron:1"), (torch.device("neuron", 1), "neuron:1"),
    ({"cpu": "neuron:1"}, "neuron:1"), (lambda storage, loc: storage.neuron(1), "neuron:1"),
])
def test_a_cpu_checkpoint_loads_onto_neuron(map_location, device, weights_only, two_devices):
    data = saved_bytes(CPU_STATE)
    loaded = torch.load(io.BytesIO(data), map_location=map_location, weights_only=weights_only)
    for name, expected in CPU_STATE.items():
        assert loaded[name].device == torch.device(device), name
        assert torch.equal(loaded[name].cpu(), expected), name


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("map_location,device", [
    (lambda storage, loc: storage, "cpu"), (lambda storage, loc: None, "neuron:0"),
    (lambda storage, loc: storage.neuron(1) if loc.startswith("neuron") else storage, "neuron:1"),
    ({"neuron:0": "cpu"}, "cpu"),
])
def test_a_neuron_checkpoint_follows_every_form_of_map_location(map_location, device, weights_only,
                                                                 two_devices):
    data = saved_bytes({k: v.to("neuron") for k, v in CPU_STATE.items()})
    loaded = torch.load(io.BytesIO(data), map_location=map_location, weights_only=weights_only)
    for name, expected in CPU_STATE.items():
        assert loaded[name].device == torch.device(device), name
        assert torch.equal(loaded[name].cpu(), expected), name


def test_tensors_sharing_a_storage_stay_aliased_on_neuron():
    # A tied embedding and head as state_dict() gives them: two tensors over
    # one storage (and a third that views part of it).
    weight = torch.arange(4.0)
    state = {"embed": weight.detach(), "head": weight.detach(), "other": weight[:2]}
    loaded = torch.load(io.BytesIO(saved_bytes(state)), map_location="neuron")
    on_cpu = torch.load(io.BytesIO(saved_bytes(state)))
    on_cpu["embed"].mul_(10)
    assert on_cpu["head"].tolist() == [0.0, 10.0, 20.0, 30.0]  # what the CPU does
    assert loaded["embed"] is not loaded["head"]
    loaded["embed"].mul_(10)                    # seen through the alias, as on the CPU
    assert loaded["head"].cpu().tolist() == [0.0, 10.0, 20.0, 30.0]
    assert loaded["other"].cpu().tolist() == [0.0, 1.0]  # another view: its own tensor


def test_a_neuron_checkpoint_loads_where_torch_neuron_is_not_installed(tmp_path):
    path = tmp_path / "ckpt.pt"
    model = torch.nn.Linear(3, 2).to("neuron")
    torch.save({"model": model.state_dict(), "step": 7}, path)
    expected = {k: v.cpu() for k, v in model.state_dict().items()}
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch_neuron"] = None      # as if it were not installed
        import torch
        state = torch.load({str(path)!r}, map_location="cpu", weights_only=True)
        assert "torch_neuron" not in [m for m in sys.modules if sys.modules[m] is not None]
        torch.save({{k: v for k, v in state["model"].items()}}, {str(tmp_path / "cpu.pt")!r})
        print(state["step"], sorted(state["model"]), state["model"]["weight"].device)
    """)
    done = run_python(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7", "['bias',", "'weight']", "cpu"]
    for name, value in torch.load(tmp_path / "cpu.pt").items():
        assert torch.equal(value, expected[name]), name


class _LegacyNeuronTensor:
    """Pickles as torch_neuron 0.1 pickled neuron tensors."""

    def __init__(self, values):
        self.values = values

    def __reduce__(self):
        import ctypes
        data = ctypes.string_at(self.values.data_ptr(), self.values.nbytes)
        return (torch_neuron._serialization._rebuild_neuron_tensor,
                (data, self.values.dtype, tuple(self.values.shape), "neuron:0", False))


def test_checkpoints_of_torch_neuron_0_1_still_load():
    data = saved_bytes({"w": _LegacyNeuronTensor(torch.arange(6.0).view(2, 3))})
    for location, device in ((None, "neuron:0"), ("cpu", "cpu")):
        loaded = torch.load(io.BytesIO(data), map_location=location, weights_only=True)
        assert loaded["w"].device == torch.device(device)
        assert torch.equal(loaded["w"].cpu(), torch.arange(6.0).view(2, 3))


def test_safetensors_round_trip_a_neuron_models_state_dict(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("neuron")
    model(torch.randn(5, 4).to("neuron"))
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file(model.state_dict(), path)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("neuron")
    fresh.load_state_dict(safetensors_torch.load_file(path))
    for name, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name].cpu(), value.cpu()), name
    # save_model / load_model, which handle a tied head and embedding.
    tied = torch.nn.Module()
    tied.embed, tied.head = torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False)
    tied.head.weight = tied.embed.weight
    tied = tied.to("neuron")
    safetensors_torch.save_model(tied, tmp_path / "tied.safetensors")
    again = torch.nn.Module()
    again.embed, again.head = torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False)
    again.head.weight = again.embed.weight
    again = again.to("neuron")
    safetensors_torch.load_model(again, tmp_path / "tied.safetensors")
    assert again.head.weight is again.embed.weight
    assert torch.equal(again.embed.weight.cpu(), tied.embed.weight.cpu())


def test_data_ptr_tells_views_from_copies_as_on_the_cpu():
    # Virtual addresses: no host memory behind them, but the comparisons code
    # makes (view or copy? shared storage?) come out as on the CPU.
    for device in ("cpu", "neuron"):
        x = torch.arange(12.0, device=device)
        view = x.view(3, 4)[1:]
        assert view.data_ptr() - x.data_ptr() == 4 * x.element_size(), device
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() != 0, device
        assert x.clone().untyped_storage().data_ptr() != x.untyped_storage().data_ptr(), device
        assert x.reshape(3, 4).data_ptr() == x.data_ptr(), device
        assert x.view(3, 4).t().reshape(-1).data_ptr() != x.data_ptr(), device  # a copy
        assert x.storage().data_ptr() == x.data_ptr() and len(x.storage()) == 12, device
        assert torch.empty(0, device=device).data_ptr() == 0, device
    # The storage holds no host bytes: reading it raises instead of reading memory.
    with pytest.raises(RuntimeError):
        torch.ones(3, device="neuron").untyped_storage().cpu()


def test_tied_weights_share_a_storage_and_separate_ones_do_not():
    # What safetensors and transformers look at to find tied parameters.
    safetensors_torch = pytest.importorskip("safetensors.torch")
    model = torch.nn.Module()
    model.embed, model.head = torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False)
    model.other = torch.nn.Linear(3, 5, bias=False)  # same size, not tied
    model.head.weight = model.embed.weight
    model = model.to("neuron")
    groups = sorted(sorted(g) for g in safetensors_torch._find_shared_tensors(model.state_dict()))
    assert groups == [["embed.weight", "head.weight"], ["other.weight"]]
