"""Device-backend autoloading: `import torch` alone makes "neuron" a device,
through the package's `torch.backends` entry point (as out-of-tree backends
such as TorchNeuron do); TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns it off and the
device string error is PyTorch's own."""

import textwrap

from child_process import run_python

PROBE = textwrap.dedent("""
    import sys, torch
    loaded = "torch_neuron" in sys.modules
    try:
        print(loaded, torch.ones(3, device="neuron").sum().item())
    except RuntimeError as e:
        print(loaded, str(e).splitlines()[0])
""")


def test_import_torch_alone_makes_neuron_a_device():
    done = run_python(PROBE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True 3.0"


def test_autoload_off_leaves_pytorchs_device_error():
    done = run_python(PROBE, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert done.returncode == 0, done.stderr
    loaded, message = done.stdout.strip().split(" ", 1)
    assert loaded == "False"
    assert message.startswith("Expected one of cpu, cuda") and message.endswith(
        "device type at start of device string: neuron")


def test_importing_torch_neuron_first_still_works():
    done = run_python("import torch_neuron, torch; print(torch.ones(2, device='neuron').sum().item())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2.0"
