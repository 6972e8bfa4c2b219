"""torch.save / torch.load of neuron tensors and modules: values survive, and the
device on load follows map_location (or the saved device without one)."""

import io

import pytest
import torch


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


def test_views_saved_together_still_share_storage_after_load():
    base = torch.arange(12.0).neuron()
    loaded = save_and_load({"base": base, "row": base.view(3, 4)[1]})
    assert loaded["row"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    assert loaded["row"].tolist() == [4.0, 5.0, 6.0, 7.0]
    loaded["row"].fill_(0)
    assert loaded["base"].cpu().tolist()[4:8] == [0.0] * 4


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


@pytest.mark.xfail(
    reason="torch.arange(.., device='neuron:1') gets its storage from neuron:0 (resize_ "
    "allocates on the current device), so it is saved as neuron:0 and loads there",
    raises=AssertionError,
    strict=True,
)
def test_tensor_made_by_arange_on_neuron_one_loads_on_neuron_one(two_devices):
    loaded = save_and_load(torch.arange(4.0, device="neuron:1"))
    assert loaded.device == torch.device("neuron:1")
