"""The shape registry (torch_neuron.registry): recording, the file format,
merging, sampling, and the replay that compares neuron against the CPU."""

import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_neuron
from torch_neuron import registry
from torch_neuron.registry import store
from torch_neuron.registry.__main__ import stratified_sample
from torch_neuron.registry.replay import PASS, UNREPLAYABLE, build_call, replay

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code, env_extra=None, args=()):
    env = {k: v for k, v in os.environ.items() if k != "TORCH_NEURON_SHAPE_REGISTRY"}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args] if args else [sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def _cli(*args, env_extra=None):
    return _run(None, env_extra, ("-m", "torch_neuron.registry", *args))


KNOWN_SCRIPT = textwrap.dedent("""
    import torch, torch_neuron
    x = torch.arange(6.0).reshape(2, 3).to("neuron")
    for _ in range(3):
        y = x * 2.5 + x
    z = torch.relu(y).sum(dim=1)
    torch.nonzero(x)
    print(z.cpu().tolist())
""")

# Every op the script asks the device for, with its count: the multiplication
# and addition three times, a CPU-fallback nonzero (marked), and the sum.
EXPECTED = {
    ("aten::mul.Tensor", '[{"tensor":"float32","shape":[2,3]},'
                         '{"tensor":"float64","shape":[],"cpu":true,"value":2.5,"wrapped":true}]', ""): 3,
    ("aten::add.Tensor", '[{"tensor":"float32","shape":[2,3]},{"tensor":"float32","shape":[2,3]},1]', ""): 3,
    ("aten::relu", '[{"tensor":"float32","shape":[2,3]}]', ""): 1,
    ("aten::sum.dim_IntList", '[{"tensor":"float32","shape":[2,3]},[1],false,null]', ""): 1,
    ("aten::nonzero", '[{"tensor":"float32","shape":[2,3]}]', "its output shape depends on the data"): 1,
}


def _by_signature(path):
    return {(s.op, s.args, s.fallback): s for s in store.load(path)}


def test_recording_a_known_script_gives_its_exact_signatures_and_counts(tmp_path):
    db = str(tmp_path / "r.db")
    r = _run(KNOWN_SCRIPT, {"TORCH_NEURON_SHAPE_REGISTRY": db, "TORCH_NEURON_REGISTRY_TAG": "known"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[10.5, 42.0]"
    got = _by_signature(db)
    # The transfer of x to the device is a copy, not an op; empty() is its buffer.
    got = {k: s for k, s in got.items() if k[0] != "aten::empty.memory_format"}
    assert {k: s.count for k, s in got.items()} == EXPECTED
    assert all(s.counts == {"known": s.count} for s in got.values())


def test_the_default_tag_is_the_script_name(tmp_path):
    script = tmp_path / "train_tiny.py"
    script.write_text("import torch, torch_neuron\nprint((torch.ones(2, device='neuron') * 3).cpu())\n")
    db = str(tmp_path / "r.db")
    r = _run(None, {"TORCH_NEURON_SHAPE_REGISTRY": db}, (str(script),))
    assert r.returncode == 0, r.stderr
    tags = {t for s in store.load(db) for t in s.counts}
    assert tags == {"train_tiny.py"}


def test_flush_writes_in_process_and_recording_off_records_nothing(tmp_path):
    db = str(tmp_path / "r.db")
    x = torch.ones(4, device="neuron")
    registry.start(db, tag="in-process")
    try:
        (x * 3).cpu()
        (x * 3).cpu()
        assert registry.flush() >= 1
        rows = _by_signature(db)
        mul = [s for k, s in rows.items() if k[0] == "aten::mul.Tensor"]
        assert [s.counts for s in mul] == [{"in-process": 2}]
    finally:
        registry.stop()
    assert not registry.recording()
    (x * 4).cpu()
    assert torch_neuron._C._registry_size() == 0
    assert len(store.load(db)) == len(rows)


def test_a_failed_flush_keeps_the_records_for_the_next(tmp_path):
    bad = tmp_path / "not_a_db"
    bad.write_bytes(b"this is not sqlite" * 100)
    good = str(tmp_path / "r.db")
    registry.start(good, tag="retry")
    try:
        (torch.ones(3, device="neuron") - 1).cpu()
        with pytest.raises(registry.RegistryError, match="not a torch_neuron shape registry"):
            registry.flush(str(bad))
        assert registry.flush() >= 1
    finally:
        registry.stop()
    assert any(s.op == "aten::sub.Tensor" for s in store.load(good))


def test_merge_is_a_union_with_summed_counts_and_tags_kept(tmp_path):
    a, b, out = (str(tmp_path / n) for n in ("a.db", "b.db", "out.db"))
    store.add(a, [("m1", "aten::relu", "[1]", "", 2), ("m1", "aten::abs", "[2]", "", 1)])
    store.add(b, [("m1", "aten::relu", "[1]", "", 5), ("m2", "aten::relu", "[1]", "", 1),
                  ("m2", "aten::neg", "[3]", "", 4)])
    r = _cli("merge", a, b, "-o", out)
    assert r.returncode == 0, r.stderr
    got = {(s.op, s.args): s.counts for s in store.load(out)}
    assert got == {("aten::relu", "[1]"): {"m1": 7, "m2": 1}, ("aten::abs", "[2]"): {"m1": 1},
                   ("aten::neg", "[3]"): {"m2": 4}}
    again = _cli("merge", a, b, "-o", out)
    assert again.returncode == 2 and "exists" in again.stderr


_WRITER = textwrap.dedent("""
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("store", sys.argv[1])
    store = importlib.util.module_from_spec(spec)
    sys.modules["store"] = store  # (dataclasses look their module up)
    spec.loader.exec_module(store)
    me = int(sys.argv[3])
    for batch in range(20):
        records = [("shared", "aten::relu", f"[{i}]", "", 1) for i in range(25)]
        records += [(f"w{me}", f"aten::op{me}", f"[{batch}, {i}]", "", 1) for i in range(25)]
        store.add(sys.argv[2], records)
""")


def test_eight_concurrent_writers_into_one_file_lose_nothing(tmp_path):
    db = str(tmp_path / "shared.db")
    writer = tmp_path / "writer.py"
    writer.write_text(_WRITER)
    procs = [subprocess.Popen([sys.executable, str(writer), store.__file__, db, str(i)],
                              stderr=subprocess.PIPE, text=True) for i in range(8)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    sigs = store.load(db)
    shared = [s for s in sigs if s.op == "aten::relu"]
    assert len(shared) == 25 and all(s.counts == {"shared": 8 * 20} for s in shared)
    for i in range(8):
        own = [s for s in sigs if s.op == f"aten::op{i}"]
        assert len(own) == 20 * 25 and all(s.counts == {f"w{i}": 1} for s in own)


def test_a_corrupt_or_foreign_file_raises_a_clear_error(tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(os.urandom(4096))
    with pytest.raises(store.RegistryError, match="garbage.db: not a torch_neuron shape registry"):
        store.load(str(garbage))
    foreign = str(tmp_path / "foreign.db")
    with sqlite3.connect(foreign) as c:
        c.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(store.RegistryError, match=r"not a torch_neuron shape registry \(its tables: users\)"):
        store.load(foreign)
    with pytest.raises(store.RegistryError, match="not a torch_neuron shape registry"):
        store.add(foreign, [("t", "aten::relu", "[]", "", 1)])
    newer = str(tmp_path / "newer.db")
    store.add(newer, [("t", "aten::relu", "[]", "", 1)])
    with sqlite3.connect(newer) as c:
        c.execute("UPDATE registry_meta SET value = '99' WHERE key = 'version'")
    with pytest.raises(store.RegistryError, match="format version 99 is newer"):
        store.load(newer)
    with pytest.raises(store.RegistryError, match="no such shape registry file"):
        store.load(str(tmp_path / "missing.db"))
    r = _cli("stats", str(garbage))
    assert r.returncode == 2 and "not a torch_neuron shape registry" in r.stderr and "Traceback" not in r.stderr


def test_recording_into_a_corrupt_file_warns_at_exit_and_does_not_crash(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"\x00garbage" * 512)
    r = _run("import torch, torch_neuron\nprint((torch.ones(2, device='neuron') + 1).cpu().tolist())",
             {"TORCH_NEURON_SHAPE_REGISTRY": str(bad)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2.0, 2.0]"
    assert "could not write the shape registry" in r.stderr and "not a torch_neuron shape registry" in r.stderr
    assert "Traceback" not in r.stderr


def test_stats_counts_signatures_operators_tags_and_fallback(tmp_path):
    db = str(tmp_path / "r.db")
    store.add(db, [("a", "aten::relu", "[1]", "", 3), ("b", "aten::relu", "[2]", "", 1),
                   ("a", "aten::nonzero", "[1]", "data-dependent", 4)])
    out = tmp_path / "stats.json"
    r = _cli("stats", db, "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "3 signatures (3 without scalar values) over 2 operators, 8 calls, 2 tags" in r.stdout
    assert "CPU fallback: 1 signatures (33.3%), 4 calls (50.0%)" in r.stdout
    figures = json.loads(out.read_text())
    assert figures["per_op"] == {"aten::relu": 2, "aten::nonzero": 1}
    assert figures["per_tag"] == {"a": 7, "b": 1}


def test_sample_keeps_every_operator_and_thins_the_big_ones():
    sigs = [store.Signature("aten::big", f"[{i}]", counts={"t": 1}) for i in range(100)]
    sigs += [store.Signature(f"aten::small{k}", f"[{i}]", counts={"t": 1}) for k in range(5) for i in range(2)]
    chosen = stratified_sample(sigs, 30, seed=1)
    assert len(chosen) == 30
    per_op = {}
    for s in chosen:
        per_op[s.op] = per_op.get(s.op, 0) + 1
    assert per_op == {"aten::big": 20, **{f"aten::small{k}": 2 for k in range(5)}}
    assert [s.key for s in stratified_sample(sigs, 30, seed=1)] == [s.key for s in chosen]
    assert [s.key for s in stratified_sample(sigs, 30, seed=2)] != [s.key for s in chosen]
    # Fewer than one per operator asked: one per operator all the same.
    assert len({s.op for s in stratified_sample(sigs, 3, seed=0)}) == 6


def _sig(op, args):
    return store.Signature(op, json.dumps(args), counts={"t": 1})


T = lambda dtype, shape: {"tensor": dtype, "shape": shape}  # noqa: E731


def test_generated_index_arguments_lie_in_the_range_they_index():
    emb = build_call(_sig("aten::embedding", [T("float32", [7, 4]), T("int64", [50]), -1, False, False]), 0)
    assert int(emb.values[1].min()) >= 0 and int(emb.values[1].max()) < 7
    gather = build_call(_sig("aten::gather", [T("float32", [3, 5]), 1, T("int64", [3, 40]), False]), 0)
    assert int(gather.values[2].min()) >= 0 and int(gather.values[2].max()) < 5
    nll = build_call(_sig("aten::nll_loss_forward", [T("float32", [8, 6]), T("int64", [8]), None, 1, -100]), 0)
    assert int(nll.values[1].min()) >= 0 and int(nll.values[1].max()) < 6
    idx = build_call(_sig("aten::index.Tensor", [T("float32", [4, 9]), {"tensors": [None, T("int64", [30])]}]), 0)
    assert int(idx.values[1][1].max()) < 9
    chol = build_call(_sig("aten::linalg_cholesky_ex", [T("float32", [5, 5]), False, False]), 0)
    assert bool((torch.linalg.eigvalsh(chol.values[0].double()) > 0).all())
    bern = build_call(_sig("aten::bernoulli.p", [T("float32", [64]), 0.5, None]), 0)
    assert bool(((bern.values[0] >= 0) & (bern.values[0] <= 1)).all())


def test_generated_inputs_satisfy_what_the_cpu_kernels_check_or_would_crash_on():
    # index_copy's own rule (the view family's stem once took it for index): in range, distinct.
    ic = build_call(_sig("aten::index_copy", [T("float32", [6, 3]), 0, T("int64", [6]), T("float32", [6, 3])]), 0)
    assert sorted(ic.values[2].tolist()) == list(range(6))
    # Pivots made by the factoring op: the CPU kernels check them (lu) or read memory by them (ldl).
    lu = build_call(_sig("aten::linalg_lu_solve", [T("float32", [4, 4]), T("int32", [4]), T("float32", [4, 2]),
                                                   True, False]), 0)
    torch.linalg.lu_solve(lu.values[0], lu.values[1], lu.values[2])
    ldl = build_call(_sig("aten::linalg_ldl_solve", [T("float64", [5, 5]), T("int32", [5]), T("float64", [5, 2]),
                                                     False]), 0)
    torch.linalg.ldl_solve(ldl.values[0], ldl.values[1], ldl.values[2])
    # Pooling backward indices within the input's plane (the CPU kernel writes where they point).
    pool = build_call(_sig("aten::adaptive_max_pool2d_backward",
                           [T("float32", [2, 3, 2, 2]), T("float32", [2, 3, 4, 5]), T("int64", [2, 3, 2, 2])]), 0)
    assert 0 <= int(pool.values[2].min()) and int(pool.values[2].max()) < 20
    # Segment lengths cut the data exactly; repeats sum to the output size given.
    seg = build_call(_sig("aten::segment_reduce", [T("float32", [9]), "sum", T("int64", [4]), None, None, 0, False,
                                                   None]), 0)
    assert int(seg.values[2].min()) >= 0 and int(seg.values[2].sum()) == 9
    rep = build_call(_sig("aten::repeat_interleave.Tensor", [T("int64", [4]), 6]), 0)
    assert int(rep.values[0].min()) >= 0 and int(rep.values[0].sum()) == 6


def test_a_signature_that_cannot_be_rebuilt_is_unreplayable_with_its_reason():
    out = replay(_sig("aten::relu", [{"unsupported": "Stream"}]))
    assert (out.status, out.cause) == (UNREPLAYABLE, "an argument of kind Stream was recorded without its value")
    out = replay(_sig("aten::no_such_op_here", [T("float32", [2])]))
    assert out.status == UNREPLAYABLE and "not an operator of this torch build" in out.detail
    # Inputs the CPU itself refuses (a shape the op rejects) are not neuron's fault.
    out = replay(_sig("aten::mm", [T("float32", [2, 3]), T("float32", [4, 5])]))
    assert (out.status, out.cause) == (UNREPLAYABLE, "the CPU refuses the generated inputs")


def test_replay_passes_ops_that_match_and_checks_written_arguments():
    assert replay(_sig("aten::add_.Tensor", [T("float32", [3, 4]), T("float32", [3, 4]), 2])).status == PASS
    assert replay(_sig("aten::embedding_dense_backward",
                       [T("float32", [10, 4]), T("int64", [10]), 6, -1, False])).status == PASS
    assert replay(_sig("aten::bernoulli.p", [T("float32", [64]), 0.3, {"generator": True}])).status == PASS


def test_a_deliberately_broken_lowering_is_reported_as_a_mismatch_naming_op_and_signature(tmp_path):
    db = str(tmp_path / "r.db")
    mul = '[{"tensor":"float32","shape":[4,8]},{"tensor":"float32","shape":[4,8]}]'
    add = '[{"tensor":"float32","shape":[4,8]},{"tensor":"float32","shape":[4,8]},1]'
    store.add(db, [("t", "aten::mul.Tensor", mul, "", 1), ("t", "aten::add.Tensor", add, "", 1)])
    key = store.Signature("aten::mul.Tensor", mul).key
    healthy = _cli("run", db, "--jobs", "1", "--quiet")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "2 pass, 0 mismatch" in healthy.stdout
    broken = _cli("run", db, "--jobs", "1", "--quiet", env_extra={"TORCH_NEURON_TEST_FAULT_OP": "aten::mul.Tensor"})
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "1 pass, 1 mismatch" in broken.stdout
    assert "aten::mul.Tensor: values differ (1 signature)" in broken.stdout
    assert mul in broken.stdout
    assert f"replay: python -m torch_neuron.registry run {db} --signature {key} --opt-level 0" in broken.stdout


def test_a_forked_child_does_not_write_its_parents_records_again(tmp_path):
    db = str(tmp_path / "r.db")
    code = textwrap.dedent("""
        import os, sys, torch, torch_neuron
        x = torch.ones(3, device="neuron")
        (x * 7).cpu()
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # a normal exit: atexit handlers run in the child
        os.waitpid(pid, 0)
    """)
    r = _run(code, {"TORCH_NEURON_SHAPE_REGISTRY": db, "TORCH_NEURON_REGISTRY_TAG": "fork"})
    assert r.returncode == 0, r.stderr
    mul = [s for s in store.load(db) if s.op == "aten::mul.Tensor"]
    assert [s.counts for s in mul] == [{"fork": 1}]


def test_a_gzip_compressed_registry_reads_like_the_file_and_refuses_writes(tmp_path):
    import gzip
    import shutil

    db = str(tmp_path / "r.db")
    store.add(db, [("t", "aten::relu", "[1]", "", 3)])
    with open(db, "rb") as src, gzip.open(db + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert [(s.op, s.counts) for s in store.load(db + ".gz")] == [("aten::relu", {"t": 3})]
    with pytest.raises(store.RegistryError, match="compressed registry is read-only"):
        store.add(db + ".gz", [("t", "aten::abs", "[1]", "", 1)])
    broken = tmp_path / "broken.db.gz"
    broken.write_bytes(b"\x1f\x8b" + os.urandom(100))
    with pytest.raises(store.RegistryError, match="broken.db.gz: not a readable gzip file"):
        store.load(str(broken))
