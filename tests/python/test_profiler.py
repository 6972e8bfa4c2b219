"""torch_neuron.profiler.trace writes a Chrome trace with the Python thread's
traced ops (and their source lines), the compile workers' compiles and the
device queue's executions; torch.profiler sees the same events."""

import inspect
import json

import pytest
import torch

import torch_neuron


def step(x, w):
    return ((x @ w).relu() * 2 + 1).sum()


def test_the_trace_has_the_three_kinds_of_tracks_and_names_the_users_line(tmp_path):
    torch_neuron._C._clear_compile_cache()
    path = tmp_path / "step.json"
    x = torch.randn(4, 8).to("neuron")
    w = torch.randn(8, 3).to("neuron")
    line = inspect.getsourcelines(step)[1] + 1  # the body of step()
    with torch_neuron.profiler.trace(path):
        with torch_neuron.mode("eager"):
            for _ in range(3):
                step(x, w).item()
                torch_neuron._C._eager_wait_compiles()
        loss = step(x, w)  # and a lazy graph
        torch_neuron.mark_step()
    assert loss.item() == pytest.approx(step(x.cpu(), w.cpu()).item(), rel=1e-5)
    document = json.loads(path.read_text())
    events = document["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    by_track = {}
    for e in events:
        if e["ph"] == "X":
            by_track.setdefault(names[e["tid"]], []).append(e)
    assert "python" in by_track
    assert any(t.startswith("compile worker") for t in by_track)
    assert "neuron:0 queue" in by_track
    traced = by_track["python"]
    assert {e["cat"] for e in traced} >= {"trace", "compile"}  # per-op compiles run on this thread
    where = f"{__file__}:{line}"
    assert any(e["name"] == "aten::mm" and e["args"]["source"] == where for e in traced if e["cat"] == "trace")
    worker = [e for t, es in by_track.items() if t.startswith("compile worker") for e in es]
    assert any(e["name"].startswith("group ") for e in worker)
    queue = by_track["neuron:0 queue"]
    assert any(e["cat"] == "execute" for e in queue)
    # Instructions inside executions name the op and its line.
    assert any(e["cat"] == "instruction" and e["name"] == "aten::mm" and e.get("args", {}).get("source") == where
               for e in queue)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events if e["ph"] == "X")
    assert document["otherData"]["dropped_events"] == 0


def test_traces_do_not_nest(tmp_path):
    with torch_neuron.profiler.trace(tmp_path / "a.json"):
        with pytest.raises(RuntimeError, match="already recording"):
            with torch_neuron.profiler.trace(tmp_path / "b.json"):
                pass
    assert not (tmp_path / "b.json").exists()
    assert json.loads((tmp_path / "a.json").read_text())["traceEvents"] is not None


def test_torch_profiler_sees_the_devices_events():
    x = torch.randn(4, 8).to("neuron")
    w = torch.randn(8, 3).to("neuron")
    torch_neuron.mark_step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        loss = step(x, w)  # kept: a dead result has nothing to run
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
    keys = {e.key for e in prof.key_averages()}
    assert any(k.startswith("neuron::trace aten::mm") for k in keys), sorted(keys)[:20]
    assert any(k.startswith("neuron::execute graph") for k in keys), sorted(keys)
    assert any(k.startswith("neuron::instruction aten::mm") for k in keys), sorted(keys)
    assert loss.item() == pytest.approx(step(x.cpu(), w.cpu()).item(), rel=1e-5)
