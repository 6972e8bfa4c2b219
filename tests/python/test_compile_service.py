"""The compile service as a real process: processes of one user share it and
each graph is compiled once; bad requests get error replies and the service
lives on; a service killed mid-compile, an unreachable one or another uid's
connection cost the clients nothing but a local compile."""

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from child_process import REPO_ROOT, child_env, run_python, start_python

# Three SGD steps of a small MLP (three distinct graphs: the first step, the
# steady step, and the reads); prints the losses and this process's counters.
STEPS = r"""
import json, sys, torch, torch_neuron
sys.path.insert(0, {here!r})
from models import MLP, loss_fn, make_batches
torch.manual_seed(0)
model = MLP(p=0.0).to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
losses = []
for x, y in make_batches("mlp", 3, batch=8):
    opt.zero_grad()
    loss = loss_fn("mlp", model, x.to("neuron"), y.to("neuron"))
    loss.backward()
    opt.step()
    torch_neuron.mark_step()
    losses.append(loss.item())
c = torch_neuron.metrics.counters()
print(json.dumps({{"losses": losses, "local": c.get("graph.compile.count", 0),
                  "service": c.get("service.compile.count", 0), "fallback": c.get("service.fallback.count", 0),
                  "disk": c.get("cache.disk_hit.count", 0),
                  "reason": torch_neuron.service.last_fallback_reason()}}))
""".format(here=os.path.dirname(os.path.abspath(__file__)))


def _env(cache, **extra):
    env = {"TORCH_NEURON_CACHE_DIR": str(cache), "TORCH_NEURON_COMPILE_SERVICE": "auto",
           "TORCH_NEURON_SERVICE_IDLE_S": "120"}
    env.update(extra)
    return env


def _cli(cache, *args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "torch_neuron.service", *args], capture_output=True, text=True,
                          env=child_env(_env(cache, **(env or {}))), cwd=str(REPO_ROOT), timeout=timeout)


def _status(cache):
    done = run_python("import json, torch_neuron; print(json.dumps(torch_neuron.service.status()))", _env(cache))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _paths(cache):
    done = run_python("import json, torch_neuron; print(json.dumps(torch_neuron.service.paths()))", _env(cache))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def service_cache(tmp_path):
    """A cache dir whose service (if one was started) is stopped afterwards."""
    cache = tmp_path / "cache"
    yield cache
    _cli(cache, "stop")


def _steps(cache, **env):
    done = run_python(STEPS, _env(cache, **env), timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The losses and the number of graphs with no service (compiled here)."""
    out = _steps(tmp_path_factory.mktemp("ref"), TORCH_NEURON_COMPILE_SERVICE="off")
    assert out["local"] > 0 and out["service"] == 0
    return out


def _concurrent_steps(script, count, cache, reference):
    """Runs `count` processes of `script` at once with the service; each must
    get every graph from it or from the disk, with the reference's losses."""
    procs = [start_python(script, _env(cache)) for _ in range(count)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    for out in outs:
        assert out["losses"] == reference["losses"]
        assert out["local"] == 0 and out["fallback"] == 0, out
        # Each graph came from the disk (another process's, written by the
        # service) or from the service.
        assert out["service"] + out["disk"] == reference["local"], out
    return outs


def test_eight_concurrent_cold_processes_compile_each_graph_once(service_cache, reference):
    outs = _concurrent_steps(STEPS, 8, service_cache, reference)
    status = _status(service_cache)
    # Every graph compiled once in all; the other asks were joins or disk hits.
    assert status["compiles"] == reference["local"], status
    assert status["compiles"] + status["joins"] + status["disk_hits"] == sum(o["service"] for o in outs), status
    assert status["errors"] == 0 and status["refused_peers"] == 0


# The same steps through torch.compile(backend="neuron"): the forward and
# backward programs are asked of the service like every other graph.
COMPILED_STEPS = STEPS.replace(
    'loss = loss_fn("mlp", model, ', 'loss = loss_fn("mlp", compiled, ').replace(
    'losses = []', 'compiled = torch.compile(model, backend="neuron")\nlosses = []')


def test_compiled_regions_are_compiled_by_the_service(service_cache):
    assert COMPILED_STEPS != STEPS
    alone = json.loads(run_python(COMPILED_STEPS, _env(service_cache.parent / "alone",
                                                       TORCH_NEURON_COMPILE_SERVICE="off"),
                                  timeout=300).stdout.strip().splitlines()[-1])
    assert alone["local"] > 0 and alone["service"] == 0
    _concurrent_steps(COMPILED_STEPS, 2, service_cache, alone)
    assert _status(service_cache)["compiles"] == alone["local"]


# An AdamW step of an MLP of DEPTH hidden layers of one width, at opt level 1:
# graphs of two depths differ, but share their generated kernels.
DEEP = r"""
import sys, torch, torch_neuron
depth = int(sys.argv[1])
torch.manual_seed(0)
layers = []
for _ in range(depth):
    layers += [torch.nn.Linear(32, 32), torch.nn.GELU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(32, 4)).to("neuron")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(2):
    opt.zero_grad()
    model(torch.randn(8, 32, device="neuron")).square().mean().backward()
    opt.step()
    torch_neuron.mark_step()
torch_neuron.wait_device_ops()
c = torch_neuron.metrics.counters()
assert c.get("graph.compile.count", 0) == 0 and c.get("service.compile.count", 0) > 0, c
"""


def test_graphs_that_differ_but_share_kernels_build_each_kernel_once(service_cache):
    env = _env(service_cache, TORCH_NEURON_OPT_LEVEL="1")
    for depth in ("2", "3"):
        done = run_python(DEEP, env, args=(depth,), timeout=300)
        assert done.returncode == 0, done.stderr
    status = _status(service_cache)
    # The deeper model's graph is new, and compiled; most of its kernels were
    # built for the shallower one's already.
    assert status["compiles"] >= 2 and status["errors"] == 0, status
    assert status["kernel_reuses"] >= 2 and status["kernel_reuses"] >= status["kernel_builds"] // 2, status


def _frame(payload: bytes) -> bytes:
    return struct.pack("<I", len(payload)) + payload


def _read_reply(sock) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return b""
        head += chunk
    (length,) = struct.unpack("<I", head)
    body = b""
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            break
        body += chunk
    return body


def _varint(data: bytes, i: int):
    value, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _reply_code(reply: bytes) -> int:
    """ServiceReply.code (field 2, a varint) from its wire form; 0 if absent."""
    i = 0
    while i < len(reply):
        key, i = _varint(reply, i)
        field, wire = key >> 3, key & 7
        assert wire in (0, 2), f"unexpected wire type {wire}"
        value, i = _varint(reply, i)
        if wire == 0 and field == 2:
            return value
        if wire == 2:
            i += value  # a length-delimited field: skip its bytes
    return 0


def _connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(path)
    return s


def test_garbage_truncated_and_oversized_requests_get_errors_and_the_service_lives_on(service_cache):
    started = _cli(service_cache, "start")
    assert started.returncode == 0, started.stderr
    path = _paths(service_cache)["socket"]
    INVALID_ARGUMENT, RESOURCE_EXHAUSTED = 3, 8
    with _connect(path) as s:  # not a ServiceRequest, then a version from the future, on one connection
        s.sendall(_frame(b"\xff\xfe garbage \x00\x01"))
        assert _reply_code(_read_reply(s)) == INVALID_ARGUMENT
        s.sendall(_frame(b"\x08\x63"))  # protocol_version = 99
        assert _reply_code(_read_reply(s)) == INVALID_ARGUMENT
    with _connect(path) as s:  # a compile request whose graph does not hash to its hash
        compile_request = b"\x08\x01\x12\x10" + b"\x00" * 16  # format 1, a zero hash, no nodes
        s.sendall(_frame(b"\x08\x01\x12" + bytes([len(compile_request) + 2]) + b"\x0a" +
                         bytes([len(compile_request)]) + compile_request))
        assert _reply_code(_read_reply(s)) != 0
    with _connect(path) as s:  # a frame longer than the limit: an error reply, nothing read
        s.sendall(struct.pack("<I", 0xFFFFFFF0))
        assert _reply_code(_read_reply(s)) == RESOURCE_EXHAUSTED
    with _connect(path) as s:  # a client that dies inside a frame
        s.sendall(struct.pack("<I", 1000) + b"\x08\x01")
    with _connect(path) as s:  # one that connects and leaves
        pass
    status = _status(service_cache)
    assert status["errors"] == 4, status
    assert status["requests"] >= 4


def test_a_service_killed_mid_compile_leaves_its_clients_compiling_here(service_cache, reference):
    # Each compile in the service waits 5 s first: the client is mid-request when it dies.
    env = {"TORCH_NEURON_TEST_SERVICE_DELAY_MS": "5000"}
    started = _cli(service_cache, "start", env=env)
    assert started.returncode == 0, started.stderr
    pid = _status(service_cache)["pid"]
    client = start_python(STEPS, _env(service_cache, **env))
    deadline = time.monotonic() + 120
    while _status(service_cache)["in_flight"] == 0:
        assert time.monotonic() < deadline, "the client never asked the service"
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    out, err = client.communicate(timeout=300)
    assert client.returncode == 0, err
    out = json.loads(out.strip().splitlines()[-1])
    assert out["losses"] == reference["losses"]
    assert out["fallback"] >= 1 and out["local"] >= 1, out
    assert "closed the connection" in out["reason"] or "no service" in out["reason"], out
    # The disk cache holds only complete entries.
    verify = subprocess.run([sys.executable, "-m", "torch_neuron.cache", "verify"], capture_output=True, text=True,
                            env=child_env(_env(service_cache)), cwd=str(REPO_ROOT), timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_an_unreachable_service_means_compiling_here(tmp_path, reference):
    out = _steps(tmp_path / "cache", TORCH_NEURON_COMPILE_SERVICE=str(tmp_path / "nowhere" / "socket"))
    assert out["losses"] == reference["losses"]
    assert out["local"] == reference["local"] and out["service"] == 0
    assert out["fallback"] == reference["local"] and "no service at" in out["reason"], out


@pytest.mark.skipif(os.geteuid() != 0, reason="running a client as another uid needs root (setpriv)")
def test_a_connection_from_another_uid_is_refused_and_logged(service_cache):
    started = _cli(service_cache, "start")
    assert started.returncode == 0, started.stderr
    where = _paths(service_cache)
    # Let the other uid reach the socket at all (the 0700 directory stops it
    # first); the service itself must refuse it.
    os.chmod(where["dir"], 0o755)
    os.chmod(where["socket"], 0o777)
    for parent in [service_cache, *service_cache.parents]:
        os.chmod(parent, os.stat(parent).st_mode | 0o005)
        if str(parent) == "/tmp":
            break
    code = ("import socket, struct, sys\n"
            "s = socket.socket(socket.AF_UNIX); s.settimeout(30); s.connect(sys.argv[1])\n"
            "try:\n"
            "    s.sendall(struct.pack('<I', 2) + b'\\x1a\\x00'); print('reply' if s.recv(4) else 'closed')\n"
            "except (ConnectionResetError, BrokenPipeError):\n"
            "    print('closed')\n")
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                           code, where["socket"]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "closed"  # no reply
    assert _status(service_cache)["refused_peers"] == 1
    with open(os.path.join(where["dir"], "service.log")) as f:
        assert "refused a connection from uid 65534" in f.read()


def test_a_process_in_auto_mode_starts_the_service_at_import_and_the_cli_starts_none(service_cache):
    # `status` with no service running says so and starts none.
    done = _cli(service_cache, "status")
    assert done.returncode == 1 and "no service at" in done.stderr, done.stderr
    assert _cli(service_cache, "status").returncode == 1
    # A process that only imports torch_neuron starts it (in the background):
    # it is up when the first graph needs compiling.
    done = run_python("import time, torch_neuron; time.sleep(0.5)", _env(service_cache))
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 90
    while _cli(service_cache, "status").returncode != 0:
        assert time.monotonic() < deadline, "no service started"
        time.sleep(0.5)
    assert _status(service_cache)["compiles"] == 0
