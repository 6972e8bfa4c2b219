"""The neuron device as PyTorch sees it: registration, the torch.neuron device
module, device selection, and tensors on more than one device."""

import gc
import os

import pytest
import torch

import torch_neuron


# ------------------------------------------------------------------ registration

def test_torch_device_parses_neuron_with_and_without_index():
    assert torch.device("neuron").type == "neuron"
    assert torch.device("neuron").index is None
    assert torch.device("neuron:1") == torch.device("neuron", 1)
    assert str(torch.device("neuron", 1)) == "neuron:1"


def test_tensors_created_on_neuron_default_to_device_zero():
    t = torch.ones(3, device="neuron")
    assert t.device == torch.device("neuron", 0)
    assert t.is_neuron
    assert not torch.ones(3).is_neuron


def test_tensor_neuron_method_moves_values_to_the_device():
    cpu = torch.arange(6.0).reshape(2, 3)
    moved = cpu.neuron()
    assert moved.device == torch.device("neuron:0")
    assert moved.is_neuron
    assert torch.equal(moved.cpu(), cpu)


def test_module_neuron_moves_parameters_and_buffers_keeping_values():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    reference = {k: v.clone() for k, v in cpu_model.state_dict().items()}

    returned = cpu_model.neuron()

    assert returned is cpu_model
    tensors = list(cpu_model.parameters()) + list(cpu_model.buffers())
    assert len(tensors) == 7  # weight, bias, bn weight/bias, running mean/var, count
    assert {t.device for t in tensors} == {torch.device("neuron:0")}
    for name, value in cpu_model.state_dict().items():
        assert torch.equal(value.cpu(), reference[name]), name


def test_module_neuron_accepts_a_device_index(two_devices):
    model = torch.nn.Linear(2, 2).neuron(1)
    assert {p.device for p in model.parameters()} == {torch.device("neuron:1")}


def test_torch_accelerator_reports_neuron():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator().type == "neuron"
    assert torch.accelerator.device_count() == torch.neuron.device_count()


def test_torch_accelerator_device_index_is_the_neuron_current_device(two_devices):
    torch.accelerator.set_device_index(1)
    assert torch.neuron.current_device() == 1
    assert torch.accelerator.current_device_index() == 1


# ----------------------------------------------------------------- device module

def test_device_count_follows_the_environment():
    assert torch.neuron.device_count() == int(os.environ["TORCH_NEURON_NUM_DEVICES"])
    assert torch.neuron.is_available()
    assert torch_neuron.config.current()["num_devices"] == torch.neuron.device_count()


def test_torch_neuron_is_the_registered_device_module():
    assert torch.neuron is torch_neuron.device
    assert torch.neuron.current_device() == 0


def test_synchronize_of_any_device_keeps_the_current_device(two_devices):
    for device in (None, 1, "neuron:1", torch.device("neuron", 0)):
        torch.neuron.synchronize(device)
        assert torch.neuron.current_device() == 0
    torch.accelerator.synchronize(1)
    assert torch.neuron.current_device() == 0


def test_default_generators_has_one_neuron_generator_per_device():
    gens = torch.neuron.default_generators
    assert len(gens) == torch.neuron.device_count()
    assert [g.device for g in gens] == [
        torch.device("neuron", i) for i in range(torch.neuron.device_count())
    ]


def test_manual_seed_seeds_only_the_current_device(two_devices):
    torch.neuron.manual_seed_all(11)
    torch.neuron.manual_seed(7)
    assert torch.neuron.initial_seed() == 7
    assert torch.neuron.default_generators[0].initial_seed() == 7
    assert torch.neuron.default_generators[1].initial_seed() == 11


def test_manual_seed_all_and_torch_manual_seed_seed_every_device(two_devices):
    count = torch.neuron.device_count()
    torch.neuron.manual_seed_all(8)
    assert [g.initial_seed() for g in torch.neuron.default_generators] == [8] * count
    torch.manual_seed(123)
    assert [g.initial_seed() for g in torch.neuron.default_generators] == [123] * count


def test_seed_picks_a_new_initial_seed():
    torch.manual_seed(5)
    torch.neuron.seed()
    first = torch.neuron.initial_seed()
    torch.neuron.seed()
    assert torch.neuron.initial_seed() != first  # 2**-64 chance of a false failure


def test_rng_state_is_the_cpu_generator_state_after_the_same_seed():
    torch.manual_seed(0x0102)
    seeded = torch.get_rng_state()
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    assert state.shape == (5056,)  # a Mersenne Twister state, as on the CPU
    assert torch.equal(state, seeded)
    drawn = torch.rand(3, device="neuron")
    expected = torch.rand(3)  # the same draw from the CPU generator
    after = torch.neuron.get_rng_state()
    assert not torch.equal(after, seeded)
    assert torch.equal(after, torch.get_rng_state())
    assert torch.equal(drawn.cpu(), expected)


def test_neuron_generator_has_no_offset():
    with pytest.raises(RuntimeError, match="Mersenne Twister streams and have no offset"):
        torch.neuron.default_generators[0].get_offset()


# ------------------------------------------------------------- device selection

def test_set_device_changes_where_unindexed_neuron_tensors_go(two_devices):
    torch.neuron.set_device(1)
    assert torch.neuron.current_device() == 1
    assert torch.zeros(2, device="neuron").device == torch.device("neuron:1")
    torch.neuron.set_device("neuron:0")
    assert torch.zeros(2, device="neuron").device == torch.device("neuron:0")


def test_device_context_manager_restores_the_previous_device(two_devices):
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        assert torch.ones(1, device="neuron").device == torch.device("neuron:1")
        with torch.neuron.device("neuron:0"):
            assert torch.neuron.current_device() == 0
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0


def test_device_context_manager_restores_after_an_exception(two_devices):
    with pytest.raises(KeyError):
        with torch.neuron.device(torch.device("neuron", 1)):
            raise KeyError("boom")
    assert torch.neuron.current_device() == 0


# ------------------------------------------------------------ multiple devices

def test_tensors_live_on_neuron_one_with_correct_values(two_devices):
    t = torch.full((2, 3), 4.5, device="neuron:1")
    assert t.device == torch.device("neuron:1")
    assert torch.equal(t.cpu(), torch.full((2, 3), 4.5))
    u = (t * 2).sum(0)
    assert u.device == torch.device("neuron:1")
    assert torch.equal(u.cpu(), torch.full((3,), 18.0))


@pytest.mark.parametrize("src, dst", [("neuron:0", "neuron:1"), ("neuron:1", "neuron:0")])
def test_to_between_devices_goes_through_the_host_and_preserves_values(
    two_devices, src, dst, metrics
):
    cpu = torch.arange(24.0).reshape(4, 6)
    on_src = cpu.to(src)
    metrics.reset()
    on_dst = on_src.to(dst)
    assert on_dst.device == torch.device(dst)
    # One download from the source device, one upload to the destination.
    nbytes = 24 * 4
    assert {k: v for k, v in metrics.counters().items() if not k.endswith(".ns")} == {
        "transfer.device_to_host.count": 1,
        "transfer.device_to_host.bytes": nbytes,
        "transfer.host_to_device.count": 1,
        "transfer.host_to_device.bytes": nbytes,
    }
    assert torch.equal(on_dst.cpu(), cpu)


def test_copy_between_devices_of_a_transposed_view_with_dtype_change(two_devices):
    cpu = torch.arange(12).reshape(3, 4)
    moved = cpu.to("neuron:0").t().to("neuron:1", torch.float64)
    assert moved.device == torch.device("neuron:1") and moved.dtype == torch.float64
    assert torch.equal(moved.cpu(), cpu.t().double())


def test_to_the_same_device_returns_the_same_tensor_without_copying(metrics):
    t = torch.ones(3, device="neuron")
    metrics.reset()
    assert t.to("neuron") is t
    assert t.to("neuron:0") is t
    assert metrics.counters() == {}


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: torch.arange(4.0, device="neuron:1"), torch.arange(4.0)),
        (
            lambda: torch.add(
                torch.ones(3, device="neuron:1"), 1, out=torch.empty(0, device="neuron:1")
            ),
            torch.full((3,), 2.0),
        ),
    ],
    ids=["arange", "add_out_into_empty"],
)
def test_neuron_one_tensor_materializes_in_neuron_one_memory(two_devices, make, expected):
    assert torch.neuron.current_device() == 0
    torch_neuron.wait_device_ops()
    gc.collect()
    torch.neuron.empty_cache()
    base0, base1 = torch.neuron.memory_allocated(0), torch.neuron.memory_allocated(1)
    t = make()
    assert t.device == torch.device("neuron:1")
    torch_neuron.sync(t)
    torch_neuron.wait_device_ops()
    # One 512-byte block for the result, on neuron:1 only.
    assert torch.neuron.memory_allocated(0) - base0 == 0
    assert torch.neuron.memory_allocated(1) - base1 == 512
    assert torch.equal(t.cpu(), expected)
