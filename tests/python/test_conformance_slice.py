"""A fixed, representative slice of the OpInfo conformance sweep, run by the
default test command: every check of these ops must end exactly as the committed
full sweep (tests/conformance/results.json, the source of docs/CONFORMANCE.md)
says. A pass that fails is a regression; a failure that passes means the sweep
and the report are stale (run `make conformance`)."""

import json
import os
import sys

import pytest

import torch_neuron

HERE = os.path.dirname(os.path.abspath(__file__))
CONFORMANCE = os.path.join(HERE, "..", "conformance")
sys.path.insert(0, CONFORMANCE)

import harness  # noqa: E402  (imports torch_neuron before torch.testing)
import report  # noqa: E402

# One or more ops of each family: elementwise (unary, binary, comparisons,
# where/clamp, casts), reductions, views and shape ops, indexing and scatter,
# factories, random ops, linear algebra, convolution and pooling, normalization,
# activations, losses, attention, data-dependent ops (CPU fallback), and ops that
# fail for a known reason (they must keep failing that way).
SLICE = [
    "abs", "sgn", "exp", "log1p", "sigmoid", "nn.functional.gelu", "nn.functional.silu", "erf",
    "add", "sub", "mul", "div.no_rounding_mode", "pow", "remainder", "maximum", "atan2",
    "eq", "lt", "logical_and", "bitwise_and", "where", "clamp", "lerp", "addcmul",
    "sum", "mean", "amax", "argmax", "var", "std", "prod", "cumsum", "logsumexp",
    "softmax", "log_softmax", "norm", "linalg.vector_norm",
    "view", "reshape", "permute", "transpose", "expand", "squeeze", "unsqueeze", "flatten",
    "cat", "stack", "split", "chunk", "narrow", "select", "roll", "flip", "tril", "repeat",
    "index_select", "gather", "scatter_add", "index_add", "index_put", "take_along_dim",
    "masked_fill", "select_scatter", "slice_scatter", "tensor_split",
    "zeros_like", "full", "arange", "linspace", "eye", "empty_like",
    "bernoulli", "nn.functional.dropout", "randn_like", "normal",
    "mm", "bmm", "matmul", "addmm", "baddbmm", "einsum", "linalg.solve", "linalg.cholesky",
    "nn.functional.linear", "nn.functional.conv2d", "nn.functional.conv_transpose2d",
    "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.batch_norm", "native_batch_norm", "nn.functional.layer_norm",
    "nn.functional.group_norm", "nn.functional.embedding", "nn.functional.one_hot",
    "nn.functional.cross_entropy", "nn.functional.nll_loss", "nn.functional.mse_loss",
    "nn.functional.binary_cross_entropy_with_logits",
    "nn.functional.scaled_dot_product_attention", "nn.functional.pad.constant", "nn.functional.interpolate.bilinear",
    "nonzero", "masked_select", "unique", "sort", "topk",
    "fft.fft", "to_sparse", "hash_tensor", "polygamma.polygamma_n_0",
]


def _committed():
    with open(report.RESULTS) as f:
        return {report.key(r): r for r in json.load(f)["results"]}


COMMITTED = _committed()
OPS = harness.ops_by_name()


@pytest.fixture(scope="module", autouse=True)
def _no_disk_cache():
    # Each sample is a new little graph: writing them all to the disk cache
    # (fsync per entry) would cost more than running them.
    with torch_neuron.config.override(TORCH_NEURON_CACHE="0"):
        yield


def test_slice_names_ops_of_op_db_and_of_the_committed_sweep():
    assert [n for n in SLICE if n not in OPS] == []
    swept = {r["op"] for r in COMMITTED.values()}
    assert [n for n in SLICE if n not in swept] == []
    assert len(set(SLICE)) == len(SLICE)


def test_committed_sweep_meets_the_conformance_thresholds():
    results = list(COMMITTED.values())
    fwd = [r for r in results if (r["dtype"], r["kind"]) == ("float32", "forward")
           and r["status"] != "skip"]
    bwd = [r for r in results if (r["dtype"], r["kind"]) == ("float32", "backward")
           and r["status"] != "skip"]
    assert sum(r["status"] == "pass" for r in fwd) >= 0.95 * len(fwd)
    assert sum(r["status"] == "pass" for r in bwd) >= 0.90 * len(bwd)
    fwd_ad = [r for r in results if (r["dtype"], r["kind"]) == ("float32", "forward_ad")
              and r["status"] != "skip"]
    assert sum(r["status"] == "pass" for r in fwd_ad) >= 0.95 * len(fwd_ad)
    # Every failure of the committed sweep is explained in known_failures.py.
    assert [r["op"] for r in results if report.outcome(r) == "fail"] == []


def test_report_is_generated_from_the_committed_sweep():
    with open(report.DOC) as f:
        assert f.read() == report.render(report.load()), "run `make conformance-report`"


@pytest.mark.parametrize("opt_level", ["0", "1"], ids=["O0", "O1"])
@pytest.mark.parametrize("name", SLICE)
def test_op_matches_committed_conformance(name, opt_level):
    # Both compiler tiers must end every check as the committed sweep did.
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL=opt_level):
        results = harness.run_op(OPS[name])
    for result in results:
        got = result.__dict__
        want = COMMITTED[result.key()]
        assert (got["status"], report.outcome(got)) == (want["status"], report.outcome(want)), (
            f"{result.key()}: now {got['status']} {got['error']!r}, "
            f"committed {want['status']} {want['error']!r}")
