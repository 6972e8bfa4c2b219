"""The wheel builds without isolation and works in a fresh venv holding only torch.

Slow (a full C++ build plus a venv with torch): run by `make test-all` / `make wheel-check`.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_wheel_installs_and_imports_in_fresh_venv(tmp_path):
    dist = tmp_path / "dist"
    env = dict(os.environ, TORCH_NEURON_BUILD_DIR=str(ROOT / "build" / "wheel-test"))
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
         "-q", "-w", str(dist), str(ROOT)], env=env)
    wheels = list(dist.glob("torch_neuron-*.whl"))
    assert len(wheels) == 1, wheels

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "torch==2.13.0", str(wheels[0])])
    installed = run([str(py), "-m", "pip", "list", "--format=freeze"])
    names = sorted(line.split("==")[0].lower() for line in installed.split())
    assert "torch-neuron" in names or "torch_neuron" in names

    # Run from an empty directory so the source tree cannot be imported instead.
    script = (
        "import torch, torch_neuron, os;"
        "x = torch.arange(4.0, device='neuron');"
        "print((x * 2 + 1).cpu().tolist(), torch.neuron.device_count(),"
        " os.path.dirname(torch_neuron.__file__).endswith('site-packages/torch_neuron'))"
    )
    out = run([str(py), "-c", script], cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    assert out.strip() == "[1.0, 3.0, 5.0, 7.0] 1 True"
    # The wheel's torch.backends entry point: `import torch` alone loads it.
    autoload = "import torch; print(torch.ones(2, device='neuron').sum().item())"
    out = run([str(py), "-c", autoload], cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    assert out.strip() == "2.0"
