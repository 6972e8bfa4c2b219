"""The table of replaced torch functions (torch_neuron/_patches.py): on this
torch every entry's original has the recorded signature and is replaced; the
table holds every replacement PyTorch reports (debug.overrides()); a changed
original is left alone with a warning naming it."""

import json
import sys
import textwrap
import types
import warnings

import pytest
from child_process import run_python

from torch_neuron import _patches


def test_every_entry_is_installed_on_this_torch_in_a_fresh_process():
    code = textwrap.dedent("""
        import json, warnings
        warnings.simplefilter("error", RuntimeWarning)  # a skipped entry warns
        import torch, torch_neuron
        from torch_neuron import _patches
        print(json.dumps({"installed": _patches.installed(), "skipped": _patches.skipped()}))
    """)
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"installed": [p.target for p in _patches.PATCHES], "skipped": []}


def test_the_table_holds_every_replacement_pytorch_reports():
    import torch_neuron

    reported = {target for target, _ in torch_neuron.debug.overrides()["patches"]}
    # Patched in place or by import hooks, each with a check of its own (the
    # table's docstring names them).
    elsewhere = {t for t in reported if "meta_utils" in t or "__dynamo_disable" in t or "sys.meta_path" in t}
    assert reported - elsewhere == {p.target for p in _patches.PATCHES}
    assert len(elsewhere) == 5


def _probe_module(name):
    module = types.ModuleType(name)

    def f(a, b=1):
        return ("torch", a, b)

    def replacement(a, b=1):
        return ("neuron", a, b)

    module.f, module.replacement = f, replacement
    sys.modules[name] = module
    return module


@pytest.mark.parametrize("recorded,applied", [("f(a, b=1)", True), ("f(a)", False)])
def test_an_original_whose_signature_changed_is_left_alone_with_a_warning(recorded, applied):
    name = f"tn_patch_probe_{int(applied)}"
    module = _probe_module(name)
    patch = _patches.Patch(f"{name}.f", f"{name}.replacement", recorded, "a probe's limitation")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _patches.install((patch,))
    assert module.f(2)[0] == ("neuron" if applied else "torch")
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if applied:
        assert messages == [] and patch.target in _patches.installed()
    else:
        assert len(messages) == 1
        assert f"{name}.f is now f(a, b=1), not f(a)" in messages[0]
        assert "a probe's limitation" in messages[0]
        assert (patch.target, f"{name}.f is now f(a, b=1), not f(a)") in _patches.skipped()
    del sys.modules[name]


def test_signatures_of_c_functions_come_from_their_documentation():
    import torch

    assert _patches.signature_of(torch._C.TensorBase.copy_) == "copy_(src, non_blocking=False) -> Tensor"
    assert _patches.signature_of(torch._C._set_default_dtype) == "_set_default_dtype(C)"
