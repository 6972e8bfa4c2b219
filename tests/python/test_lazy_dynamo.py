"""The first traced op of a process does not import torch._dynamo (PyTorch's
Python Meta kernels are wrapped with torch._disable_dynamo, whose first call
imported it: about a second), and dynamo, once the user imports it, still gets
its disabled functions."""

import textwrap

from child_process import run_python


def test_the_first_traced_op_does_not_import_dynamo():
    code = textwrap.dedent("""
        import sys, torch, torch_neuron
        assert "torch._dynamo" not in sys.modules
        x = (torch.ones(3, device="neuron") + 1) * torch.arange(3.0, device="neuron")
        y = torch.where(x > 2, x, -x).sum()
        print(y.item(), "torch._dynamo" in sys.modules)
    """)
    done = run_python(code, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2.0", "False"]


def test_stand_ins_step_aside_for_dynamo_once_it_is_imported():
    code = textwrap.dedent("""
        import sys, torch, torch_neuron
        from torch_neuron import _lazy_dynamo
        import torch._decomp
        add_meta = next(t[torch.ops.aten.add.Tensor] for t in torch._decomp.global_decomposition_table.values()
                        if torch.ops.aten.add.Tensor in t)
        wrappers = _lazy_dynamo._disable_wrappers([add_meta])
        assert len(wrappers) == 1
        fn = dict(zip(wrappers[0].__code__.co_freevars, wrappers[0].__closure__))["fn"].cell_contents
        stand_in = getattr(fn, "__dynamo_disable")
        assert stand_in.__qualname__.startswith("_stand_in")
        import torch._dynamo
        torch.ones(2, device="meta") + 1            # the add Python Meta kernel runs again
        assert getattr(fn, "__dynamo_disable") is not stand_in   # dynamo's own now
        compiled = torch.compile(lambda a, b: (a + b) * 2, backend="eager")
        print(compiled(torch.ones(2), torch.ones(2)).tolist())
    """)
    done = run_python(code, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[4.0, 4.0]"
