"""Errors a user can act on (unsupported dtypes, bad device indices, malformed
TORCH_NEURON_* settings), the config object and its scoped override, and the
metrics snapshot file."""

import json

import pytest
import torch

import torch_neuron
from child_process import run_python, start_python

# ------------------------------------------------------------ unsupported dtypes

UNSUPPORTED = [torch.float8_e4m3fnuz, torch.float8_e4m3fn, torch.float8_e5m2]


def dtype_name(dtype: torch.dtype) -> str:
    """The name the error uses: c10's (Float8_e4m3fn, QInt8)."""
    return {
        torch.float8_e4m3fnuz: "Float8_e4m3fnuz",
        torch.float8_e4m3fn: "Float8_e4m3fn",
        torch.float8_e5m2: "Float8_e5m2",
        torch.qint8: "QInt8",
    }[dtype]


@pytest.mark.parametrize(
    "dtype",
    UNSUPPORTED + [torch.qint8],
    ids=str,
)
def test_factory_of_unsupported_dtype_raises_type_error_naming_it(dtype):
    message = f"neuron devices do not support dtype {dtype_name(dtype)};"
    with pytest.raises(TypeError, match=message):
        torch.zeros(2, dtype=dtype, device="neuron")


@pytest.mark.parametrize(
    "make_cpu",
    [
        pytest.param(lambda: torch.ones(2).to(torch.float8_e5m2), id="float8_e5m2"),
        pytest.param(
            lambda: torch._make_per_tensor_quantized_tensor(
                torch.ones(2, dtype=torch.int8), 0.1, 0
            ),
            id="qint8",
        ),
    ],
)
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_moving_an_unsupported_dtype_to_neuron_raises_type_error_naming_it(make_cpu):
    cpu = make_cpu()
    with pytest.raises(TypeError, match=f"do not support dtype {dtype_name(cpu.dtype)};"):
        cpu.to("neuron")


def test_converting_a_neuron_tensor_to_an_unsupported_dtype_raises_type_error():
    with pytest.raises(TypeError, match="do not support dtype Float8_e5m2"):
        torch.ones(2, device="neuron").to(torch.float8_e5m2)


def test_pinned_neuron_tensor_is_rejected():
    with pytest.raises(RuntimeError, match="only CPU tensors can be pinned"):
        torch.empty(3, device="neuron", pin_memory=True)


# ------------------------------------------------------------ device indices

@pytest.mark.parametrize(
    "action",
    [
        lambda: torch.zeros(1, device="neuron:5"),
        lambda: torch.ones(1).to("neuron:5"),
        lambda: torch.neuron.set_device(9),
        lambda: torch.neuron.device(9),
        lambda: torch.neuron.synchronize(5),
        lambda: torch.neuron.memory_stats(7),
        lambda: torch.neuron.get_rng_state(5),
        lambda: torch.neuron.set_memory_limit(0, device=-1),
    ],
    ids=["zeros", "to", "set_device", "device_context", "synchronize", "memory_stats",
         "get_rng_state", "negative_index"],
)
def test_device_index_out_of_range_is_an_error_saying_so(action):
    count = torch.neuron.device_count()
    with pytest.raises(ValueError, match="out of range") as info:
        action()
    assert f"this process has {count} neuron device" in str(info.value)
    assert torch.neuron.current_device() == 0


def test_set_device_rejects_a_non_neuron_device():
    with pytest.raises(ValueError, match="expected a neuron device, got 'cpu'"):
        torch.neuron.set_device("cpu")


@pytest.mark.parametrize(
    "state, error, message",
    [
        (torch.zeros(8, dtype=torch.uint8), RuntimeError,
         "Expected a CPUGeneratorImplState of size 5056 but found the input RNG state size "
         "to be 8"),
        (torch.zeros(5056), TypeError, "RNG state must be a torch.ByteTensor"),
    ],
    ids=["too_short", "not_bytes"],
)
def test_set_rng_state_rejects_a_malformed_state_as_the_cpu_does(state, error, message):
    torch.manual_seed(6)
    before = torch.neuron.get_rng_state()
    with pytest.raises(error) as on_cpu:
        torch.set_rng_state(state)
    with pytest.raises(error) as on_neuron:
        torch.neuron.set_rng_state(state)
    assert str(on_neuron.value) == str(on_cpu.value) == message
    assert torch.equal(torch.neuron.get_rng_state(), before)


# ------------------------------------------------- tensors of two devices

@pytest.mark.parametrize("order", ["cpu-first", "neuron-first"])
def test_a_composite_ops_own_device_check_words_the_error_as_on_cuda(order):
    # block_diag's CPU and CUDA kernel is its composite one, which checks the
    # devices itself; the tracer runs it first so its words, not the generic
    # ones, reach the user.
    cpu, neuron = torch.ones(2, 2), torch.ones(2, 2, device="neuron")
    args, devices = ((cpu, neuron), ("cpu", "neuron:0")) if order == "cpu-first" else \
        ((neuron, cpu), ("neuron:0", "cpu"))
    message = (f"torch.block_diag: input tensors must all be on the same device. Input 0 is on device "
               f"{devices[0]} and input 1 is on device {devices[1]}")
    with pytest.raises(RuntimeError) as error:
        torch.block_diag(*args)
    assert str(error.value).splitlines()[0] == message
    # The op itself still traces, equal to the CPU.
    expected = torch.block_diag(torch.ones(2, 2), torch.tensor([1.0, 2.0]))
    assert torch.equal(torch.block_diag(neuron, torch.tensor([1.0, 2.0], device="neuron")).cpu(), expected)


def test_an_op_with_a_kernel_of_its_own_keeps_the_generic_device_error():
    with pytest.raises(RuntimeError, match=r"^Expected all tensors to be on the same device, but found at least "
                                           r"two devices, neuron:0 and cpu! \(in aten::cat;"):
        torch.cat([torch.ones(2), torch.ones(2, device="neuron")])


# ------------------------------------------------- settings from the environment

# With autoloading, `import torch` loads torch_neuron and reports its failure
# as PyTorch does: "Failed to load the backend extension: neuron", caused by
# the ValueError naming the variable.
READ_BACK = """
import json, sys
try:
    import torch, torch_neuron
except (ValueError, RuntimeError) as e:
    cause = e if isinstance(e, ValueError) else e.__cause__
    print(json.dumps({type(cause).__name__: str(cause),
                      "through": "autoload" if isinstance(e, RuntimeError) else "import"}))
    sys.exit(0)
result = {
    "config": torch_neuron.config.current(),
    "device_count": torch.neuron.device_count(),
    "memory_limits": [torch.neuron.get_memory_limit(i) for i in range(torch.neuron.device_count())],
}
result["mode"] = torch_neuron.get_mode()
x = torch.ones(2).neuron()
y = x.exp()  # traced in lazy mode, run at once in eager mode
torch_neuron.wait_device_ops()  # an eager run is queued: wait for it, not for a sync
result["executed_after_one_op"] = torch_neuron.metrics.counter("graph.execute.count")
result["exp"] = y.cpu().tolist()
try:
    torch.nonzero(x)  # output shape depends on the data: CPU fallback only
    result["untraceable_op"] = "ran"
except NotImplementedError as e:
    result["untraceable_op"] = str(e)
print(json.dumps(result))
"""

# The registry of devices must be built from the start-up settings even when its
# first use happens inside a config.override.
FIRST_USE_UNDER_OVERRIDE = """
import json, torch, torch_neuron
with torch_neuron.config.override(TORCH_NEURON_NUM_DEVICES="4", TORCH_NEURON_MEMORY_LIMIT_MB="1"):
    inside = [torch.neuron.device_count(), torch.neuron.get_memory_limit()]
outside = [torch.neuron.device_count(), torch.neuron.get_memory_limit()]
print(json.dumps({"inside": inside, "outside": outside}))
"""

MALFORMED = {
    ("TORCH_NEURON_NUM_DEVICES", "two"): "expected an integer from 1 to 64.",
    ("TORCH_NEURON_NUM_DEVICES", "0"): "expected an integer from 1 to 64.",
    ("TORCH_NEURON_NUM_DEVICES", "65"): "expected an integer from 1 to 64.",
    ("TORCH_NEURON_MEMORY_LIMIT_MB", "-1"): "expected an integer from 0 to 1073741824.",
    ("TORCH_NEURON_MEMORY_LIMIT_MB", "1.5"): "expected an integer from 0 to 1073741824.",
    ("TORCH_NEURON_FALLBACK", "maybe"): "expected one of 0, 1, true, false, on, off.",
    ("TORCH_NEURON_FALLBACK", "2"): "expected one of 0, 1, true, false, on, off.",
    ("TORCH_NEURON_MODE", "fast"): "expected 'lazy' or 'eager'.",
    ("TORCH_NEURON_COMPILE_SERVICE", "yes please"): "expected 'off', 'auto' or the absolute path of a service's socket.",
    ("TORCH_NEURON_SERVICE_TIMEOUT_S", "0"): "expected a number of seconds greater than 0.",
}

VALID = {
    "TORCH_NEURON_NUM_DEVICES": " 3 ",
    "TORCH_NEURON_MEMORY_LIMIT_MB": "2",
    "TORCH_NEURON_FALLBACK": "off",
    "TORCH_NEURON_MODE": "EAGER",
}


@pytest.fixture(scope="module")
def children():
    """Every child interpreter of this module, started at once and then awaited
    (each one imports torch, which takes a second or so)."""
    procs = {("read_back", name, value): start_python(READ_BACK, {name: value})
             for name, value in MALFORMED}
    procs["no_autoload"] = start_python(
        READ_BACK, {"TORCH_NEURON_MODE": "fast", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    procs["valid"] = start_python(READ_BACK, VALID)
    procs["defaults"] = start_python(READ_BACK, {})
    procs["first_use_under_override"] = start_python(FIRST_USE_UNDER_OVERRIDE, {})
    results = {}
    for key, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{key}: {err}"
        results[key] = json.loads(out)
    return results


@pytest.mark.parametrize("name, value", MALFORMED.keys(), ids=[f"{n}={v}" for n, v in MALFORMED])
def test_malformed_environment_value_makes_import_raise_value_error(children, name, value):
    expected = f"{name}='{value}' is not valid: {MALFORMED[(name, value)]}"
    assert children[("read_back", name, value)] == {"ValueError": expected, "through": "autoload"}


def test_without_autoload_importing_torch_neuron_raises_the_value_error(children):
    assert children["no_autoload"] == {
        "ValueError": "TORCH_NEURON_MODE='fast' is not valid: expected 'lazy' or 'eager'.",
        "through": "import"}


def test_valid_environment_values_are_applied(children):
    result = children["valid"]
    assert result["device_count"] == 3
    assert result["memory_limits"] == [2 << 20] * 3
    config = result["config"]
    assert (config["num_devices"], config["memory_limit_bytes"]) == (3, 2 << 20)
    assert (config["allow_cpu_fallback"], config["mode"]) == (False, "eager")
    assert result["mode"] == "eager" and result["executed_after_one_op"] == 1
    assert result["exp"] == torch.ones(2).exp().tolist()  # traceable ops run without the fallback
    assert result["untraceable_op"] == (
        "operator aten::nonzero cannot run on the neuron device (its output shape depends on "
        "the data) and the CPU fallback is off (TORCH_NEURON_FALLBACK=0)"
    )


def test_defaults_without_environment(children):
    result = children["defaults"]
    assert result["device_count"] == 1
    assert result["memory_limits"] == [0]
    config = result["config"]
    assert config["mode"] == "lazy" and config["allow_cpu_fallback"] is True
    assert config["num_devices"] == 1 and config["memory_limit_bytes"] == 0
    assert result["mode"] == "lazy" and result["executed_after_one_op"] == 0
    assert result["exp"] == torch.ones(2).exp().tolist()
    assert result["untraceable_op"] == "ran"


def test_start_up_settings_keep_their_effect_under_an_override(children):
    assert children["first_use_under_override"] == {"inside": [1, 0], "outside": [1, 0]}


# -------------------------------------------------------------- config.parse

def test_parse_converts_every_known_setting():
    parsed = torch_neuron.config.parse(
        {
            "TORCH_NEURON_NUM_DEVICES": "4",
            "TORCH_NEURON_MEMORY_LIMIT_MB": "3",
            "TORCH_NEURON_FALLBACK": "false",
            "TORCH_NEURON_MODE": "eager",
            "TORCH_NEURON_CACHE_DIR": "/tmp/neff",
            "TORCH_NEURON_CACHE_MAX_MB": "64",
            "TORCH_NEURON_CACHE_MEMORY_ENTRIES": "12",
            "TORCH_NEURON_CACHE_MEMORY_MB": "5",
            "TORCH_NEURON_CACHE": "no",
            "TORCH_NEURON_IR_DEBUG": "on",
            "TORCH_NEURON_OPT_LEVEL": "0",
            "TORCH_NEURON_KERNEL_THREADS": "3",
            "TORCH_NEURON_AUTOGRAD_THREAD": "1",
            "TORCH_NEURON_STEP_ON_OPTIMIZER": "off",
            "TORCH_NEURON_COMPILE_FALLBACK": "yes",
            "TORCH_NEURON_DYNAMIC_SHAPES": "on",
            "TORCH_NEURON_COMPILE_SERVICE": "AUTO",
            "TORCH_NEURON_SERVICE_IDLE_S": "30",
            "TORCH_NEURON_SERVICE_TIMEOUT_S": "2.5",
            "TORCH_NEURON_EAGER_GROUPS": "0",
            "TORCH_NEURON_TIERED_COMPILE": "off",
            "TORCH_NEURON_LAUNCH_BLOCKING": "yes",
            "TORCH_NEURON_REMOTE_CACHE_KEY": "fleet secret",
        }
    )
    assert parsed == {
        "mode": "eager",
        "num_devices": 4,
        "memory_limit_bytes": 3 << 20,
        "allow_cpu_fallback": False,
        "cache_dir": "/tmp/neff",
        "cache_max_mb": 64,
        "cache_memory_entries": 12,
        "cache_memory_mb": 5,
        "cache_enabled": False,
        "cache_read_only": False,
        "compile_service": "auto",
        "service_idle_s": 30.0,
        "service_timeout_s": 2.5,
        "remote_cache": "",
        "remote_cache_signed": True,  # whether there is a key; the key itself is never shown
        "ir_debug": True,
        "debug": False,
        "debug_dir": "",
        "shape_registry": "",
        "registry_tag": "",
        "test_fault_op": "",
        "opt_level": 0,
        "kernel_threads": 3,
        "autograd_thread": True,
        "step_on_optimizer": False,
        "compile_fallback": True,
        "dynamic_shapes": True,
        "eager_groups": False,
        "tiered_compile": False,
        "launch_blocking": True,
        "cxx": "",
    }


@pytest.mark.parametrize(
    "value, enabled, read_only",
    [("1", True, False), ("off", False, False), ("readonly", True, True), ("RO", True, True)],
)
def test_parse_of_the_cache_mode(value, enabled, read_only):
    parsed = torch_neuron.config.parse({"TORCH_NEURON_CACHE": value})
    assert (parsed["cache_enabled"], parsed["cache_read_only"]) == (enabled, read_only)


def test_parse_of_an_empty_mapping_gives_the_defaults():
    parsed = torch_neuron.config.parse({})
    assert (parsed["mode"], parsed["num_devices"], parsed["memory_limit_bytes"]) == ("lazy", 1, 0)
    assert parsed["allow_cpu_fallback"] is True
    assert (parsed["cache_memory_entries"], parsed["cache_memory_mb"]) == (4096, 1024)
    assert torch_neuron.config.parse({"CXX": "clang++-16"})["cxx"] == "clang++-16"


# One Status -> exception table (base/error_kind.h) for bindings and ATen kernels.
@pytest.mark.parametrize(
    "code, exc",
    [
        (8, torch.OutOfMemoryError),   # RESOURCE_EXHAUSTED
        (3, ValueError),               # INVALID_ARGUMENT
        (11, IndexError),              # OUT_OF_RANGE
        (12, NotImplementedError),     # UNIMPLEMENTED
        (5, RuntimeError),             # NOT_FOUND
        (13, RuntimeError),            # INTERNAL
    ],
)
@pytest.mark.parametrize("through_aten", [False, True], ids=["binding", "through_aten"])
def test_a_failed_status_raises_the_same_exception_type_everywhere(code, exc, through_aten):
    # through_aten: raised as a kernel raises it, caught back into a status (as
    # the executor catches what an ATen call throws), then raised by a binding.
    with pytest.raises(exc) as info:
        torch_neuron._C._raise_status(code, "the message", through_aten)
    assert type(info.value) is exc
    assert str(info.value) == "the message"


# A user's error in an op that ran at a sync raises what the CPU raises: the
# exception type survives the execution queue, and a check an op makes of its
# inputs' values (linalg's, _assert_async's, which return nothing) is not lost.
EXECUTION_ERRORS = {
    "embedding_index": lambda d: torch.nn.functional.embedding(
        torch.tensor([5], device=d), torch.ones(3, 2, device=d)
    ),
    "gather_index": lambda d: torch.gather(torch.ones(3, device=d), 0, torch.tensor([7], device=d)),
    "cholesky_not_pd": lambda d: torch.linalg.cholesky(-torch.eye(3, device=d)),
    "inv_singular": lambda d: torch.linalg.inv(torch.zeros(2, 2, device=d)),
    "solve_singular": lambda d: torch.linalg.solve(torch.zeros(2, 2, device=d), torch.ones(2, device=d)),
    "lu_factor_singular": lambda d: torch.linalg.lu_factor(torch.zeros(2, 2, device=d))[0],
    "assert_async": lambda d: torch._assert_async(torch.tensor(0, device=d), "the assertion"),
    "multinomial_negative": lambda d: torch.multinomial(torch.tensor([-1.0, 1.0], device=d), 1),
}


@pytest.mark.parametrize("case", EXECUTION_ERRORS.keys())
def test_an_execution_error_raises_the_cpus_exception_type_and_message(case):
    def raised(device):
        with pytest.raises(Exception) as info:
            result = EXECUTION_ERRORS[case](device)
            if isinstance(result, torch.Tensor):
                result.cpu()
        return info.value

    expected, got = raised("cpu"), raised("neuron")
    assert type(got) is type(expected), (got, expected)
    assert str(expected).splitlines()[0] in str(got)


def test_the_memory_cache_bound_is_a_setting():
    # Two graphs, a bound of one executable: the first is evicted and built again
    # (from the disk cache, which is off here, so compiled).
    code = """
import torch, torch_neuron
from torch_neuron import metrics
x = torch.ones(4, device="neuron")
def run(k):
    y = (x * k).sin() if k == 2 else (x + k).cos()
    torch_neuron.mark_step()
    return y.cpu()
run(2); run(3)
metrics.reset()
run(2)
print(metrics.counter("graph.compile.count"), metrics.counter("graph.cache_hit.count"))
"""
    bounded = run_python(code, env={"TORCH_NEURON_CACHE_MEMORY_ENTRIES": "1", "TORCH_NEURON_CACHE": "0"})
    roomy = run_python(code, env={"TORCH_NEURON_CACHE": "0"})
    assert bounded.returncode == 0 and roomy.returncode == 0, bounded.stderr + roomy.stderr
    assert bounded.stdout.split() == ["1", "0"]
    assert roomy.stdout.split() == ["0", "1"]


@pytest.mark.parametrize(
    "env, message",
    [
        ({"TORCH_NEURON_NUM_DEVICES": "two"},
         "TORCH_NEURON_NUM_DEVICES='two' is not valid: expected an integer from 1 to 64."),
        ({"TORCH_NEURON_CACHE_MAX_MB": "0"},
         "TORCH_NEURON_CACHE_MAX_MB='0' is not valid: expected an integer from 1 to 1073741824."),
        ({"TORCH_NEURON_DEBUG": "sometimes"},
         "TORCH_NEURON_DEBUG='sometimes' is not valid: "
         "expected one of 0, 1, true, false, on, off."),
        ({"TORCH_NEURON_CACHE": "maybe"},
         "TORCH_NEURON_CACHE='maybe' is not valid: expected one of 0, 1, readonly."),
        ({"TORCH_NEURON_OPT_LEVEL": "2"},
         "TORCH_NEURON_OPT_LEVEL='2' is not valid: expected an integer from 0 to 1."),
        ({"TORCH_NEURON_KERNEL_THREADS": "-1"},
         "TORCH_NEURON_KERNEL_THREADS='-1' is not valid: expected an integer from 0 to 256."),
    ],
    ids=["num_devices", "cache_max_mb", "debug", "cache", "opt_level", "kernel_threads"],
)
def test_parse_rejects_a_malformed_value_naming_it(env, message):
    with pytest.raises(ValueError) as info:
        torch_neuron.config.parse(env)
    assert str(info.value) == message


def test_parse_does_not_change_the_settings_in_force():
    before = torch_neuron.config.current()
    torch_neuron.config.parse({"TORCH_NEURON_FALLBACK": "0", "TORCH_NEURON_MODE": "eager"})
    assert torch_neuron.config.current() == before


# ----------------------------------------------------------- config.override

def test_override_replaces_settings_inside_the_block_only():
    before = torch_neuron.config.current()
    override = torch_neuron.config.override
    with override(TORCH_NEURON_MODE="eager", TORCH_NEURON_FALLBACK="0") as inside:
        assert inside == torch_neuron.config.current()
        assert inside == dict(before, mode="eager", allow_cpu_fallback=False)
    assert torch_neuron.config.current() == before


def test_override_is_undone_when_the_block_raises():
    before = torch_neuron.config.current()
    with pytest.raises(KeyError):
        with torch_neuron.config.override(TORCH_NEURON_FALLBACK="0"):
            raise KeyError("boom")
    assert torch_neuron.config.current() == before


def test_override_of_an_unknown_setting_raises_value_error():
    message = r"unknown torch_neuron setting\(s\) \['TORCH_NEURON_FOO'\]"
    with pytest.raises(ValueError, match=message):
        with torch_neuron.config.override(TORCH_NEURON_FOO="1"):
            pass


def test_override_with_a_malformed_value_raises_and_changes_nothing():
    before = torch_neuron.config.current()
    with pytest.raises(ValueError, match="TORCH_NEURON_FALLBACK='maybe' is not valid"):
        with torch_neuron.config.override(TORCH_NEURON_FALLBACK="maybe"):
            pass
    assert torch_neuron.config.current() == before


def test_nested_overrides_keep_the_outer_settings():
    with torch_neuron.config.override(TORCH_NEURON_FALLBACK="0"):
        with torch_neuron.config.override(TORCH_NEURON_MODE="eager") as inner:
            assert (inner["allow_cpu_fallback"], inner["mode"]) == (False, "eager")


def test_override_does_not_reread_the_environment(monkeypatch):
    monkeypatch.setenv("TORCH_NEURON_FALLBACK", "0")
    with torch_neuron.config.override(TORCH_NEURON_MODE="eager") as inside:
        assert inside["allow_cpu_fallback"] is True


# --------------------------------------------------------- metrics snapshots

def test_metrics_save_and_load_round_trip(tmp_path, metrics):
    n = 19  # a shape no other test compiles, so the step below really compiles
    x = torch.ones(n).neuron()
    y = (x * 3).exp()
    torch.nonzero(x)  # one CPU fallback
    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()  # no counter moves between save and compare
    path = tmp_path / "metrics.pb"
    metrics.save(path)
    loaded = metrics.load(path)
    assert loaded == metrics.counters()
    events = ("fallback.", "graph.", "mark_step.", "trace.", "transfer.")
    timings = (".ns", ".nodes", ".peak_bytes", ".peak_total_bytes")
    assert {
        k: v for k, v in loaded.items() if k.startswith(events) and not k.endswith(timings)
    } == {
        "fallback.aten::nonzero": 1,
        "graph.compile.count": 1,
        "graph.compile_request.count": 1,  # the missed graph, written out for the compiler once
        "graph.execute.count": 1,
        "graph.sync.count": 1,
        "mark_step.count": 1,
        "trace.op.count": 2,
        "transfer.device_to_host.bytes": n * 4,
        "transfer.device_to_host.count": 1,
        "transfer.host_to_device.bytes": n * 4 + n * 8,  # x, then the (n, 1) int64 indices
        "transfer.host_to_device.count": 2,
    }
    assert y.shape == (n,)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.pb"]  # no temp file left


def test_metrics_load_of_a_garbage_file_raises_value_error(tmp_path):
    path = tmp_path / "garbage.pb"
    path.write_bytes(b"this is not a protobuf \xff\xfe\x00 at all")
    with pytest.raises(ValueError, match="not a torch_neuron metrics snapshot"):
        torch_neuron.metrics.load(path)


@pytest.mark.parametrize(
    "content, version", [(b"", 0), (b"\x08\x02", 2)], ids=["empty_file", "future_version"]
)
def test_metrics_load_rejects_an_unsupported_format_version(tmp_path, content, version):
    path = tmp_path / "snapshot.pb"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"unsupported metrics snapshot format_version {version}"):
        torch_neuron.metrics.load(path)


def test_metrics_reset_clears_every_counter(metrics):
    torch.ones(2).neuron() + 1
    assert metrics.counters() != {}
    metrics.reset()
    assert metrics.counters() == {}
    assert metrics.counter("trace.op.count") == 0
    assert metrics.counter("transfer.host_to_device.count") == 0
    assert metrics.report() == "torch_neuron metrics\n  (no counters yet)"
