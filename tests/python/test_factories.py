"""Tensor factories on neuron: deterministic ones equal their CPU counterparts,
random ones draw from the neuron generator (a Mersenne Twister seeded like the
CPU one) exactly the numbers the CPU draws with the same seed, and printing shows
the same numbers as on CPU."""

import pytest
import torch

import torch_neuron

# ------------------------------------------------------ deterministic factories

DETERMINISTIC = {
    "zeros_int16": lambda d: torch.zeros(2, 3, dtype=torch.int16, device=d),
    "ones": lambda d: torch.ones(2, 3, device=d),
    "ones_bool": lambda d: torch.ones(4, dtype=torch.bool, device=d),
    "full_float": lambda d: torch.full((2, 3), 2.5, device=d),
    "full_int_infers_int64": lambda d: torch.full((2, 3), 7, device=d),
    "arange_int": lambda d: torch.arange(1, 10, 2, device=d),
    "arange_float": lambda d: torch.arange(0, 1, 0.1, device=d),
    "arange_float64": lambda d: torch.arange(-2, 2, 0.25, dtype=torch.float64, device=d),
    "linspace": lambda d: torch.linspace(-1, 1, 7, device=d),
    "linspace_half": lambda d: torch.linspace(0, 3, 5, dtype=torch.float16, device=d),
    "logspace": lambda d: torch.logspace(0, 2, 5, device=d),
    "eye_square": lambda d: torch.eye(3, device=d),
    "eye_rect": lambda d: torch.eye(3, 4, dtype=torch.int32, device=d),
    "tensor_literal": lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
}


@pytest.mark.parametrize("make", DETERMINISTIC.values(), ids=DETERMINISTIC.keys())
def test_deterministic_factory_equals_cpu(make):
    expected = make("cpu")
    actual = make("neuron")
    assert actual.device == torch.device("neuron:0")
    assert actual.dtype == expected.dtype
    assert torch.equal(actual.cpu(), expected)


def test_empty_has_requested_shape_dtype_and_device_and_is_only_traced(metrics):
    t = torch.empty(2, 3, dtype=torch.float64, device="neuron")
    assert (t.shape, t.dtype, t.device) == ((2, 3), torch.float64, torch.device("neuron:0"))
    assert t.is_contiguous() and t.stride() == (3, 1)
    # empty is traced like any op: no CPU fallback, no execution, no transfer yet.
    assert {k: v for k, v in metrics.counters().items() if not k.endswith(".ns")} == {
        "trace.op.count": 1
    }


def test_empty_strided_reports_the_strides_asked_for():
    t = torch.empty_strided((2, 3), (1, 2), dtype=torch.float64, device="neuron")
    assert (t.shape, t.dtype, t.device) == ((2, 3), torch.float64, torch.device("neuron:0"))
    assert t.stride() == (1, 2) and not t.is_contiguous()
    values = torch.arange(6.0, dtype=torch.float64).reshape(3, 2).t()
    t.copy_(values)
    assert torch.equal(t.cpu(), values)


def test_arange_gets_the_shape_of_its_own_end():
    # Only shapes first: a wrong-shaped graph would fail when it runs.
    shapes = [tuple(torch.arange(end, device="neuron").shape) for end in (5.0, 7.0)]
    assert shapes == [(5,), (7,)]
    assert torch.equal(torch.arange(7.0, device="neuron").cpu(), torch.arange(7.0))


@pytest.mark.parametrize(
    "like, expected",
    [
        (torch.zeros_like, torch.zeros(2, 3, dtype=torch.float64)),
        (torch.ones_like, torch.ones(2, 3, dtype=torch.float64)),
        (lambda t: torch.full_like(t, 4), torch.full((2, 3), 4.0, dtype=torch.float64)),
    ],
    ids=["zeros_like", "ones_like", "full_like"],
)
def test_like_factories_keep_device_and_dtype(like, expected):
    src = torch.rand(2, 3, dtype=torch.float64, device="neuron")
    out = like(src)
    assert out.device == src.device and out.dtype == torch.float64
    assert torch.equal(out.cpu(), expected)


@pytest.mark.parametrize(
    "make, initialized",
    [(lambda t: torch.zeros_like(t, device="cpu"), True),
     (lambda t: torch.full_like(t, 2.0, device="cpu"), True),
     (lambda t: t.new_ones(4, device="cpu"), True),
     (lambda t: torch.empty_like(t, device="cpu"), False)],
    ids=["zeros_like", "full_like", "new_ones", "empty_like"],
)
def test_like_factories_asked_for_the_cpu_return_cpu_tensors_without_fallback(
        make, initialized, metrics):
    src = torch.rand(2, 3, device="neuron")
    out = make(src)
    expected = make(src.cpu())
    assert out.device == torch.device("cpu")
    assert out.shape == expected.shape and out.dtype == expected.dtype
    if initialized:
        assert torch.equal(out, expected)
    assert metrics.fallback_counts() == {}


def test_like_factories_on_neuron_one_stay_on_neuron_one(two_devices):
    src = torch.ones(2, device="neuron:1")
    assert torch.zeros_like(src).device == torch.device("neuron:1")
    assert torch.empty_like(src).device == torch.device("neuron:1")


# ------------------------------------------------------------- random factories

RANDOM = {
    "rand": lambda d: torch.rand(64, device=d),
    "randn": lambda d: torch.randn(64, device=d),
    "randint": lambda d: torch.randint(0, 1000, (64,), device=d),
    "randperm": lambda d: torch.randperm(64, device=d),
    "bernoulli": lambda d: torch.bernoulli(torch.full((64,), 0.5, device=d)),
    "dropout": lambda d: torch.nn.functional.dropout(torch.ones(64, device=d), 0.5),
    "normal_": lambda d: torch.empty(64, device=d).normal_(),
    "uniform_": lambda d: torch.empty(64, device=d).uniform_(-2, 2),
    "normal": lambda d: torch.normal(0.0, 1.0, (64,), device=d),
    "normal_tensor_mean": lambda d: torch.normal(torch.arange(64.0).to(d), 1.0),
}


@pytest.mark.parametrize("make", RANDOM.values(), ids=RANDOM.keys())
def test_random_op_draws_the_cpu_numbers_from_the_neuron_generator(make):
    torch.manual_seed(3)
    expected = [make("cpu"), make("cpu")]
    cpu_state_after = torch.get_rng_state()
    torch.manual_seed(3)
    cpu_state = torch.get_rng_state()
    actual = [make("neuron"), make("neuron")]
    torch_neuron.sync(actual)  # both draws in one graph (one at a time: see the test below)
    for a, e in zip(actual, expected):
        assert a.device == torch.device("neuron:0") and a.dtype == e.dtype
        assert torch.equal(a.cpu(), e)
    # The neuron generator moved exactly as the CPU one would have; the CPU one did not move.
    assert torch.equal(torch.neuron.get_rng_state(), cpu_state_after)
    assert torch.equal(torch.get_rng_state(), cpu_state)


@pytest.mark.parametrize("make", RANDOM.values(), ids=RANDOM.keys())
def test_random_op_different_seeds_give_different_values(make):
    torch.manual_seed(3)
    first = make("neuron")
    torch.manual_seed(4)
    second = make("neuron")
    assert not torch.equal(first.cpu(), second.cpu())


@pytest.mark.parametrize("make", RANDOM.values(), ids=RANDOM.keys())
def test_set_rng_state_replays_random_op(make):
    torch.manual_seed(9)
    make("neuron")  # advance the generator so the state is not the freshly seeded one
    state = torch.neuron.get_rng_state()
    first = make("neuron")
    later = make("neuron")
    torch.neuron.set_rng_state(state)
    replay = make("neuron")
    assert torch.equal(first.cpu(), replay.cpu())
    assert not torch.equal(first.cpu(), later.cpu())


def test_random_results_read_one_at_a_time_are_the_cpu_draws():
    torch.manual_seed(3)
    expected = [torch.rand(4), torch.rand(4)]
    torch.manual_seed(3)
    first, second = torch.rand(4, device="neuron"), torch.rand(4, device="neuron")
    assert torch.equal(first.cpu(), expected[0])
    assert torch.equal(second.cpu(), expected[1])


def test_a_discarded_random_result_still_advances_the_generator_like_cpu():
    torch.manual_seed(0)
    torch.rand(3)
    expected = torch.rand(3)
    torch.manual_seed(0)
    torch.rand(3, device="neuron")  # result dropped at once, as on the CPU line above
    actual = torch.rand(3, device="neuron")
    assert torch.equal(actual.cpu(), expected)


def test_random_values_have_the_requested_distribution_range():
    torch.manual_seed(0)
    u = torch.empty(4096, device="neuron").uniform_(-2, 2).cpu()
    assert -2 <= u.min().item() and u.max().item() < 2
    r = torch.randint(5, 10, (4096,), device="neuron").cpu()
    assert sorted(r.unique().tolist()) == [5, 6, 7, 8, 9]
    p = torch.randperm(100, device="neuron").cpu()
    assert torch.equal(p.sort().values, torch.arange(100))
    d = torch.nn.functional.dropout(torch.ones(4096, device="neuron"), 0.25).cpu()
    assert torch.equal(d.unique(), torch.tensor([0.0, 1 / 0.75]))


def test_random_op_with_explicit_neuron_generator_follows_that_generator():
    g = torch.Generator(device="neuron")
    assert g.device == torch.device("neuron:0")
    g.manual_seed(5)
    first = torch.rand(8, generator=g, device="neuron")
    g.manual_seed(5)
    second = torch.rand(8, generator=g, device="neuron")
    torch.manual_seed(5)  # the default generator with the same seed gives the same stream
    default = torch.rand(8, device="neuron")
    cpu = torch.rand(8, generator=torch.Generator().manual_seed(5))
    assert torch.equal(first.cpu(), cpu)
    assert torch.equal(second.cpu(), cpu)
    assert torch.equal(default.cpu(), cpu)


def test_random_op_on_neuron_rejects_a_cpu_generator():
    with pytest.raises(RuntimeError, match="expected a neuron generator"):
        torch.rand(4, generator=torch.Generator(), device="neuron")


def test_each_device_has_its_own_generator(two_devices):
    torch.manual_seed(0)
    seeded = torch.get_rng_state()
    drawn = torch.rand(3, device="neuron:1")
    expected = torch.rand(3)
    assert torch.equal(torch.neuron.get_rng_state(0), seeded)
    assert torch.equal(torch.neuron.get_rng_state(1), torch.get_rng_state())
    assert torch.equal(drawn.cpu(), expected)


def test_fork_rng_restores_the_neuron_generator():
    torch.manual_seed(0)
    with torch.random.fork_rng(devices=[0], device_type="neuron"):
        inside = torch.rand(3, device="neuron")
    after = torch.rand(3, device="neuron")
    assert torch.equal(inside.cpu(), after.cpu())


# --------------------------------------------------------------------- printing

@pytest.mark.parametrize(
    "cpu, golden",
    [
        (torch.arange(6.0).reshape(2, 3),
         "tensor([[0., 1., 2.],\n        [3., 4., 5.]], device='neuron:0')"),
        (torch.tensor([1.5, -2.25, 1e-8]),
         "tensor([ 1.5000e+00, -2.2500e+00,  1.0000e-08], device='neuron:0')"),
        (torch.arange(5), "tensor([0, 1, 2, 3, 4], device='neuron:0')"),
        (torch.tensor([True, False]), "tensor([ True, False], device='neuron:0')"),
        (torch.tensor(3.25), "tensor(3.2500, device='neuron:0')"),
        (torch.tensor([1.0, 2.0], dtype=torch.float16),
         "tensor([1., 2.], device='neuron:0', dtype=torch.float16)"),
        (torch.empty(0), "tensor([], device='neuron:0')"),
    ],
    ids=["matrix", "scientific", "int64", "bool", "scalar", "float16", "empty"],
)
def test_repr_shows_device_and_the_cpu_numbers(cpu, golden):
    text = repr(cpu.neuron())
    assert text == golden
    cpu_text = repr(cpu)
    # The CPU repr is the same text without the device (dtype suffix kept in place).
    assert text.replace("device='neuron:0', ", "").replace(", device='neuron:0'", "") == cpu_text


def test_repr_of_a_long_tensor_has_the_same_numbers_as_cpu():
    torch.manual_seed(0)
    cpu = torch.randn(200)
    text = repr(cpu.neuron())
    assert text.endswith(",\n       device='neuron:0')")
    numbers = text[: -len(",\n       device='neuron:0')")]
    assert numbers == repr(cpu)[: -len(")")]


@pytest.mark.parametrize(
    "make, golden",
    [
        (lambda d: torch.ones(2, device=d).requires_grad_(),
         "tensor([1., 1.]{}, requires_grad=True)"),
        (lambda d: torch.ones(2, device=d).requires_grad_() * 2,
         "tensor([2., 2.]{}, grad_fn=<MulBackward0>)"),
        (lambda d: (torch.ones(2, device=d).requires_grad_() * 2).sum(),
         "tensor(4.{}, grad_fn=<SumBackward0>)"),
    ],
    ids=["requires_grad", "grad_fn", "scalar_grad_fn"],
)
def test_repr_has_the_autograd_suffixes_of_cpu(make, golden):
    assert repr(make("cpu")) == golden.format("")
    assert repr(make("neuron")) == golden.format(", device='neuron:0'")


def test_repr_names_neuron_one(two_devices):
    assert repr(torch.ones(2, device="neuron:1")) == "tensor([1., 1.], device='neuron:1')"



# torch's default dtype is global state the op's arguments do not show: a Meta
# result cached before set_default_dtype gave float32 results after it (a silent
# wrong dtype in every factory and float promotion).
@pytest.mark.parametrize("make", [
    pytest.param(lambda d: torch.ones(3, device=d), id="ones"),
    pytest.param(lambda d: torch.randn(3, device=d), id="randn"),
    pytest.param(lambda d: torch.arange(3, device=d) / 2, id="int_div"),
    pytest.param(lambda d: torch.tensor([True, False], device=d) * 1.5, id="bool_times_float"),
    pytest.param(lambda d: torch.linspace(0, 1, 4, device=d), id="linspace"),
])
def test_results_follow_the_default_dtype_set_between_calls(make):
    before = torch.get_default_dtype()
    try:
        for dtype in (torch.float32, torch.float64, torch.float16, torch.float32):
            torch.set_default_dtype(dtype)
            assert make("neuron").dtype == make("cpu").dtype == dtype
    finally:
        torch.set_default_dtype(before)


# An op traced with the default dtype in effect takes it again when its graph
# runs: a change of the default between trace and sync made the kernels compute
# in the new dtype and the outputs be cast back (float64 results with float32
# precision), and the constant folder raised an internal error on torch.empty.
# A change of the default now first runs what was traced.
DEFAULT_DTYPE_OPS = {
    "int_div": lambda d: torch.arange(1000, device=d) / 3,
    "sin_of_int": lambda d: torch.sin(torch.arange(1000, device=d)),
    "int_times_float": lambda d: torch.arange(1000, device=d) * 0.1,
    "empty_filled": lambda d: torch.empty(3, device=d).fill_(1 / 3),
    "zeros_plus": lambda d: torch.zeros(2, device=d) + 1 / 3,
    "full": lambda d: torch.full((4,), 0.1, device=d).cumsum(0),
}


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_ops_traced_before_a_change_of_default_dtype_keep_its_values(mode, metrics):
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        expected = {name: make("cpu") for name, make in DEFAULT_DTYPE_OPS.items()}
        with torch_neuron.mode(mode):
            actual = {name: make("neuron") for name, make in DEFAULT_DTYPE_OPS.items()}
            syncs = metrics.counter("graph.sync.count")
            torch.set_default_dtype(torch.float32)
            if mode == "lazy":  # what was pending ran as one graph, at the change
                assert metrics.counter("graph.sync.count") == syncs + 1
            torch.set_default_dtype(torch.float32)  # no change: nothing runs
            if mode == "lazy":
                assert metrics.counter("graph.sync.count") == syncs + 1
            for name, value in actual.items():
                assert value.dtype == torch.float64, name
                assert torch.equal(value.cpu(), expected[name]), name
    finally:
        torch.set_default_dtype(before)


def test_a_compile_under_another_default_dtype_leaves_default_dtype_nodes_to_run_time():
    # A compile service's process keeps its own default dtype: folding
    # torch.empty(3) there gave float32 where float64 was traced.
    before = torch.get_default_dtype()
    set_without_sync = torch._C._set_default_dtype.__wrapped__
    try:
        torch.set_default_dtype(torch.float64)
        x = torch.empty(3, device="neuron").fill_(1 / 3) + torch.arange(3, device="neuron") / 7
        set_without_sync(torch.float32)
        text, _ = torch_neuron._C._compiled_text([x])  # compiles under float32
        assert "aten::empty.memory_format" in text
        set_without_sync(torch.float64)
        assert torch.equal(x.cpu(), torch.full((3,), 1 / 3) + torch.arange(3) / 7)
    finally:
        torch.set_default_dtype(before)
