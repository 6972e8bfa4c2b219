"""Messages that point users the right way: a loop that forgets mark_step is
told so once (its graphs grow and recompile every step), a misspelled
TORCH_NEURON_* variable is named with the closest setting, and sparse layouts
are refused by name. Each check failed before its message existed (the loop
and the variable went silent; sparse tensors raised about memory formats)."""

import textwrap
import warnings

import pytest
import torch

import torch_neuron
from child_process import run_python

# Ten steps that read the loss each step; with MARK_STEP they also end the step.
LOOP = textwrap.dedent("""
    import sys, warnings, torch, torch_neuron
    warnings.simplefilter("always")
    m = torch.nn.Linear(8, 1).to("neuron")
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(4, 8).to("neuron")
    with warnings.catch_warnings(record=True) as seen:
        for step in range(10):
            loss = (m(x) ** 2).mean()
            loss.backward(); opt.step(); opt.zero_grad()
            if sys.argv[1] == "mark_step":
                torch_neuron.mark_step()
            loss.item()
    ours = [str(w.message) for w in seen if "torch_neuron" in str(w.message)]
    print(len(ours))
    print(ours[0] if ours else "")
    print(torch_neuron.metrics.counters()["graph.compile.count"])
""")


def test_a_loop_without_mark_step_or_optimizer_hook_settles_unwarned():
    # Neither mark_step nor the optimizer's step ending the step: each read
    # runs the graph its loss needs, and keeps what that graph computes for
    # the pending update (the activations the backward reads), so the next
    # read does not carry the step before along. Such a loop used to compile a
    # larger graph every step (and GraphGrowthWatch warned); it now settles.
    done = run_python(LOOP, args=("no_mark_step",), env={"TORCH_NEURON_STEP_ON_OPTIMIZER": "0"})
    assert done.returncode == 0, done.stderr
    count, _, compiles = done.stdout.strip("\n").split("\n")
    assert count == "0"
    assert int(compiles) <= 3


def test_a_loop_with_mark_step_is_not_warned():
    done = run_python(LOOP, args=("mark_step",))
    assert done.returncode == 0, done.stderr
    count, _, compiles = done.stdout.strip().split("\n")
    assert count == "0"
    assert int(compiles) <= 3  # compiled once, then served from the cache


def test_graphs_that_grow_without_carrying_work_along_are_not_warned():
    # One op on ever larger inputs, read each time (what a test harness does):
    # the graphs grow, but share no ops, so nothing piles up.
    code = textwrap.dedent("""
        import warnings, torch, torch_neuron
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for n in range(2, 14):
                torch.diff(torch.ones(n, device="neuron"), n=n // 2).cpu()
        print(sum("has grown" in str(w.message) for w in seen))
    """)
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"


def test_a_misspelled_variable_names_the_setting_meant():
    assert torch_neuron.config.unknown_variables(
        {"TORCH_NEURON_OPTLEVEL": "0", "TORCH_NEURON_FALLBACK": "0", "TORCH_NEURON_TEST_ALL": "1",
         "OTHER": "x"}) == [
        "torch_neuron: TORCH_NEURON_OPTLEVEL is not a torch_neuron setting and is ignored; "
        "did you mean TORCH_NEURON_OPT_LEVEL?"]
    far = torch_neuron.config.unknown_variables({"TORCH_NEURON_XYZZY": "1"})
    assert len(far) == 1 and far[0].startswith(
        "torch_neuron: TORCH_NEURON_XYZZY is not a torch_neuron setting and is ignored; "
        "the settings are TORCH_NEURON_MODE, ")
    done = run_python("import torch_neuron", env={"TORCH_NEURON_MEMORY_LIMT_MB": "64"})
    assert done.returncode == 0, done.stderr
    assert ("TORCH_NEURON_MEMORY_LIMT_MB is not a torch_neuron setting and is ignored; "
            "did you mean TORCH_NEURON_MEMORY_LIMIT_MB?") in done.stderr


@pytest.mark.parametrize("make", [
    lambda: torch.ones(2, 2, device="neuron").to_sparse(),
    lambda: torch.ones(2, 2, device="neuron").to_sparse_csr(),
    lambda: torch.eye(2).to_sparse().to("neuron"),
    lambda: torch.zeros(2, layout=torch.sparse_coo, device="neuron"),
])
def test_sparse_layouts_are_refused_by_name(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's beta-state notes on sparse CSR
        with pytest.raises(NotImplementedError, match="sparse layouts are not supported on neuron"):
            make()
