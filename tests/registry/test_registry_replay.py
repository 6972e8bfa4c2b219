"""Generated unit tests: every signature of the committed shape registry
(tests/registry/registry.db.gz, recorded from the model zoo and the training
workloads; see tests/registry/README.md) replayed on neuron and on the CPU.

`make test` runs a fixed stratified sample (every operator, big ones thinned,
TORCH_NEURON_REGISTRY_SAMPLE signatures, default 1500); `make registry-test`
runs all of them (TORCH_NEURON_REGISTRY_SAMPLE=0). The replays run in worker
processes (torch_neuron.registry's runner), so a crash is one failing test.
Each failure prints the command that replays its signature alone.
"""

import os
import shutil
import tempfile

import pytest

from torch_neuron.registry import load
from torch_neuron.registry.__main__ import replay_all, replay_command, stratified_sample

HERE = os.path.dirname(os.path.abspath(__file__))
REGISTRY = os.path.join(HERE, "registry.db.gz")
SAMPLE = int(os.environ.get("TORCH_NEURON_REGISTRY_SAMPLE", "1500"))
OPT_LEVEL = int(os.environ.get("TORCH_NEURON_REGISTRY_OPT_LEVEL", "0"))
SEED = 0

# Signatures the replay cannot rebuild into a valid call, by operator: the
# reason the replay gives must contain the text here. Anything else that comes
# out unreplayable fails (the input generator lost ground). Most were recorded
# from PyTorch's tests of an op's error checks (the recorded call itself raises
# on the CPU), the rest need state only the forward op makes.
_CPU_REFUSES = "the CPU refuses the generated inputs"
KNOWN_UNREPLAYABLE = {
    "aten::_embedding_bag_backward": "state only its forward op makes",
    "aten::_embedding_bag_dense_backward": "state only its forward op makes",
    "aten::_embedding_bag_per_sample_weights_backward": "state only its forward op makes",
    "aten::_embedding_bag_forward_only": _CPU_REFUSES,  # 5-d indices: test_embedding's error check
    "aten::as_strided_scatter": _CPU_REFUSES,  # overlapping written memory: an error check
    "aten::complex": _CPU_REFUSES,  # float32 with float64 parts: an error check
    "aten::index.Tensor": "an index into an empty dim",  # an index of size 2 into a dim of size 0
    "aten::index_put": _CPU_REFUSES,
    "aten::select_copy.int": "the arguments cannot be rebuilt",  # a 34 GB tensor (a large-size test)
}

# Ops neuron refuses on purpose, with this error (docs/SUPPORT.md).
EXPECTED_ERRORS = {
    "aten::quantize_per_tensor": "neuron devices do not support dtype QUInt8",  # no quantized dtypes
}

# Real failures found by the replay and not fixed yet: operator -> why.
KNOWN_FAILURES: dict = {}

_ALL = load(REGISTRY)
SIGNATURES = _ALL if SAMPLE <= 0 else stratified_sample(_ALL, SAMPLE, SEED)


@pytest.fixture(scope="module")
def results():
    cache = tempfile.mkdtemp(prefix="torch_neuron_registry_cache_")
    env = dict(os.environ, TORCH_NEURON_CACHE_DIR=cache)
    env.pop("TORCH_NEURON_SHAPE_REGISTRY", None)
    try:
        found = replay_all(REGISTRY, SIGNATURES, OPT_LEVEL, jobs=2, seed=SEED, timeout=300, progress=None, env=env)
        # A failure is replayed again alone, in a fresh process: one that passes
        # there failed only after other replays in the same process (order-dependent).
        for sig in SIGNATURES:
            if found[sig.key]["status"] in ("mismatch", "error", "crash", "timeout") and sig.op not in KNOWN_FAILURES \
                    and sig.op not in EXPECTED_ERRORS:
                alone = replay_all(REGISTRY, [sig], OPT_LEVEL, jobs=1, seed=SEED, timeout=300, progress=None, env=env)
                found[sig.key]["alone"] = alone[sig.key]["status"]
        yield found
    finally:
        shutil.rmtree(cache, ignore_errors=True)


@pytest.mark.parametrize("sig", SIGNATURES, ids=[f"{s.op}-{s.key}" for s in SIGNATURES])
def test_signature(sig, results):
    r = results[sig.key]
    where = (f"{sig.op} {sig.args}\n  {r['cause']}: {r['detail']}\n"
             f"  replay: {replay_command(os.path.relpath(REGISTRY), sig.key, OPT_LEVEL)}")
    if r["status"] == "unreplayable":
        known = KNOWN_UNREPLAYABLE.get(sig.op)
        assert known is not None and known in r["cause"] + r["detail"], f"unexpectedly unreplayable: {where}"
        return
    if sig.op in EXPECTED_ERRORS:
        assert r["status"] == "error" and EXPECTED_ERRORS[sig.op] in r["detail"], where
        return
    if r["status"] != "pass" and r.get("alone") == "pass":
        pytest.xfail(f"order-dependent: passes alone, failed after other replays in one process: {where}")
    if sig.op in KNOWN_FAILURES and r["status"] != "pass":
        pytest.xfail(f"{KNOWN_FAILURES[sig.op]}: {where}")
    assert r["status"] == "pass", where
