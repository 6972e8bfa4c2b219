"""The wheel builds without isolation and works in a fresh venv holding only torch, and it is
self-contained: its ELF files need nothing outside glibc, libstdc++/libgcc_s, torch's own
libraries and the libraries it carries (third_party/bundle_libs.py), so it imports and runs,
the remote cache included, where the build machine's Abseil, protobuf and hiredis are absent.

Slow (a full C++ build plus a venv with torch): run by `make test-all` / `make wheel-check`.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servers import REDIS, free_port, redis_server

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

# What a library of the wheel may need besides torch's and the wheel's own: glibc (libc, libm,
# libpthread, libdl, librt, the dynamic loader) and the C++ compiler's runtime.
SYSTEM_LIBRARY = re.compile(
    r"^(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s)\.so\.\d+$|^ld-linux-x86-64\.so\.2$")

# The build machine's Debian libraries that the wheel must not load (Debian 12's names).
BUILD_MACHINE_LIBRARY = re.compile(r"/lib(absl_\w+|protobuf(-lite)?|hiredis)\.so[.\d]*$")

COMPUTE = (
    "import torch, torch_neuron, os;"
    "x = torch.arange(4.0, device='neuron');"
    "print((x * 2 + 1).cpu().tolist(), torch.neuron.device_count(),"
    " os.path.dirname(torch_neuron.__file__).endswith('site-packages/torch_neuron'))"
)


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


class Installed:
    """The built wheel installed with torch into a fresh venv."""

    def __init__(self, wheel: Path, venv: Path, workdir: Path):
        self.wheel, self.venv, self.workdir = wheel, venv, workdir
        self.python = venv / "bin" / "python"
        self.site = Path(run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                         .strip())
        self.package = self.site / "torch_neuron"
        self.torch_lib = self.site / "torch" / "lib"

    def elf_files(self):
        found = []
        for path in sorted(self.package.rglob("*")):
            if path.is_file() and not path.is_symlink():
                with open(path, "rb") as f:
                    if f.read(4) == b"\x7fELF":
                        found.append(path)
        return found

    def env(self, **extra):
        # Run from an empty directory so the source tree cannot be imported instead; only PATH
        # from this environment (no LD_LIBRARY_PATH, no TORCH_NEURON_* settings).
        return {"PATH": os.environ["PATH"], "TORCH_NEURON_CACHE_DIR": str(self.workdir / "cache"), **extra}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    env = dict(os.environ)
    env.setdefault("TORCH_NEURON_BUILD_DIR", str(ROOT / "build" / "wheel-test"))
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
         "-q", "-w", str(dist), str(ROOT)], env=env)
    wheels = list(dist.glob("torch_neuron-*.whl"))
    assert len(wheels) == 1, wheels

    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "torch==2.13.0", str(wheels[0])])
    installed = run([str(py), "-m", "pip", "list", "--format=freeze"])
    names = sorted(line.split("==")[0].lower() for line in installed.split())
    assert "torch-neuron" in names or "torch_neuron" in names
    workdir = tmp / "work"
    workdir.mkdir()
    return Installed(wheels[0], venv, workdir)


def test_wheel_installs_and_imports_in_fresh_venv(installed):
    out = run([str(installed.python), "-c", COMPUTE], cwd=installed.workdir, env=installed.env())
    assert out.strip() == "[1.0, 3.0, 5.0, 7.0] 1 True"
    # The wheel's torch.backends entry point: `import torch` alone loads it.
    autoload = "import torch; print(torch.ones(2, device='neuron').sum().item())"
    out = run([str(installed.python), "-c", autoload], cwd=installed.workdir, env=installed.env())
    assert out.strip() == "2.0"


def _dynamic(path, tag):
    out = run(["readelf", "-d", "-W", str(path)])
    return re.findall(rf"\({tag}\)\s+[^\[]*\[([^\]]+)\]", out)


def test_wheel_elf_files_need_only_glibc_libstdcxx_torch_and_the_wheel(installed):
    elves = installed.elf_files()
    names = {p.relative_to(installed.package).as_posix() for p in elves}
    assert "lib/libtorch_neuron.so" in names and any(re.fullmatch(r"_C\..*\.so", n) for n in names), names
    # Abseil and protobuf travel inside, under names of their own (never the system's).
    carried = {p.name for p in (installed.package / "lib").iterdir()}
    assert any(re.fullmatch(r"libprotobuf-[0-9a-f]{8}\.so\.32", n) for n in carried), carried
    assert any(re.fullmatch(r"libabsl_base-[0-9a-f]{8}\.so\.20220623", n) for n in carried), carried
    torch_names = set(os.listdir(installed.torch_lib))
    offenders = []
    for path in elves:
        for name in _dynamic(path, "NEEDED"):
            if not (SYSTEM_LIBRARY.match(name) or name in torch_names or name in carried):
                offenders.append(f"{path.name} needs {name}")
        # Only paths relative to the file: nothing of the build machine's.
        for runpath in _dynamic(path, "RUNPATH") + _dynamic(path, "RPATH"):
            offenders += [f"{path.name} searches {d}" for d in runpath.split(":") if not d.startswith("$ORIGIN")]
        # hiredis is linked in and hidden: no other copy in the process binds to ours.
        defined = run(["nm", "-D", "--defined-only", str(path)])
        offenders += [f"{path.name} exports {s}" for s in re.findall(r"\b(redis[A-Z]\w*|freeReplyObject)\b", defined)]
    assert not offenders, "\n".join(offenders)
    # What the loader finds, with no LD_LIBRARY_PATH: the wheel's and torch's libraries, the rest
    # glibc and libstdc++ by name.
    for path in elves:
        out = run(["ldd", str(path)], env={"PATH": os.environ["PATH"]})
        for name, found in re.findall(r"^\s*(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$", out, re.M):
            inside = found.startswith(str(installed.venv)) or found.startswith(str(installed.site))
            assert inside or SYSTEM_LIBRARY.match(name), f"{path.name}: {name} => {found}"


def _hidden_libraries():
    """The build machine's Abseil, protobuf and hiredis files (real paths)."""
    found = set()
    for pattern in ("libabsl_*.so*", "libprotobuf*.so*", "libhiredis*.so*"):
        for d in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/local/lib"):
            found.update(os.path.realpath(p) for p in glob.glob(os.path.join(d, pattern)))
    return sorted(f for f in found if os.path.isfile(f))


# Inside a mount namespace of its own, each of those files is /dev/null (the loader finds the
# name and cannot load it), then the interpreter runs the code.
HIDE = 'for f in "$@"; do mount --bind /dev/null "$f" || exit 97; done; exec "$PYTHON" -c "$CODE"'

PROBE = r"""
import ctypes, json, os, sys
hidden = []
for name in ("libprotobuf.so.32", "libabsl_base.so.20220623", "libhiredis.so.0.14"):
    try:
        ctypes.CDLL(name)
    except OSError:
        hidden.append(name)
import torch, torch_neuron
x = torch.arange(6.0).reshape(2, 3)
y = x.to("neuron")
value = (y.exp() * 2 - y.sum(0)).cpu().tolist()
cpu = (x.exp() * 2 - x.sum(0)).tolist()
c = torch_neuron.metrics.counters()
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
print(json.dumps({"hidden": hidden, "value": value, "cpu": cpu, "maps": maps,
                  **{k: c.get("remote." + k + ".count", 0) for k in ("hit", "store", "unavailable")},
                  "compiles": c.get("graph.compile.count", 0)}))
"""


def _run_hidden(installed, **env):
    """Runs PROBE where the build machine's libraries cannot be loaded."""
    files = _hidden_libraries()
    assert files, "no Abseil/protobuf/hiredis found to hide: is this the build machine?"
    env = installed.env(PYTHON=str(installed.python), CODE=PROBE, TORCH_NEURON_COMPILE_SERVICE="off",
                        TORCH_NEURON_TIERED_COMPILE="0", **env)
    done = subprocess.run(["unshare", "--mount", "sh", "-c", HIDE, "sh", *files], capture_output=True,
                          text=True, cwd=installed.workdir, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["stderr"] = done.stderr
    # The probe is honest: the libraries really were out of reach.
    assert out["hidden"] == ["libprotobuf.so.32", "libabsl_base.so.20220623", "libhiredis.so.0.14"], out
    loaded = [m for m in out["maps"] if BUILD_MACHINE_LIBRARY.search(m) and not m.startswith(str(installed.site))]
    assert not loaded, loaded
    return out


def _can_hide():
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "--mount", "true"], capture_output=True).returncode == 0


needs_namespace = pytest.mark.skipif(not _can_hide(), reason="no mount namespace here (unshare --mount needs root)")


@needs_namespace
def test_wheel_runs_where_the_build_machines_abseil_protobuf_and_hiredis_are_absent(installed):
    out = _run_hidden(installed)
    assert sum(out["value"], []) == pytest.approx(sum(out["cpu"], []), rel=1e-6, abs=1e-6), out
    assert out["compiles"] == 1, out
    # The process maps the wheel's own copies.
    assert any(re.search(r"/torch_neuron/lib/libprotobuf-[0-9a-f]{8}\.so\.32$", m) for m in out["maps"]), out


@pytest.fixture
def redis(tmp_path):
    if REDIS is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it)")
    with redis_server(tmp_path) as port:
        yield port


@needs_namespace
def test_wheel_remote_cache_works_without_the_build_machines_hiredis(installed, redis, tmp_path):
    url = f"redis://127.0.0.1:{redis}/0"
    first = _run_hidden(installed, TORCH_NEURON_REMOTE_CACHE=url, TORCH_NEURON_CACHE_DIR=str(tmp_path / "m1"))
    assert first["compiles"] == 1 and first["store"] == 1 and first["unavailable"] == 0, first
    # Another machine (an empty local cache) gets the graph from Redis and compiles nothing.
    second = _run_hidden(installed, TORCH_NEURON_REMOTE_CACHE=url, TORCH_NEURON_CACHE_DIR=str(tmp_path / "m2"))
    assert second["compiles"] == 0 and second["hit"] == 1 and second["value"] == first["value"], second
    # A Redis that is down: a warning and a local compile, no error.
    down = _run_hidden(installed, TORCH_NEURON_REMOTE_CACHE=f"redis://127.0.0.1:{free_port()}/0",
                       TORCH_NEURON_CACHE_DIR=str(tmp_path / "m3"))
    assert down["compiles"] == 1 and down["unavailable"] >= 1 and down["value"] == first["value"], down
    assert "remote compile cache is unavailable" in down["stderr"], down["stderr"]
