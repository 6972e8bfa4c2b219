"""The compile cache across processes: NEFFs on disk are reused by later and
concurrent processes, each graph is compiled once, and broken entries (corrupt,
truncated, deleted, a writer killed mid-write) are recovered from with correct
results."""

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch_neuron

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Three steps of a small MLP; prints its losses and cache counters as JSON.
WORKER = r"""
import json, sys, torch, torch_neuron
sys.path.insert(0, {here!r})
from models import MLP, loss_fn, make_batches
torch.manual_seed(0)
model = MLP(p=0.0).to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
losses = []
for x, y in make_batches("mlp", 3, batch=8):
    loss = loss_fn("mlp", model, x.to("neuron"), y.to("neuron"))
    opt.zero_grad(); loss.backward(); opt.step()
    torch_neuron.mark_step()
    losses.append(loss.item())
c = torch_neuron.metrics.counters()
print(json.dumps({{"losses": losses, "compiles": c.get("graph.compile.count", 0),
                  "disk_hits": c.get("cache.disk_hit.count", 0), "misses": c.get("cache.miss.count", 0),
                  "corrupt": c.get("cache.corrupt.count", 0), "writes": c.get("cache.write.count", 0),
                  "requests": c.get("graph.compile_request.count", 0)}}))
"""


def env_for(cache_dir, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NEURON_")}
    env["TORCH_NEURON_CACHE_DIR"] = str(cache_dir)
    # Each graph compiles at tier 1 before it runs: the counts below are exact.
    env["TORCH_NEURON_TIERED_COMPILE"] = "0"
    env.update(extra)
    return env


def start(cache_dir, **extra):
    return subprocess.Popen([sys.executable, "-c", WORKER.format(here=HERE)], env=env_for(cache_dir, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def run(cache_dir, **extra):
    return finish(start(cache_dir, **extra))


def entries(cache_dir):
    found = []
    for dirpath, _, files in os.walk(cache_dir):
        if "quarantine" in dirpath:
            continue
        found += [os.path.join(dirpath, f) for f in files if f.endswith(".neff")]
    return sorted(found)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Losses and graph count of a cold run."""
    cold = run(tmp_path_factory.mktemp("reference"))
    assert cold["compiles"] == 2 and cold["disk_hits"] == 0 and cold["writes"] == 2
    # A graph is written out as a CompileRequest on a memory miss only: the
    # third step, a memory hit, writes none.
    assert cold["requests"] == 2
    return cold


def test_a_second_process_compiles_nothing_and_loads_from_disk(tmp_path, reference):
    first = run(tmp_path)
    second = run(tmp_path)
    assert first["compiles"] == 2 and first["writes"] == 2
    assert second["compiles"] == 0 and second["misses"] == 0 and second["writes"] == 0
    assert second["disk_hits"] == 2
    assert second["requests"] == 2  # the memory level missed twice, the disk answered
    assert second["losses"] == first["losses"] == reference["losses"]
    assert len(entries(tmp_path)) == 2


TIER1_WORKER = r"""
import json, torch, torch_neuron
x = torch.linspace(-2, 2, 4096).reshape(64, 64)
y = ((x.to("neuron").sin() * 3 + 1).tanh() * x.to("neuron").cos()).sum(1)
out = y.cpu()
c = torch_neuron.metrics.counters()
print(json.dumps({"compiles": c.get("graph.compile.count", 0), "disk_hits": c.get("cache.disk_hit.count", 0),
                  "equal": bool(torch.allclose(out, ((x.sin() * 3 + 1).tanh() * x.cos()).sum(1), rtol=1e-5, atol=1e-5)),
                  "values": out.tolist()}))
"""


def test_generated_kernels_compiled_in_one_process_run_in_another(tmp_path):
    # The compiling process registers its kernels the way a loading process
    # does (one load path); the second process compiles nothing and runs the
    # kernels it read from the NEFF.
    def once():
        proc = subprocess.run([sys.executable, "-c", TIER1_WORKER], env=env_for(tmp_path, TORCH_NEURON_OPT_LEVEL="1"),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    compiler, loader = once(), once()
    assert (compiler["compiles"], compiler["disk_hits"]) == (1, 0)
    assert (loader["compiles"], loader["disk_hits"]) == (0, 1)
    assert compiler["equal"] and loader["values"] == compiler["values"]
    (entry,) = entries(tmp_path)
    with open(entry, "rb") as f:
        info = torch_neuron._C._neff_inspect(f.read())
    assert info["native_objects"] == 1, info


def test_eight_concurrent_processes_compile_each_graph_once(tmp_path, reference):
    procs = [start(tmp_path) for _ in range(8)]
    results = [finish(p) for p in procs]
    assert sum(r["compiles"] for r in results) == len(entries(tmp_path)) == reference["compiles"]
    assert sum(r["disk_hits"] for r in results) == 8 * reference["compiles"] - reference["compiles"]
    for r in results:
        assert r["losses"] == reference["losses"]


def test_corrupt_truncated_and_deleted_entries_are_rebuilt(tmp_path, reference):
    run(tmp_path)
    first, second = entries(tmp_path)
    with open(first, "r+b") as f:  # corrupt a byte in the middle
        f.seek(os.path.getsize(first) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with open(second, "r+b") as f:  # truncate
        f.truncate(os.path.getsize(second) // 3)
    again = run(tmp_path)
    assert again["corrupt"] == 2 and again["compiles"] == 2 and again["writes"] == 2
    assert again["losses"] == reference["losses"]
    assert len(os.listdir(os.path.join(tmp_path, "v1", "quarantine"))) == 2
    for path in entries(tmp_path):
        os.remove(path)  # delete
    deleted = run(tmp_path)
    assert deleted["compiles"] == 2 and deleted["corrupt"] == 0
    assert deleted["losses"] == reference["losses"]
    assert run(tmp_path)["compiles"] == 0  # all rebuilt and valid


LOCK_HOLDER = r"""
import fcntl, os, sys, time
lock_path, temp_path = sys.argv[1], sys.argv[2]
fd = os.open(lock_path, os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
with open(temp_path, "wb") as f:  # a write the process never finishes
    f.write(b"TNNEFF\0\1 partial")
print("locked", flush=True)
time.sleep(600)
"""


def test_a_writer_killed_mid_write_holding_the_lock_leaves_nothing_that_blocks(tmp_path, reference):
    run(tmp_path)
    victim = entries(tmp_path)[0]
    os.remove(victim)
    lock_path = victim[: -len(".neff")] + ".lock"
    temp_path = victim + ".tmp.999.1"
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, lock_path, temp_path],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    start_time = time.monotonic()
    after = run(tmp_path)
    assert time.monotonic() - start_time < 60  # nobody waited for a dead holder's timeout
    assert after["compiles"] == 1 and after["disk_hits"] == 1 and after["corrupt"] == 0
    assert after["losses"] == reference["losses"]
    assert os.path.exists(victim) and os.path.exists(temp_path)  # the partial temp file is ignored
    # ... and a lock held by a live process is waited for, then the result loaded.
    os.remove(victim)
    fd = os.open(lock_path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    waiting = start(tmp_path)
    time.sleep(2)
    assert waiting.poll() is None  # blocked on the lock
    os.close(fd)  # release: the waiter compiles it itself
    assert finish(waiting)["losses"] == reference["losses"]


def test_cache_off_and_read_only(tmp_path, reference):
    off = run(tmp_path / "off", TORCH_NEURON_CACHE="0")
    assert off["compiles"] == 2 and not os.path.exists(tmp_path / "off")
    run(tmp_path / "shared")
    before = {p: os.path.getmtime(p) for p in entries(tmp_path / "shared")}
    ro = run(tmp_path / "shared", TORCH_NEURON_CACHE="readonly")
    assert ro["compiles"] == 0 and ro["disk_hits"] == 2 and ro["writes"] == 0
    empty_ro = run(tmp_path / "empty", TORCH_NEURON_CACHE="readonly")
    assert empty_ro["compiles"] == 2 and empty_ro["writes"] == 0 and not os.path.exists(tmp_path / "empty")
    assert set(before) == set(entries(tmp_path / "shared"))


def cli(*args, cache_dir=None):
    env = env_for(cache_dir) if cache_dir else env_for("/nonexistent-cache-dir")
    return subprocess.run([sys.executable, "-m", "torch_neuron.cache", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_cache_cli(tmp_path, reference):
    missing = cli("list", cache_dir=tmp_path / "missing")
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"no compile cache at {tmp_path / 'missing'} (nothing has been compiled with it yet)"
    run(tmp_path)
    info = cli("info", cache_dir=tmp_path)
    assert info.returncode == 0
    assert f"directory     {tmp_path}" in info.stdout and "entries       2" in info.stdout
    assert re.search(r"fingerprint   torch_neuron 0\.1\.0 \(compiler [0-9a-f]{16}\), torch 2\.13\.0", info.stdout), info.stdout
    listed = cli("list", cache_dir=tmp_path).stdout.strip().splitlines()
    assert sorted(line.split()[0] for line in listed) == sorted(os.path.basename(p)[:32] for p in entries(tmp_path))
    assert cli("verify", cache_dir=tmp_path).stdout.strip() == "2 of 2 entries valid; 0 moved to quarantine"
    with open(entries(tmp_path)[0], "ab") as f:
        f.write(b"junk")
    bad = cli("verify", cache_dir=tmp_path)
    assert bad.returncode == 1 and "1 of 2 entries valid; 1 moved to quarantine" in bad.stdout
    pruned = cli("prune", "--max-mb", "0", cache_dir=tmp_path)
    assert pruned.stdout.strip() == "removed 0 entries; 1 left, " + pruned.stdout.strip().split(", ")[-1]
    cleared = cli("clear", cache_dir=tmp_path)
    assert cleared.stdout.strip() == f"removed 1 entries from {tmp_path}"
    assert entries(tmp_path) == []


def test_verify_keeps_entries_of_other_compiler_settings(tmp_path, reference):
    # A shared cache: one process at opt level 0, one at the default level 1.
    # Each verifies its own entries fully and keeps the other's.
    run(tmp_path)
    run(tmp_path, TORCH_NEURON_OPT_LEVEL="0")
    assert len(entries(tmp_path)) == 4
    for level in ("0", "1"):
        env = env_for(tmp_path, TORCH_NEURON_OPT_LEVEL=level)
        verified = subprocess.run([sys.executable, "-m", "torch_neuron.cache", "verify"], env=env,
                                  capture_output=True, text=True, timeout=120)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert verified.stdout.strip() == (
            "4 of 4 entries valid (2 of other compiler settings, kept); 0 moved to quarantine")
    assert len(entries(tmp_path)) == 4


def test_cache_list_into_a_closed_pipe_is_quiet(tmp_path):
    # Enough entries that the listing outgrows the pipe's buffer, so the
    # writer meets the closed pipe of `list | head -1`.
    for i in range(3000):
        key = f"{i:032x}"
        shard = tmp_path / "v1" / key[:2] / key[2:4]
        shard.mkdir(parents=True, exist_ok=True)
        (shard / f"{key}.neff").write_bytes(b"x")
    listing = subprocess.run(
        f"{sys.executable} -m torch_neuron.cache list | head -1", shell=True, env=env_for(tmp_path),
        capture_output=True, text=True, timeout=120)
    assert listing.stderr == ""
    assert len(listing.stdout.splitlines()) == 1
