"""torch.save / torch.load of neuron tensors and modules: values survive, and the
device on load follows map_location (or the saved device without one). A neuron
tensor is pickled as its bytes, dtype, shape and device: it has no storage, so
views saved together load as independent tensors."""

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
