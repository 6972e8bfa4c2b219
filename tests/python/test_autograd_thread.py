"""Where backward passes on neuron tensors run. By default (after
``import torch_neuron``) on the thread that calls backward, like the CPU's;
TORCH_NEURON_AUTOGRAD_THREAD=1 keeps PyTorch's default for a device, its own
autograd thread. Gradients are the CPU's either way."""

import json
import threading

import torch

import torch_neuron
from child_process import run_python

# Prints, as JSON, whether the hook ran on the calling thread, autograd's
# multithreading flag, and the gradient.
BACKWARD = """
import json, threading, torch, torch_neuron
w = torch.tensor([1.0, -2.0, 3.0], device="neuron", requires_grad=True)
threads = []
w.register_hook(lambda g: threads.append(threading.get_ident()))
(torch.tanh(w * 2) * w).sum().backward()
print(json.dumps({"on_caller": threads == [threading.get_ident()],
                  "multithreading": torch.autograd.is_multithreading_enabled(),
                  "grad": w.grad.cpu().tolist()}))
"""


def cpu_grad():
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    (torch.tanh(w * 2) * w).sum().backward()
    return w.grad


def test_backward_runs_on_the_calling_thread():
    assert not torch.autograd.is_multithreading_enabled()
    w = torch.tensor([1.0, -2.0, 3.0], device="neuron", requires_grad=True)
    threads = []
    w.register_hook(lambda g: threads.append(threading.get_ident()))
    (torch.tanh(w * 2) * w).sum().backward()
    assert threads == [threading.get_ident()]
    torch.testing.assert_close(w.grad.cpu(), cpu_grad())


def test_the_setting_keeps_pytorchs_device_thread():
    results = {}
    for value in ("0", "1"):
        child = run_python(BACKWARD, {"TORCH_NEURON_AUTOGRAD_THREAD": value})
        assert child.returncode == 0, child.stderr
        results[value] = json.loads(child.stdout.strip().splitlines()[-1])
    assert (results["0"]["on_caller"], results["0"]["multithreading"]) == (True, False)
    assert (results["1"]["on_caller"], results["1"]["multithreading"]) == (False, True)
    for r in results.values():
        torch.testing.assert_close(torch.tensor(r["grad"]), cpu_grad())
