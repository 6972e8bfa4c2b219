"""The remote compile cache against a real redis-server (started on a loopback
port by the fixture, stopped after): a second machine (a process with an empty
local cache dir) gets every graph from Redis and compiles none; a corrupt entry
is deleted and compiled again; a Redis that is down costs a warning and a local
compile, never an error."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from child_process import REPO_ROOT, child_env, run_python

REDIS = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed (scripts/setup.sh installs it)")

STEPS = r"""
import json, sys, warnings, torch, torch_neuron
sys.path.insert(0, {here!r})
from models import MLP, loss_fn, make_batches
torch.manual_seed(0)
model = MLP(p=0.0).to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
losses = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for x, y in make_batches("mlp", 3, batch=8):
        opt.zero_grad()
        loss = loss_fn("mlp", model, x.to("neuron"), y.to("neuron"))
        loss.backward()
        opt.step()
        torch_neuron.mark_step()
        losses.append(loss.item())
c = torch_neuron.metrics.counters()
print(json.dumps({{"losses": losses, "compiles": c.get("graph.compile.count", 0),
                  **{{k: c.get("remote." + k + ".count", 0) for k in ("hit", "miss", "corrupt", "store", "unavailable")}},
                  "warnings": [str(w.message) for w in caught if "remote compile cache" in str(w.message)]}}))
""".format(here=os.path.dirname(os.path.abspath(__file__)))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(port, *args):
    """One Redis command in RESP over a plain socket; the raw reply."""
    payload = f"*{len(args)}\r\n".encode()
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        payload += b"$%d\r\n%s\r\n" % (len(a), a)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        time.sleep(0.05)
        return s.recv(1 << 20)


@pytest.fixture
def redis(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            if _command(port, "PING").startswith(b"+PONG"):
                break
        except OSError:
            pass
        assert time.monotonic() < deadline and proc.poll() is None, "redis-server did not start"
        time.sleep(0.1)
    yield port
    proc.terminate()
    proc.wait(timeout=30)


def _steps(cache, url):
    done = run_python(STEPS, {"TORCH_NEURON_CACHE_DIR": str(cache), "TORCH_NEURON_REMOTE_CACHE": url}, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["warnings"] += [line for line in done.stderr.splitlines() if "remote compile cache" in line]
    return out


def _keys(port):
    reply = _command(port, "KEYS", "torch_neuron:neff:*").decode(errors="replace")
    return [line for line in reply.split("\r\n") if line.startswith("torch_neuron:neff:")]


def test_a_second_machine_gets_every_graph_from_redis_and_compiles_none(tmp_path, redis):
    url = f"redis://127.0.0.1:{redis}/0"
    first = _steps(tmp_path / "machine1", url)
    assert first["compiles"] > 0 and first["store"] == first["compiles"] and first["hit"] == 0, first
    assert len(_keys(redis)) == first["compiles"]
    second = _steps(tmp_path / "machine2", url)  # an empty local cache dir
    assert second["losses"] == first["losses"]
    assert second["compiles"] == 0 and second["hit"] == first["compiles"], second
    # The cache tool sees and verifies the remote level.
    env = child_env({"TORCH_NEURON_CACHE_DIR": str(tmp_path / "machine2"), "TORCH_NEURON_REMOTE_CACHE": url})
    info = subprocess.run([sys.executable, "-m", "torch_neuron.cache", "info"], capture_output=True, text=True,
                          env=env, cwd=str(REPO_ROOT), timeout=120)
    assert f"remote        {url}: {first['compiles']} entries" in info.stdout, info.stdout + info.stderr


def test_a_corrupt_remote_entry_is_deleted_and_compiled_again(tmp_path, redis):
    url = f"redis://127.0.0.1:{redis}"
    first = _steps(tmp_path / "machine1", url)
    keys = _keys(redis)
    assert len(keys) == first["compiles"]
    assert _command(redis, "SET", keys[0], b"TNNEFF\x00\x01 but not really").startswith(b"+OK")
    second = _steps(tmp_path / "machine2", url)
    assert second["losses"] == first["losses"]
    assert second["corrupt"] == 1 and second["compiles"] == 1 and second["hit"] == first["compiles"] - 1, second
    assert second["store"] == 1  # written again, whole
    env = child_env({"TORCH_NEURON_CACHE_DIR": str(tmp_path / "machine2"), "TORCH_NEURON_REMOTE_CACHE": url})
    verify = subprocess.run([sys.executable, "-m", "torch_neuron.cache", "verify"], capture_output=True, text=True,
                            env=env, cwd=str(REPO_ROOT), timeout=120)
    assert f"{first['compiles']} of {first['compiles']} entries valid; 0 deleted" in verify.stdout, verify.stdout
    # A corrupt entry found by verify is deleted too.
    _command(redis, "SET", keys[1], b"garbage")
    verify = subprocess.run([sys.executable, "-m", "torch_neuron.cache", "verify"], capture_output=True, text=True,
                            env=env, cwd=str(REPO_ROOT), timeout=120)
    assert verify.returncode == 1 and f"{keys[1]}  BAD (remote): deleted" in verify.stdout, verify.stdout
    assert keys[1] not in _keys(redis)


def test_a_redis_that_is_down_costs_a_warning_and_a_local_compile(tmp_path):
    url = f"redis://127.0.0.1:{_free_port()}/0"  # nothing listens there
    out = _steps(tmp_path / "cache", url)
    reference = _steps(tmp_path / "reference", "")
    assert out["losses"] == reference["losses"]
    assert out["compiles"] == reference["compiles"] and out["hit"] == 0
    assert out["unavailable"] >= 1 and len(out["warnings"]) == 1, out


def test_a_malformed_remote_url_is_a_clear_error_at_import():
    done = run_python("import torch_neuron", {"TORCH_NEURON_REMOTE_CACHE": "http://cache:6379"})
    assert done.returncode != 0
    assert "TORCH_NEURON_REMOTE_CACHE='http://cache:6379' is not valid: expected a redis://host[:port][/db] URL" \
        in done.stderr
