"""The remote compile cache against a real redis-server (started on a loopback
port by the fixture, stopped after): a second machine (a process with an empty
local cache dir) gets every graph from Redis and compiles none; a corrupt entry
is deleted and compiled again; a Redis that is down costs a warning and a local
compile, never an error."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from child_process import REPO_ROOT, child_env, run_python
from servers import REDIS, free_port, redis_server

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
                  "service": c.get("service.compile.count", 0), "lookups": c.get("service.lookup_hit.count", 0),
                  "fallback": c.get("service.fallback.count", 0),
                  "stand_ins": c.get("compile.tiered.stand_in.count", 0),
                  **{{k: c.get("remote." + k + ".count", 0) for k in ("hit", "miss", "corrupt", "store", "unavailable")}},
                  "warnings": [str(w.message) for w in caught if "remote compile cache" in str(w.message)]}}))
""".format(here=os.path.dirname(os.path.abspath(__file__)))


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
    with redis_server(tmp_path) as port:
        yield port


def _steps(cache, url, **env):
    done = run_python(STEPS, {"TORCH_NEURON_CACHE_DIR": str(cache), "TORCH_NEURON_REMOTE_CACHE": url, **env},
                      timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["warnings"] += [line for line in done.stderr.splitlines() if "remote compile cache" in line]
    return out


def _connections(port):
    """Connections Redis has accepted so far (this query's own included)."""
    reply = _command(port, "INFO", "stats").decode()
    return int(reply.split("total_connections_received:")[1].split("\r\n")[0])


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
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    out = _steps(tmp_path / "cache", url)
    reference = _steps(tmp_path / "reference", "")
    assert out["losses"] == reference["losses"]
    assert out["compiles"] == reference["compiles"] and out["hit"] == 0
    assert out["unavailable"] >= 1 and len(out["warnings"]) == 1, out


def test_a_malformed_remote_url_is_a_clear_error_at_import():
    done = run_python("import torch_neuron", {"TORCH_NEURON_REMOTE_CACHE": "http://cache:6379"})
    assert done.returncode != 0
    assert ("TORCH_NEURON_REMOTE_CACHE='http://cache:6379' is not valid: "
            "expected a redis[s]://[[user]:password@]host[:port][/db] URL") in done.stderr
    # A password in a malformed URL is not repeated.
    done = run_python("import torch_neuron", {"TORCH_NEURON_REMOTE_CACHE": "http://:hunter2@cache:6379"})
    assert done.returncode != 0 and "TORCH_NEURON_REMOTE_CACHE='...@cache:6379' is not valid" in done.stderr
    assert "hunter2" not in done.stderr


# -------------------------------------------------------- through the service

def _service(cache, *args):
    env = child_env({"TORCH_NEURON_CACHE_DIR": str(cache), "TORCH_NEURON_COMPILE_SERVICE": "auto"})
    code = "import json, sys, torch_neuron; print(json.dumps(getattr(torch_neuron.service, sys.argv[1])()))"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=str(REPO_ROOT), timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def machines(tmp_path):
    """Cache dirs standing for machines, each with its own compile service
    (stopped afterwards)."""
    made = []

    def machine(name):
        made.append(tmp_path / name)
        return made[-1]

    yield machine
    for cache in made:
        _service(cache, "stop")


def test_the_service_reads_and_writes_redis_for_its_clients_on_one_connection(machines, redis):
    url = f"redis://127.0.0.1:{redis}/0"
    service = {"TORCH_NEURON_COMPILE_SERVICE": "auto", "TORCH_NEURON_SERVICE_IDLE_S": "120"}
    client_side = ("hit", "miss", "corrupt", "store", "unavailable")
    before = _connections(redis)
    # Machine 1 compiles in its service, which writes every graph to Redis.
    machine1 = machines("machine1")
    first = _steps(machine1, url, **service)
    assert first["compiles"] == 0 and first["fallback"] == 0 and first["service"] > 0, first
    graphs = first["service"]
    status1 = _service(machine1, "status")
    assert (status1["compiles"], status1["remote_stores"], status1["remote_hits"]) == (graphs, graphs, 0), status1
    assert len(_keys(redis)) == graphs
    # Machine 2 (an empty cache dir, a service of its own) gets them all from
    # Redis through its service; machine 3 too, by lookups, with tiering on.
    machine2, machine3 = machines("machine2"), machines("machine3")
    second = _steps(machine2, url, **service)
    # A lookup starts no service (a client asks Redis itself while its
    # service is still starting): machine 3's is up before its process.
    _service(machine3, "start")
    third = _steps(machine3, url, TORCH_NEURON_TIERED_COMPILE="1", **service)
    for out in (first, second, third):
        assert out["losses"] == first["losses"]
        assert [out[k] for k in client_side] == [0] * 5, out  # no client asked Redis itself
    assert second["compiles"] == 0 and second["service"] == graphs, second
    assert third["compiles"] == 0 and third["stand_ins"] == 0 and third["lookups"] == graphs, third
    status2, status3 = _service(machine2, "status"), _service(machine3, "status")
    assert (status2["compiles"], status2["remote_hits"], status2["remote_stores"]) == (0, graphs, 0), status2
    assert (status3["compiles"], status3["lookups"], status3["remote_hits"]) == (0, graphs, graphs), status3
    # One connection per service, whatever its clients asked; the other two
    # since `before` are this test's own (_keys, and this _connections).
    assert _connections(redis) - before == 3 + 2, "the clients connected to Redis themselves"


def test_without_a_service_to_answer_a_client_uses_redis_itself(tmp_path, redis):
    url = f"redis://127.0.0.1:{redis}/0"
    first = _steps(tmp_path / "machine1", url)  # no service: this process writes Redis
    assert first["store"] == first["compiles"] > 0, first
    nowhere = {"TORCH_NEURON_COMPILE_SERVICE": str(tmp_path / "no-service.sock")}
    second = _steps(tmp_path / "machine2", url, **nowhere)
    assert second["losses"] == first["losses"]
    assert second["compiles"] == 0 and second["hit"] == first["compiles"], second
    assert second["fallback"] == first["compiles"], second  # each graph: the service did not answer
