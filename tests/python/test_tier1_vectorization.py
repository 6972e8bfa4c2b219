"""Generated kernels vectorize on this host: each kernel's contiguous loops
(the direct and the block-buffered flat loops, a row kernel's loops over a row)
compile to vector code with the compiler and flags of the compiler fingerprint.

GCC reports which loops it vectorized (-fopt-info-vec). A kernel that silently
stays scalar is several times slower without being wrong, so only this test
sees it. On an AVX2 host, without -fno-trapping-math GCC did not if-convert
tanh's selects (the bias + tanh kernel ran 5x slower), and without a higher
limit on runtime alias checks AdamW's update (4 inputs, 3 outputs) stayed
scalar."""

import os
import re
import shlex
import subprocess

import pytest
import torch
import torch.nn.functional as F

import torch_neuron

# Loops that must vectorize: the contiguous ones. The strided path's index
# arithmetic and its carry loop may stay scalar.
CONTIGUOUS_LOOP = re.compile(
    r"for \(int64_t (i = begin; i < end; \+\+i|i = 0; i < n; \+\+i|c = 0; c < C; \+\+c|"
    r"j = 0; j < n; \+\+j)\)")


def toolchain():
    fingerprint = torch_neuron._C._current_fingerprint()
    match = re.search(r"toolchain=(\S+) \((.*)\) (-\S+(?: -\S+)*)$", fingerprint)
    assert match, fingerprint
    compiler, version, flags = match.group(1), match.group(2), match.group(3).split()
    if "gcc" not in version.lower() and "g++" not in version.lower() and "debian" not in version.lower():
        pytest.skip(f"vectorization reports are read from GCC's -fopt-info; the compiler is {version}")
    return compiler, flags


def kernel_sources(outputs):
    """Each generated kernel's source (each compiles on its own)."""
    _, sources = torch_neuron.debug.compiled_text(list(outputs))
    return [s for s in re.split(r"(?m)^(?=// tn_k\d+: )", sources) if s.strip()]


def workloads():
    x = torch.randn(64, 256).neuron()
    b = torch.randn(256).neuron()
    w = torch.randn(256).neuron()
    params = [torch.randn(1000).neuron() for _ in range(4)]
    torch_neuron.mark_step()
    return {
        "bias_tanh": lambda: [torch.tanh(x + b)],
        "sigmoid_chain": lambda: [torch.sigmoid(torch.relu(x * 2 + 1) * x)],
        "softmax": lambda: [torch.softmax(x, -1)],
        "layer_norm": lambda: [F.layer_norm(x, (256,), w, b)],
        "bias_grad": lambda: [torch.where(x > 0, x, 0.0).sum(0)],
        "adamw": lambda: adamw_update(params),
    }


def adamw_update(params):
    p, g, m, v = params
    m2 = m.lerp(g, 0.1)
    v2 = v.mul(0.999).addcmul(g, g, value=0.001)
    return [p.addcdiv(m2, v2.sqrt().add(1e-8), value=-0.01), m2, v2]


@pytest.mark.parametrize("name", ["bias_tanh", "sigmoid_chain", "softmax", "layer_norm", "bias_grad",
                                  "adamw"])
def test_contiguous_loops_of_generated_kernels_vectorize(name, tmp_path):
    compiler, flags = toolchain()
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        sources = kernel_sources(workloads()[name]())
    assert sources, f"{name}: no generated kernel"
    for k, source in enumerate(sources):
        path = tmp_path / f"k{k}.cc"
        path.write_text(source)
        command = [compiler, *flags, "-c", str(path), "-o", os.devnull, "-fopt-info-vec-optimized"]
        report = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert report.returncode == 0, f"{shlex.join(command)}\n{report.stderr}"
        vectorized = {int(m.group(1)) for m in re.finditer(r":(\d+):\d+: optimized: loop vectorized",
                                                          report.stderr)}
        lines = source.splitlines()
        # Loops over a block (one line each, zeroing partial sums) become memsets.
        required = [n for n, line in enumerate(lines, 1)
                    if CONTIGUOUS_LOOP.search(line) and line.rstrip().endswith("{")]
        assert required, f"{name}: no contiguous loop found in\n{source}"
        scalar = [f"{n}: {lines[n - 1].strip()}" for n in required if n not in vectorized]
        assert not scalar, f"{name}, kernel {k}: loops left scalar:\n" + "\n".join(scalar)
