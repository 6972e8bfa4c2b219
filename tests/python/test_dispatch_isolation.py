"""torch_neuron leaves PyTorch as it found it for every other device (issue 48).

Two fresh interpreters, one with torch_neuron loaded (autoloaded by ``import
torch``, then used on a neuron tensor so that lazily installed pieces are in
place) and one without it (``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, the control),
report:

- the dispatch table of every ``aten`` operator, every key but neuron's own
  (any key naming PrivateUse1);
- a set of CPU and meta calls: results, strides, and errors with their messages;
- which functions ``torch.library.Library.impl`` and ``torch.nn.Module._apply``
  are.

The tables must be equal, but for the Functionalize and ADInplaceOrView kernels
of the few files listed in NEURON_ONLY_KERNELS: PyTorch gives a device no key
of its own above functionalization in every mode (AutogradPrivateUse1 is
skipped under inference_mode), so those kernels act on calls with a neuron
tensor and hand every other call to the kernel that was there. The calls below
exercise them on CPU tensors. Everything else, the Meta kernels first (what
meta and fake tensors of every device run on), must be PyTorch's own. A
differing operator is reported by name with both tables' lines.
"""

import json
import re
import sys
import textwrap

import pytest
from child_process import REPO_ROOT, run_python

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import gen_dispatch_md  # noqa: E402

# Files whose kernels on these keys act only on neuron tensors, calling the
# kernel that was there for any other call.
NEURON_ONLY_KEYS = {"Functionalize", "ADInplaceOrView", "PythonTLSSnapshot"}
NEURON_ONLY_KERNELS = (
    "csrc/lazy/neuron_inplace.cc",  # in-place ops: the CPU's checks, no second meta run
    "csrc/lazy/functionalize_fast.cc",  # unboxed functionalization of hot ops
    "csrc/lazy/bridge.cc",  # lift_fresh, copy_ from a neuron tensor into a plain one, factories under a mode
    "csrc/aten/registration.cc",  # direct *_copy calls give new contiguous tensors
    "csrc/lazy/out_checks.cc",  # out= checks under inference_mode
    "csrc/lazy/functionalized_custom_ops.cc",  # libraries' custom ops: their kernels functionalized
)
# The two patched functions, for which PyTorch offers no hook: each calls the
# original, and does more only for what concerns neuron (a PrivateUse1 kernel
# registered, a module's tensors moved to or from neuron).
PATCHED = {
    "torch.library.Library.impl": "torch_neuron._custom_ops._library_impl",
    "torch.nn.Module._apply": "torch_neuron._module_support._apply",
}

# Writes the report as JSON on stdout. With argv[1] == "neuron" it loads and
# uses torch_neuron first.
_CHILD = textwrap.dedent(r'''
import json
import re
import sys

import torch

if sys.argv[1] == "neuron":
    import torch_neuron  # autoload has loaded it already; this checks it
    x = torch.ones(4, device="neuron")
    y = (x.add_(1) * 2).sum()
    assert y.item() == 16.0
    torch.nn.Linear(2, 2).to("neuron").to("cpu")
else:
    assert "torch_neuron" not in sys.modules, "the control loaded torch_neuron"


def own_key(line):
    return "PrivateUse1" in line.split(":", 1)[0]


def table(name):
    try:
        text = torch._C._dispatch_dump_table(name)
    except RuntimeError as e:
        return "error: " + str(e)
    return "\n".join(line for line in text.splitlines() if line.strip() and not own_key(line))


tables = {name: table(name) for name in sorted(torch._C._dispatch_get_all_op_names())
          if name.startswith("aten::")}
overrides = torch_neuron.debug.overrides() if sys.argv[1] == "neuron" else None


def describe(value):
    if isinstance(value, torch.Tensor):
        data = value.tolist() if value.device.type == "cpu" else None
        return {"dtype": str(value.dtype), "device": str(value.device), "shape": list(value.shape),
                "stride": list(value.stride()), "offset": value.storage_offset(), "data": data}
    if isinstance(value, (tuple, list)):
        return [describe(v) for v in value]
    return repr(value)


def call(fn):
    try:
        return {"ok": describe(fn())}
    except Exception as e:  # noqa: BLE001 - the error and its words are what is compared
        return {"error": type(e).__name__, "message": str(e)}


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, device="meta", dtype=dtype)


def _in_inference(fn):
    with torch.inference_mode():
        return fn()


def _traced_code():
    from torch.fx.experimental.proxy_tensor import make_fx

    def step(x, w):
        y = torch.relu(x @ w + 1).exp().sum(1)
        y.mul_(2)
        return torch.softmax(y.view(2, 1), 0) - x.t().contiguous()[0]

    graph = make_fx(torch.func.functionalize(step))(torch.ones(2, 3), torch.ones(3, 3))
    return graph.code


def _registered_afterwards():
    lib = torch.library.Library("isolation_test", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    lib.impl("twice", lambda x: x * 2, "PrivateUse1")
    result = torch.ops.isolation_test.twice(torch.ones(2))
    text = torch._C._dispatch_dump_table("isolation_test::twice")
    lines = sorted(re.sub(r":\d+ ", " ", line) for line in text.splitlines() if line.strip() and not own_key(line))
    return [describe(result), lines]


calls = {
    # The issue's examples.
    "empty meta max(0)": lambda: meta(0, 3).max(0),
    "integral add_ float alpha (meta)": lambda: meta(3, dtype=torch.int64).add_(meta(3, dtype=torch.int64),
                                                                                 alpha=1.5),
    "abs_ complex (meta)": lambda: meta(3, dtype=torch.complex64).abs_(),
    "add_ broadcast (meta)": lambda: meta(3).add_(meta(2, 3)),
    "add_ broadcast (cpu)": lambda: torch.zeros(3).add_(torch.ones(2, 3)),
    "integral add_ float alpha (cpu)": lambda: torch.zeros(3, dtype=torch.int64).add_(
        torch.ones(3, dtype=torch.int64), alpha=1.5),
    # In-place ops whose CPU checks torch._refs lack, and overlap.
    "atan2_ broadcast (meta)": lambda: meta(3).atan2_(meta(2, 3)),
    "pow_ broadcast (meta)": lambda: meta(3).pow_(meta(2, 3)),
    "add_ expanded (meta)": lambda: meta(1, 3).expand(2, 3).add_(1),
    "mul_ int by float (meta)": lambda: meta(3, dtype=torch.int32).mul_(meta((), dtype=torch.float32)),
    "lshift_ float (meta)": lambda: meta(3).__ilshift__(meta(3)),
    "fill_ expanded (meta)": lambda: meta(1, 3).expand(2, 3).fill_(1),
    # out= dtype probes.
    "neg out double (meta)": lambda: torch.neg(meta(3), out=meta(3, dtype=torch.float64)),
    "all out float (meta)": lambda: torch.all(meta(2, 3), 1, out=meta(2)),
    "abs complex out complex (meta)": lambda: torch.abs(meta(3, dtype=torch.complex64),
                                                        out=meta(3, dtype=torch.complex64)),
    "floor complex (meta)": lambda: torch.floor(meta(3, dtype=torch.complex64)),
    "mode out (meta)": lambda: torch.mode(meta(2, 3), 1, out=(meta(2, dtype=torch.float64),
                                                               meta(2, dtype=torch.int64))),
    # Foreach in-place ops (their Meta kernels were replaced once).
    "foreach add_ broadcast (meta)": lambda: torch._foreach_add_([meta(3)], [meta(2, 3)]),
    "foreach mul_ (meta)": lambda: torch._foreach_mul_([meta(3), meta(2, 2)], 2.0),
    "foreach lerp_ (meta)": lambda: torch._foreach_lerp_([meta(3)], [meta(3)], 0.5),
    # Random ops' checks.
    "random_ bad range (meta)": lambda: meta(3).random_(5, 2),
    "bernoulli_ p out of range (meta)": lambda: meta(3).bernoulli_(1.5),
    # Views, view copies and their strides.
    "t_copy (cpu)": lambda: torch.t_copy(torch.arange(6.).reshape(2, 3)),
    "split_with_sizes_copy (cpu)": lambda: torch.split_with_sizes_copy(torch.arange(12.).reshape(2, 6),
                                                                       [4, 2], dim=1),
    "narrow_copy (meta)": lambda: torch.narrow_copy(meta(4, 6), 1, 1, 2),
    "view of transposed (meta)": lambda: meta(2, 3).t().view(6),
    "functionalized add_ (cpu)": lambda: torch.func.functionalize(lambda a: a.add_(1).mul(2))(torch.ones(3)),
    "functionalized transpose_copy (cpu)": lambda: torch.func.functionalize(
        lambda a: torch.transpose_copy(a, 0, 1))(torch.arange(6.).reshape(2, 3)),
    "functionalized view write (cpu)": lambda: torch.func.functionalize(
        lambda a: a.t().mul_(3).t().contiguous())(torch.arange(6.).reshape(2, 3)),
    # Ordinary CPU work.
    "matmul (cpu)": lambda: torch.arange(6.).reshape(2, 3) @ torch.arange(6.).reshape(3, 2),
    "softmax (cpu)": lambda: torch.softmax(torch.arange(6.).reshape(2, 3), 1),
    "lift_fresh (cpu)": lambda: torch.tensor([1.0, 2.0]),
    "copy_ broadcast (cpu)": lambda: torch.zeros(2, 3).copy_(torch.arange(3.)),
    "copy_ broadcast (meta)": lambda: meta(3).copy_(meta(2, 3)),
    "gru cell (cpu)": lambda: torch.nn.GRUCell(2, 2)(torch.ones(1, 2)),
    "ctc_loss (cpu)": lambda: torch.ctc_loss(torch.zeros(4, 1, 3).log_softmax(2), torch.tensor([[1, 2]]),
                                             torch.tensor([4]), torch.tensor([2])),
    "module to double (cpu)": lambda: [p for p in torch.nn.Linear(2, 2).double().parameters()][0].dtype,
    # Functionalization of CPU tensors, through the kernels that act on neuron tensors only.
    "functionalized foreach add_ (cpu)": lambda: torch.func.functionalize(
        lambda a: torch._foreach_add_([a, a * 2], [a, a]) or a)(torch.ones(3)),
    "functionalized atan2_ broadcast (cpu)": lambda: torch.func.functionalize(
        lambda a: a.atan2_(torch.ones(2, 3)))(torch.ones(3)),
    "functionalized int mul_ by float (cpu)": lambda: torch.func.functionalize(
        lambda a: a.mul_(1.5))(torch.ones(3, dtype=torch.int32)),
    "functionalized fill_ expanded (cpu)": lambda: torch.func.functionalize(
        lambda a: a.expand(2, 3).fill_(2))(torch.ones(1, 3)),
    "functionalized tensor() (cpu)": lambda: torch.func.functionalize(
        lambda a: a + torch.tensor([1.0, 2.0, 3.0]))(torch.ones(3)),
    "functionalized copy_ (cpu)": lambda: torch.func.functionalize(
        lambda a: torch.zeros(2, 3).copy_(a))(torch.arange(3.)),
    "functionalized split_with_sizes_copy out (cpu)": lambda: torch.func.functionalize(
        lambda a, b: torch.split_with_sizes_copy(a, [1, 2], dim=1, out=[b[:, :1], b[:, 1:]]) or b)(
        torch.arange(6.).reshape(2, 3), torch.zeros(2, 3)),
    "functionalized in inference_mode (cpu)": lambda: _in_inference(lambda: torch.func.functionalize(
        lambda a: a.add_(1).mul(torch.ones(2, 3)).sum(0))(torch.ones(3))),
    "make_fx of a functionalized step (cpu)": lambda: _traced_code(),
    "a library's own op registered afterwards": lambda: _registered_afterwards(),
}
torch.manual_seed(0)
results = {name: call(fn) for name, fn in calls.items()}



def qualified(fn):
    return fn.__module__ + "." + fn.__qualname__


def function_and_wrapped(fn):
    return [qualified(fn), qualified(getattr(fn, "__wrapped__", fn))]


patched = {
    "torch.library.Library.impl": function_and_wrapped(torch.library.Library.impl),
    "torch.nn.Module._apply": function_and_wrapped(torch.nn.Module._apply),
}
print(json.dumps({"tables": tables, "calls": results, "functions": patched, "overrides": overrides}))
''')


def _report(mode):
    env = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "1" if mode == "neuron" else "0"}
    out = run_python(_CHILD, env=env, args=[mode], timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reports():
    return _report("neuron"), _report("control")


_LINE = re.compile(r"^(\w+): (?:registered at |fallthrough registered at )?(.*?)(?::\d+)? \[")


def _neuron_only(line):
    """Whether a table line is one of NEURON_ONLY_KERNELS' registrations."""
    match = _LINE.match(line)
    return (match is not None and match.group(1) in NEURON_ONLY_KEYS
            and match.group(2).endswith(NEURON_ONLY_KERNELS))


def test_dispatch_tables_are_pytorchs_but_for_kernels_that_act_on_neuron_tensors_only(reports):
    neuron, control = reports
    assert set(neuron["tables"]) == set(control["tables"]), "torch_neuron added or removed aten operators"
    problems = []
    for name in sorted(control["tables"]):
        mine, theirs = neuron["tables"][name].splitlines(), control["tables"][name].splitlines()
        added = [line for line in mine if line not in theirs]
        removed = [line for line in theirs if line not in mine]
        replaced_keys = {line.split(":", 1)[0] for line in added if _neuron_only(line)}
        unexplained = ([line for line in added if not _neuron_only(line)]
                       + [line for line in removed if line.split(":", 1)[0] not in replaced_keys])
        if unexplained:
            problems.append(f"{name}:\n  with torch_neuron:    " + "\n  with torch_neuron:    ".join(added)
                            + "\n  without torch_neuron: " + "\n  without torch_neuron: ".join(removed))
    assert not problems, (f"{len(problems)} aten operators' dispatch tables differ outside neuron's keys:\n"
                          + "\n".join(problems[:30]))


def test_meta_kernels_are_pytorchs_own(reports):
    neuron, control = reports
    differing = [name for name in control["tables"]
                 if [line for line in neuron["tables"][name].splitlines() if line.startswith("Meta:")]
                 != [line for line in control["tables"][name].splitlines() if line.startswith("Meta:")]]
    assert not differing, f"Meta kernels replaced: {differing}"


def test_cpu_and_meta_calls_give_pytorchs_results_and_errors(reports):
    neuron, control = reports
    calls_differing = {k: (neuron["calls"][k], control["calls"][k]) for k in control["calls"]
                       if neuron["calls"][k] != control["calls"][k]}
    assert not calls_differing, "CPU or meta calls differ (with torch_neuron, without):\n" + "\n".join(
        f"{k}: {a} != {b}" for k, (a, b) in calls_differing.items())


def test_patched_functions_wrap_pytorchs_own(reports):
    neuron, control = reports
    for name, (function, wrapped) in control["functions"].items():
        assert function == wrapped, f"the control's {name} is not PyTorch's own"
        mine, mine_wrapped = neuron["functions"][name]
        assert mine in (function, PATCHED[name]), f"{name} is {mine}"
        assert mine_wrapped == function, f"{name} does not wrap PyTorch's {function}"


def test_dispatch_md_lists_what_torch_neuron_registers_and_patches_now(reports):
    neuron, _ = reports
    assert gen_dispatch_md.undescribed(neuron["overrides"]) == [], "add them to WHY in scripts/gen_dispatch_md.py"
    assert (REPO_ROOT / "docs" / "DISPATCH.md").read_text() == gen_dispatch_md.render(neuron["overrides"]), (
        "docs/DISPATCH.md is stale: run python scripts/gen_dispatch_md.py")


def test_the_neuron_only_kernels_are_the_ones_dispatch_md_lists_on_shared_keys(reports):
    neuron, _ = reports
    shared = {source for key, _, source in neuron["overrides"]["kernels"]
              if key not in gen_dispatch_md.OWN_KEYS and not source.startswith("csrc/runtime/collectives.cc")}
    assert shared == set(NEURON_ONLY_KERNELS)
    assert not [k for k in neuron["overrides"]["kernels"] if k[0] == "Meta" and k[1].startswith("aten::")]


def test_the_control_reports_the_issues_examples_as_pytorch_does(reports):
    """The calls compared above do what PyTorch does (the comparison would pass
    if both children failed the same way)."""
    _, control = reports
    calls = control["calls"]
    assert calls["empty meta max(0)"]["ok"][0]["shape"] == [3]
    assert calls["integral add_ float alpha (meta)"]["ok"]["dtype"] == "torch.int64"
    assert calls["add_ broadcast (cpu)"]["error"] == "RuntimeError"
    assert "broadcast shape [2, 3]" in calls["add_ broadcast (cpu)"]["message"]
    assert calls["matmul (cpu)"]["ok"]["data"] == [[10.0, 13.0], [28.0, 40.0]]
    assert calls["functionalized add_ (cpu)"]["ok"]["data"] == [4.0, 4.0, 4.0]
    assert len(control["tables"]) > 2000
