"""Unmodified transformers and accelerate find the neuron device
(torch_neuron/_library_detection.py): their ``find_spec("torch_neuronx")`` check
meets torch_neuron's stand-in, and ``torch.neuron`` answers every call they
then make. AWS's own ``torch_neuronx``, wherever it is importable, is never
shadowed. Before the stand-in, ``Accelerator().device`` and
``TrainingArguments().device`` were the CPU.

Each check runs in a fresh interpreter: the libraries cache what they detect
(lru_cache, accelerate's shared state)."""

import json
import textwrap

import pytest
import torch

import torch_neuron
from child_process import run_python

DETECTED = textwrap.dedent("""
    import importlib.util, json, tempfile, torch
    from transformers import TrainingArguments
    from transformers.utils import is_torch_neuron_available, is_torch_bf16_gpu_available
    from accelerate import Accelerator, PartialState
    from accelerate.utils import get_torch_accelerator_backend, is_neuron_available
    print(json.dumps({
        "find_spec": importlib.util.find_spec("torch_neuronx").origin,
        "transformers": is_torch_neuron_available(),
        "transformers_check_device": is_torch_neuron_available(check_device=True),
        "accelerate": is_neuron_available(check_device=True),
        "backend": get_torch_accelerator_backend()[0],
        "bf16": is_torch_bf16_gpu_available(),
        "training_args": str(TrainingArguments(output_dir=tempfile.mkdtemp()).device),
        "partial_state": str(PartialState().device),
        "accelerator": str(Accelerator().device),
    }))
""")


def _json(done):
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_transformers_and_accelerate_choose_the_neuron_device():
    found = _json(run_python(DETECTED, timeout=300))
    assert found == {
        "find_spec": found["find_spec"],
        "transformers": True, "transformers_check_device": True, "accelerate": True,
        "backend": "neuron", "bf16": True,
        "training_args": "neuron:0", "partial_state": "neuron", "accelerator": "neuron",
    }
    assert found["find_spec"].endswith("torch_neuron/_torch_neuronx_stand_in.py")


def test_the_stand_in_says_what_it_is():
    import torch_neuronx

    assert torch_neuronx.__torch_neuron_stand_in__ is True
    assert torch_neuronx.__file__.endswith("_torch_neuronx_stand_in.py")
    assert "not AWS's package" in torch_neuronx.__doc__
    with pytest.raises(AttributeError, match="torch_neuron's stand-in.*AWS's torch_neuronx is not installed"):
        torch_neuronx.trace
    with pytest.raises(ModuleNotFoundError, match="'torch_neuronx' is not a package"):
        import torch_neuronx.xla_impl  # noqa: F401


REAL_PACKAGE = textwrap.dedent("""
    import importlib.util, json, torch, torch_neuron
    import torch_neuronx
    from transformers.utils import is_torch_neuron_available
    print(json.dumps({
        "file": torch_neuronx.__file__,
        "stand_in": getattr(torch_neuronx, "__torch_neuron_stand_in__", False),
        "marker": getattr(torch_neuronx, "MARKER", None),
        "spec": importlib.util.find_spec("torch_neuronx").origin,
    }))
""")


def _fake_package(root, name, body="MARKER = 'aws'\n"):
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text(body)
    return package


def test_a_real_torch_neuronx_on_the_path_wins(tmp_path):
    package = _fake_package(tmp_path, "torch_neuronx")
    from child_process import REPO_ROOT

    found = _json(run_python(REAL_PACKAGE, env={"PYTHONPATH": f"{REPO_ROOT}:{tmp_path}"}, timeout=300))
    assert found == {"file": str(package / "__init__.py"), "stand_in": False, "marker": "aws",
                     "spec": str(package / "__init__.py")}


def test_a_finder_added_after_torch_neuron_wins():
    # An editable install's finder is appended to sys.meta_path, perhaps after
    # torch_neuron's: the stand-in still gives way.
    code = textwrap.dedent("""
        import importlib.abc, importlib.machinery, importlib.util, sys, types, torch, torch_neuron

        class Loader(importlib.abc.Loader):
            def create_module(self, spec): return None
            def exec_module(self, module): module.MARKER = "editable"

        class Finder(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "torch_neuronx":
                    return importlib.machinery.ModuleSpec(name, Loader(), origin="editable")
                return None

        sys.meta_path.append(Finder())
        print(importlib.util.find_spec("torch_neuronx").origin)
        import torch_neuronx
        print(torch_neuronx.MARKER, hasattr(torch_neuronx, "__torch_neuron_stand_in__"))
    """)
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["editable", "editable", "False"]


def test_with_torch_xla_importable_the_stand_in_is_not_offered(tmp_path):
    # transformers reads torch_neuronx + torch_xla as AWS's XLA-based SDK and
    # would take its torch_xla paths: no stand-in then.
    _fake_package(tmp_path, "torch_xla", body="")
    from child_process import REPO_ROOT

    code = "import importlib.util, torch, torch_neuron; print(importlib.util.find_spec('torch_neuronx'))"
    done = run_python(code, env={"PYTHONPATH": f"{REPO_ROOT}:{tmp_path}"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


def test_no_other_name_is_answered():
    import importlib.util

    from torch_neuron._library_detection import StandInFinder

    finder = StandInFinder()
    assert finder.find_spec("torch_neuronx_extra") is None
    assert finder.find_spec("torch_xla") is None
    assert finder.find_spec("torch_neuronx.sub", path=["/nowhere"]) is None
    assert importlib.util.find_spec("torch_neuronx_not_a_module") is None


def test_the_device_calls_the_libraries_make(tmp_path):
    # What accelerate's set_seed, save_state/load_state (RNG states),
    # clear_device_cache and transformers' Trainer call on torch.neuron.
    torch.neuron.manual_seed_all(3)
    first = torch.rand(4, device="neuron").cpu()
    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    second = torch.rand(4, device="neuron").cpu()
    torch.neuron.set_rng_state_all(states)
    assert torch.equal(torch.rand(4, device="neuron").cpu(), second)
    torch.neuron.manual_seed_all(3)
    assert torch.equal(torch.rand(4, device="neuron").cpu(), first)

    torch_neuron.wait_device_ops()
    torch.neuron.empty_cache()
    before = torch.neuron.memory_allocated()
    x = torch.empty(1024, device="neuron")
    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()  # the step's buffers exist once it has run
    assert torch.neuron.memory_allocated() - before >= 4096
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == torch.neuron.memory_allocated()
    del x
    assert torch.neuron.get_device_name().startswith("neuron (emulated on ")
    assert torch.neuron.is_bf16_supported() is True
    assert torch.float16 in torch.neuron.get_amp_supported_dtype()
    assert torch.distributed.Backend("neuron") == "neuron"  # the c10d backend they name
    assert torch.get_device_module("neuron") is torch.neuron


ACCELERATE_STATE = textwrap.dedent("""
    import json, sys, torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    acc = Accelerator()
    set_seed(5)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    acc.save_state(sys.argv[1])
    a = torch.rand(3, device=acc.device).tolist()
    torch.rand(5, device=acc.device)
    acc.load_state(sys.argv[1])
    b = torch.rand(3, device=acc.device).tolist()
    acc.free_memory()
    print(json.dumps({"device": str(next(model.parameters()).device), "same": a == b}))
""")


def test_accelerate_saves_and_restores_the_neuron_rng_states(tmp_path):
    done = run_python(ACCELERATE_STATE, args=(str(tmp_path / "state"),), timeout=300)
    assert _json(done) == {"device": "neuron:0", "same": True}
    assert (tmp_path / "state" / "random_states_0.pkl").exists()
