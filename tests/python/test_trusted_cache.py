"""Nothing runs that nobody trusted: a remote entry not signed with the fleet key
(written straight into a real redis-server) is refused and the graph compiled
here, with results equal to the CPU's; Redis AUTH (requirepass, ACL users) and
TLS (rediss://, a certificate the test makes with the openssl CLI) work; disk
cache entries and a service directory that are not this user's alone are
refused the same way."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from child_process import REPO_ROOT, child_env, run_python
from servers import REDIS, redis_server

pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed (scripts/setup.sh installs it)")

# A few training steps on neuron, and the same on the CPU from the same
# weights: the losses of both and the counters that say where each graph came from.
STEPS = r"""
import copy, json, sys, warnings, torch, torch_neuron
sys.path.insert(0, {here!r})
from models import MLP, loss_fn, make_batches
torch.manual_seed(0)
cpu_model = MLP(p=0.0)
model = copy.deepcopy(cpu_model).to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9)
losses, cpu_losses = [], []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for x, y in make_batches("mlp", 3, batch=8):
        opt.zero_grad()
        loss = loss_fn("mlp", model, x.to("neuron"), y.to("neuron"))
        loss.backward()
        opt.step()
        torch_neuron.mark_step()
        losses.append(loss.item())
        cpu_opt.zero_grad()
        cpu_loss = loss_fn("mlp", cpu_model, x, y)
        cpu_loss.backward()
        cpu_opt.step()
        cpu_losses.append(cpu_loss.item())
c = torch_neuron.metrics.counters()
print(json.dumps({{"losses": losses, "cpu_losses": cpu_losses, "compiles": c.get("graph.compile.count", 0),
                  "disk_hits": c.get("cache.disk_hit.count", 0),
                  "disk_untrusted": c.get("cache.untrusted.count", 0),
                  "service": c.get("service.compile.count", 0),
                  "service_untrusted": c.get("service.untrusted.count", 0),
                  **{{k: c.get("remote." + k + ".count", 0)
                     for k in ("hit", "miss", "corrupt", "store", "unavailable", "untrusted")}},
                  "warnings": [str(w.message) for w in caught]}}))
""".format(here=os.path.dirname(os.path.abspath(__file__)))

FLEET_KEY = "fleet key: 7c1e5b0a9d"
MAGIC = b"TNSIGv1\x00"


def _steps(cache, **env):
    done = run_python(STEPS, {"TORCH_NEURON_CACHE_DIR": str(cache), **env}, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["warnings"] += [line for line in done.stderr.splitlines() if "torch_neuron" in line]
    assert not any("is not a torch_neuron setting" in w for w in out["warnings"]), out["warnings"]
    # Every graph, wherever it came from, computes what the CPU computes.
    assert out["losses"] == pytest.approx(out["cpu_losses"], rel=1e-4, abs=1e-6), out
    return out


def _command(port, *args, password=None):
    """One Redis command in RESP over a plain socket (after AUTH with `password`); the raw reply."""
    commands = [("AUTH", password)] if password else []
    payload = b""
    for command in commands + [args]:
        payload += f"*{len(command)}\r\n".encode()
        for a in command:
            a = a if isinstance(a, bytes) else str(a).encode()
            payload += b"$%d\r\n%s\r\n" % (len(a), a)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        time.sleep(0.1)
        reply = s.recv(1 << 24)
    return reply[len(b"+OK\r\n"):] if password else reply


def _keys(port):
    reply = _command(port, "KEYS", "torch_neuron:neff:*").decode(errors="replace")
    return [line for line in reply.split("\r\n") if line.startswith("torch_neuron:neff:")]


def _get(port, key):
    """A bulk-string reply's bytes."""
    reply = _command(port, "GET", key)
    header, _, rest = reply.partition(b"\r\n")
    assert header.startswith(b"$"), reply[:40]
    length = int(header[1:])
    while len(rest) < length + 2:  # a large value may need more reads
        reply = _command(port, "GET", key)
        header, _, rest = reply.partition(b"\r\n")
    return rest[:length]


@pytest.fixture
def redis(tmp_path):
    with redis_server(tmp_path) as port:
        yield port


# ------------------------------------------------------------------ signed entries

def test_a_forged_entry_written_straight_into_redis_is_refused_and_compiled_here(tmp_path, redis):
    url = f"redis://127.0.0.1:{redis}/0"
    first = _steps(tmp_path / "machine1", TORCH_NEURON_REMOTE_CACHE=url, TORCH_NEURON_REMOTE_CACHE_KEY=FLEET_KEY)
    graphs = first["compiles"]
    keys = _keys(redis)
    assert graphs > 0 and first["store"] == graphs and len(keys) == graphs, first
    # Every entry is signed: the seal, then a 32-byte tag, then the NEFF.
    entries = {key: _get(redis, key) for key in keys}
    assert all(e.startswith(MAGIC) and e[40:46] == b"TNNEFF" for e in entries.values())
    # Someone who can write to Redis but has no key writes a NEFF that would
    # load (a real one, unsigned) under a key the fleet will ask for.
    forged_key = keys[0]
    assert _command(redis, "SET", forged_key, entries[forged_key][40:]).startswith(b"+OK")
    second = _steps(tmp_path / "machine2", TORCH_NEURON_REMOTE_CACHE=url, TORCH_NEURON_REMOTE_CACHE_KEY=FLEET_KEY)
    assert second["losses"] == first["losses"]
    assert second["untrusted"] == 1 and second["compiles"] == 1 and second["hit"] == graphs - 1, second
    assert second["corrupt"] == 0
    assert sum("refused a remote compile cache entry" in w and "is not signed" in w
               for w in second["warnings"]) == 1, second["warnings"]
    # The graph compiled here was written back, signed, over the forgery.
    assert second["store"] == 1 and _get(redis, forged_key) == entries[forged_key]


def test_an_entry_signed_with_another_key_is_refused(tmp_path, redis):
    url = f"redis://127.0.0.1:{redis}/0"
    first = _steps(tmp_path / "machine1", TORCH_NEURON_REMOTE_CACHE=url, TORCH_NEURON_REMOTE_CACHE_KEY="another key")
    graphs = first["compiles"]
    key_file = tmp_path / "fleet.key"
    key_file.write_text(FLEET_KEY + "\n")  # a key file's trailing newline is not part of the key
    second = _steps(tmp_path / "machine2", TORCH_NEURON_REMOTE_CACHE=url,
                    TORCH_NEURON_REMOTE_CACHE_KEY_FILE=str(key_file))
    assert second["losses"] == first["losses"]
    assert second["untrusted"] == graphs and second["hit"] == 0 and second["compiles"] == graphs, second
    assert any("not signed with this fleet key" in w for w in second["warnings"]), second["warnings"]
    # Now written with the fleet key: a third machine with it (given as text) loads them all.
    third = _steps(tmp_path / "machine3", TORCH_NEURON_REMOTE_CACHE=url, TORCH_NEURON_REMOTE_CACHE_KEY=FLEET_KEY)
    assert third["hit"] == graphs and third["compiles"] == 0 and third["untrusted"] == 0, third


def test_without_a_key_entries_are_written_unsigned_and_read_unchecked(tmp_path, redis):
    url = f"redis://127.0.0.1:{redis}/0"
    first = _steps(tmp_path / "machine1", TORCH_NEURON_REMOTE_CACHE=url)
    graphs = first["compiles"]
    assert all(_get(redis, key).startswith(b"TNNEFF") for key in _keys(redis))
    # A keyless machine takes a signed entry too (nothing to check it with).
    signed = _steps(tmp_path / "machine2", TORCH_NEURON_REMOTE_CACHE=url, TORCH_NEURON_REMOTE_CACHE_KEY=FLEET_KEY)
    assert signed["untrusted"] == graphs and signed["compiles"] == graphs, signed
    keyless = _steps(tmp_path / "machine3", TORCH_NEURON_REMOTE_CACHE=url)
    assert keyless["hit"] == graphs and keyless["compiles"] == 0 and keyless["untrusted"] == 0, keyless


def test_both_key_settings_at_once_is_a_clear_error(tmp_path):
    done = run_python("import torch_neuron", {"TORCH_NEURON_REMOTE_CACHE_KEY": "k",
                                              "TORCH_NEURON_REMOTE_CACHE_KEY_FILE": str(tmp_path / "k")})
    assert done.returncode != 0
    assert "set one of TORCH_NEURON_REMOTE_CACHE_KEY and TORCH_NEURON_REMOTE_CACHE_KEY_FILE" in done.stderr


def test_the_service_signs_and_checks_for_its_clients(tmp_path, redis):
    url = f"redis://127.0.0.1:{redis}/0"
    cache = tmp_path / "machine1"
    service = {"TORCH_NEURON_COMPILE_SERVICE": "auto", "TORCH_NEURON_SERVICE_IDLE_S": "120",
               "TORCH_NEURON_REMOTE_CACHE": url, "TORCH_NEURON_REMOTE_CACHE_KEY": FLEET_KEY}
    try:
        first = _steps(cache, **service)
        graphs = first["service"]
        assert graphs > 0 and first["compiles"] == 0, first
        keys = _keys(redis)
        assert len(keys) == graphs and all(_get(redis, k).startswith(MAGIC) for k in keys)
        # Forge one (unsigned), empty the service's disk cache, and ask again.
        _command(redis, "SET", keys[0], _get(redis, keys[0])[40:])
        shutil.rmtree(cache / "v1")
        second = _steps(cache, **service)
        assert second["losses"] == first["losses"] and second["service"] == graphs, second
        status = _service(cache, "status")
        assert status["remote_untrusted"] == 1 and status["compiles"] == graphs + 1, status
        assert _get(redis, keys[0]).startswith(MAGIC)  # written again, signed
    finally:
        _service(cache, "stop")


def _service(cache, *args):
    env = child_env({"TORCH_NEURON_CACHE_DIR": str(cache), "TORCH_NEURON_COMPILE_SERVICE": "auto"})
    code = "import json, sys, torch_neuron; print(json.dumps(getattr(torch_neuron.service, sys.argv[1])()))"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=str(REPO_ROOT), timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ AUTH and TLS

def test_auth_with_requirepass_and_an_acl_user(tmp_path):
    acl_user = ["fleet", "on", ">user-pass", "~torch_neuron:*", "+get", "+set", "+del", "+scan", "+ping"]
    with redis_server(tmp_path, "--requirepass", "p@ss:w/rd", "--user", *acl_user, password="p@ss:w/rd") as port:
        url = f"redis://:p%40ss%3Aw%2Frd@127.0.0.1:{port}/0"
        first = _steps(tmp_path / "machine1", TORCH_NEURON_REMOTE_CACHE=url)
        graphs = first["compiles"]
        assert first["store"] == graphs and first["unavailable"] == 0, first
        second = _steps(tmp_path / "machine2", TORCH_NEURON_REMOTE_CACHE=f"redis://fleet:user-pass@127.0.0.1:{port}")
        assert second["hit"] == graphs and second["compiles"] == 0, second
        # No password, or a wrong one: Redis refuses, the graphs compile here.
        for bad in (f"redis://127.0.0.1:{port}", f"redis://:wrong@127.0.0.1:{port}"):
            third = _steps(tmp_path / "machine3", TORCH_NEURON_REMOTE_CACHE=bad)
            assert third["hit"] == 0 and third["compiles"] == graphs and third["unavailable"] >= 1, third
            warned = [w for w in third["warnings"] if "remote compile cache is unavailable" in w]
            assert warned and all("wrong" not in w for w in warned), third["warnings"]
            shutil.rmtree(tmp_path / "machine3")


def _certificate(directory):
    """A self-signed certificate for 127.0.0.1 (its own CA), made by the openssl CLI."""
    cert, key = str(directory / "cert.pem"), str(directory / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_tls_with_the_servers_ca_and_refused_without_it(tmp_path):
    cert, key = _certificate(tmp_path)
    with redis_server(tmp_path, "--requirepass", "pw", tls=(cert, key), password="pw") as port:
        url = f"rediss://:pw@127.0.0.1:{port}/0?ssl_ca_certs={cert}"
        first = _steps(tmp_path / "machine1", TORCH_NEURON_REMOTE_CACHE=url, TORCH_NEURON_REMOTE_CACHE_KEY=FLEET_KEY)
        graphs = first["compiles"]
        assert first["store"] == graphs and first["unavailable"] == 0, first
        second = _steps(tmp_path / "machine2", TORCH_NEURON_REMOTE_CACHE=url, TORCH_NEURON_REMOTE_CACHE_KEY=FLEET_KEY)
        assert second["hit"] == graphs and second["compiles"] == 0 and second["untrusted"] == 0, second
        # The system's CA store does not vouch for this certificate; plain
        # Redis on a TLS port gets no answer it can read: both compile here.
        for bad, why in ((f"rediss://:pw@127.0.0.1:{port}/0", "self-signed certificate"),
                         (f"redis://:pw@127.0.0.1:{port}/0", "remote compile cache is unavailable")):
            third = _steps(tmp_path / "machine3", TORCH_NEURON_REMOTE_CACHE=bad,
                           TORCH_NEURON_REMOTE_CACHE_KEY=FLEET_KEY)
            assert third["hit"] == 0 and third["compiles"] == graphs and third["unavailable"] >= 1, third
            assert any(why in w for w in third["warnings"]), third["warnings"]
            shutil.rmtree(tmp_path / "machine3")


# ------------------------------------------------------------------ disk and service

def _entries(cache):
    return sorted((cache / "v1").glob("*/*/*.neff"))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_disk_entries_of_another_uid_are_refused(tmp_path):
    cache = tmp_path / "machine"
    first = _steps(cache)
    graphs = first["compiles"]
    entries = _entries(cache)
    assert len(entries) == graphs
    for e in entries:
        os.chown(e, 65534, 65534)  # nobody
    second = _steps(cache)
    assert second["losses"] == first["losses"]
    # Each miss reads the entry twice: before taking the key's lock and after.
    assert second["disk_untrusted"] == 2 * graphs and second["disk_hits"] == 0 and second["compiles"] == graphs, second
    assert sum("refused a disk cache entry" in w and "belongs to uid 65534" in w
               for w in second["warnings"]) == 1, second["warnings"]
    # Written again, this user's: a third run takes them all from the disk.
    assert all(e.stat().st_uid == os.geteuid() for e in _entries(cache))
    third = _steps(cache)
    assert third["disk_hits"] == graphs and third["compiles"] == 0 and third["disk_untrusted"] == 0, third


def test_disk_entries_others_may_write_are_refused(tmp_path):
    cache = tmp_path / "machine"
    first = _steps(cache)
    graphs = first["compiles"]
    for e in _entries(cache):
        e.chmod(0o666)
    second = _steps(cache)
    assert second["losses"] == first["losses"]
    assert second["disk_untrusted"] == 2 * graphs and second["disk_hits"] == 0 and second["compiles"] == graphs, second
    assert any("writable by its group or others" in w for w in second["warnings"]), second["warnings"]
    # Entries are written 0644 whatever the umask says.
    assert all(e.stat().st_mode & 0o777 == 0o644 for e in _entries(cache))


def test_a_service_directory_others_may_write_is_not_used(tmp_path):
    cache = tmp_path / "machine"
    service = {"TORCH_NEURON_COMPILE_SERVICE": "auto", "TORCH_NEURON_SERVICE_IDLE_S": "120"}
    status = _service(cache, "start")
    assert status.get("pid"), status
    (directory,) = [d for d in cache.iterdir() if d.name.startswith("service-")]
    try:
        directory.chmod(0o777)
        out = _steps(cache, **service)
        assert out["service"] == 0 and out["service_untrusted"] >= 1 and out["compiles"] > 0, out
        assert any("not using the compile service" in w and "writable by its group or others" in w
                   for w in out["warnings"]), out["warnings"]
    finally:
        directory.chmod(0o700)
        _service(cache, "stop")
