"""The neuron c10d backend, with real processes on loopback: every collective
against the same collective on CPU tensors over gloo, DDP training against
single-process training on the full batch (with exact graph counts), a dead
peer, and torchrun."""

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from child_process import REPO_ROOT, child_env
import distributed_worker

WORKER = Path(__file__).resolve().parent / "distributed_worker.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(scenario, world, *args, timeout=240, env=None):
    """Starts one process per rank and waits for all; returns their outputs
    (rank -> what the worker saved) and the processes' results."""
    port = free_port()
    out_dir = tempfile.mkdtemp(prefix="neuron_dist_")
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), scenario, str(r), str(world), str(port), out_dir,
                          *map(str, args)],
                         env=child_env(env), cwd=str(REPO_ROOT), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
        for r in range(world)
    ]
    results = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    outputs = {}
    for r in range(world):
        path = os.path.join(out_dir, f"rank{r}.pt")
        if os.path.exists(path):
            outputs[r] = torch.load(path, weights_only=False)
    return outputs, results


def check_ok(results):
    for r, res in enumerate(results):
        assert res.returncode == 0, f"rank {r} failed:\n{res.stderr[-4000:]}"


@pytest.mark.parametrize("world", [2, 4])
def test_every_collective_equals_gloo_on_cpu_tensors(world):
    outputs, results = run_ranks("collectives", world)
    check_ok(results)
    for rank, out in outputs.items():
        assert out["backend"] == "cpu:gloo,neuron:neuron"
        names = set(out["pairs"])
        expected = {"all_reduce RedOpType.SUM", "all_reduce RedOpType.PRODUCT", "all_reduce RedOpType.MIN",
                    "all_reduce RedOpType.MAX", "all_reduce RedOpType.BAND", "all_reduce RedOpType.BOR",
                    "all_reduce RedOpType.BXOR", "all_reduce avg", "all_reduce transposed view",
                    "all_reduce slice writes its base", "async wait", "all_reduce async", "broadcast",
                    "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
                    "all_to_all_single", "all_to_all_single uneven", "all_to_all", "scatter",
                    "send/recv", "cpu tensors on the neuron group"}
        if rank == 0:
            expected |= {"reduce", "gather"}
        assert names == expected
        for name, (neuron, cpu) in out["pairs"].items():
            assert len(neuron) == len(cpu), name
            for n, c in zip(neuron, cpu):
                assert n.dtype == c.dtype and n.shape == c.shape, name
                torch.testing.assert_close(n, c, rtol=0, atol=0, msg=lambda m: f"{name}: {m}")
        # Nothing ran before mark_step: every collective was traced into its graph.
        assert out["executions_before_mark_step"] == 0
        assert out["compiles_at_mark_step"] >= 1
        errors = out["errors"]
        assert errors["mixed devices"].startswith("ValueError: all_gather: the neuron backend takes "
                                                  "neuron or CPU tensors, not a mix")
        assert errors["avg of ints"] == "ValueError: ReduceOp.AVG needs a floating-point tensor, got torch.int64"
        assert errors["band of floats"] == ("ValueError: ReduceOp.BAND needs an integer or bool tensor, "
                                            "got torch.float32")
        assert errors["wrong output size"] == ("ValueError: all_gather_into_tensor: the output holds 5 "
                                               "elements, expected " + f"{world} x 2")


def reference_training(kind, steps, world, no_sync=False):
    """The same training in one process, on the CPU, on the full batch."""
    model = distributed_worker.make_model(kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        loss = distributed_worker.loss_of(kind, model, step, 8 * world, "cpu")
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return model.state_dict(), losses


# Graphs per step, (compiles, executions), the same on every rank. Step 1
# compiles the step; step 2 is DDP's bucket rebuild (its broadcast of the
# bucket order is read back, a graph of its own) and SGD's momentum buffers,
# created in step 1 and read from step 2; from then on one cached graph a step.
DDP_GRAPHS = {
    ("mlp", False): [(1, 1), (3, 3), (1, 1)] + [(0, 1)] * 7,
    ("transformer", False): [(1, 1), (3, 3), (1, 1)] + [(0, 1)] * 7,
}


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_ddp_training_equals_single_process_on_the_full_batch(kind):
    steps, world = 10, 2
    outputs, results = run_ranks("ddp", world, kind, steps, 0)
    check_ok(results)
    ref_params, ref_losses = reference_training(kind, steps, world)
    for rank, out in outputs.items():
        for name, value in ref_params.items():
            torch.testing.assert_close(out["params"][name], value, rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"rank {rank}, {name}: {m}")
        assert out["per_step"] == DDP_GRAPHS[(kind, False)], f"rank {rank}"
    # Every rank traces the same step graph (collectives name their group the
    # same way in every process), so ranks and reruns share compiled graphs.
    assert outputs[0]["last_step_hash"] == outputs[1]["last_step_hash"]
    # Each rank's loss is its half of the batch; their mean is the full batch's.
    mean_loss = (outputs[0]["losses"] + outputs[1]["losses"]) / 2
    torch.testing.assert_close(mean_loss, torch.stack(ref_losses), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["unused", "static", "zero", "compiled"])
def test_ddp_find_unused_parameters_static_graph_zero_and_torch_compile_equal_gloo(mode):
    outputs, results = run_ranks("ddp_options", 2, mode)
    check_ok(results)
    for rank, out in outputs.items():
        for name, value in out["cpu"].items():
            torch.testing.assert_close(out["neuron"][name], value, rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"rank {rank}, {name}: {m}")


def test_functional_collectives_and_dtensor_redistribution_equal_gloo():
    outputs, results = run_ranks("functional_collectives", 2)
    check_ok(results)
    for rank, out in outputs.items():
        assert len(out) == 11
        for name, (neuron, cpu) in out.items():
            torch.testing.assert_close(neuron, cpu, rtol=0, atol=0, msg=lambda m: f"rank {rank}, {name}: {m}")


def test_fsdp2_training_equals_single_process_on_the_full_batch():
    # FSDP2 shards every parameter over the ranks (DTensors), all-gathers them
    # per unit before use (fsdp:: custom ops, storage resize to 0 and back),
    # and reduce-scatters gradients: all traced into each step's graphs.
    steps, world = 6, 2
    outputs, results = run_ranks("fsdp2", world, steps, timeout=300)
    check_ok(results)
    ref_params, ref_losses = reference_training("transformer", steps, world)
    for rank, out in outputs.items():
        assert out["sharded"] == sorted(ref_params), f"rank {rank}: not every parameter sharded"
        for name, value in ref_params.items():
            torch.testing.assert_close(out["params"][name], value, rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"rank {rank}, {name}: {m}")
            # Each rank holds its own dim-0 shard, padded by FSDP if uneven.
            shard = value.chunk(world)[rank] if value.dim() else value
            torch.testing.assert_close(out["shards"][name][: shard.shape[0]], shard,
                                       rtol=1e-5, atol=1e-6)
    mean_loss = (outputs[0]["losses"] + outputs[1]["losses"]) / 2
    torch.testing.assert_close(mean_loss, torch.stack(ref_losses), rtol=1e-5, atol=1e-6)
    # Graphs per step (compiles, executions): step 1 compiles the step, step 2
    # again (SGD's momentum buffers exist from then on), then one cached graph.
    for rank, out in outputs.items():
        assert out["per_step"] == [(1, 1), (1, 1)] + [(0, 1)] * (steps - 2), f"rank {rank}"


def test_ddp_no_sync_accumulates_then_averages():
    steps, world = 4, 2
    outputs, results = run_ranks("ddp", world, "mlp", steps, 1)
    check_ok(results)
    ref_params, _ = reference_training("mlp", steps, world)
    for rank, out in outputs.items():
        for name, value in ref_params.items():
            torch.testing.assert_close(out["params"][name], value, rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"rank {rank}, {name}: {m}")
        # One graph a step once warm: the no_sync micro-batch runs no collective.
        assert out["per_step"][-1] == (0, 1)


@pytest.mark.parametrize("how", ["killed", "hung"])
def test_a_failed_rank_makes_the_others_fail_within_the_timeout(how):
    # killed: the peer's connection closes; hung: the peer lives on (10 s) but
    # never takes part, and gloo's timeout (4 s) ends the wait.
    outputs, results = run_ranks("killed_peer", 2, how, timeout=120)
    assert results[1].returncode == 3
    assert results[0].returncode == 0, results[0].stderr[-4000:]
    error = outputs[0]["error"]
    assert error is not None, "the collective with a dead peer did not fail"
    assert error.startswith("RuntimeError: neuron execution failed in neuron::all_reduce: the collective "
                            "failed (a peer process died, or did not take part before the process group's "
                            "timeout)"), error


def test_destroying_the_group_waits_for_its_queued_collectives():
    outputs, results = run_ranks("early_exit", 2, timeout=120)
    check_ok(results)
    torch.testing.assert_close(outputs[0]["sum"], torch.full((3,), 3.0))


def test_torchrun_gives_each_process_its_local_rank_device():
    out_dir = tempfile.mkdtemp(prefix="neuron_torchrun_")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(WORKER), "torchrun", out_dir]
    res = subprocess.run(torchrun, env=child_env({"TORCH_NEURON_NUM_DEVICES": "2"}), cwd=str(REPO_ROOT),
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-4000:]
    for rank in range(2):
        out = torch.load(os.path.join(out_dir, f"rank{rank}.pt"), weights_only=False)
        assert out["local_rank"] == rank
        assert out["device"] == rank and out["x_device"] == rank
        torch.testing.assert_close(out["sum"], torch.full((2,), 3.0))


def test_no_backend_named_picks_neuron_and_fake_tensors_and_dtensors_work():
    # FakeTensors of the neuron device wrap meta data; DTensor's sharding
    # propagation makes them for every op. Their ops used to reach the CPU
    # fallback, which copied meta "data" to the device: a segfault in
    # nn.Parameter(DTensor), i.e. in FSDP2's fully_shard.
    code = f"""
import torch, torch_neuron, torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    f = torch.empty(4, 3, device="neuron")
    g = (f.detach() * 2).sum(0)
    h = torch.nn.functional.linear(f, torch.empty(5, 3, device="neuron"))
print(type(g).__name__, g.device, tuple(g.shape), tuple(h.shape))
dist.init_process_group(init_method="tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)  # no backend named
x = torch.ones(2, device="neuron")
dist.all_reduce(x)
print(type(dist.group.WORLD).__name__, x.cpu().tolist())
from torch.distributed.tensor import distribute_tensor, init_device_mesh, Shard
mesh = init_device_mesh("neuron", (1,))
p = torch.nn.Parameter(distribute_tensor(torch.arange(6.).reshape(3, 2).to("neuron"), mesh, [Shard(0)]))
print(type(p.data).__name__, (p * 2).full_tensor().cpu().flatten().tolist())
print(torch._is_functional_tensor(p._local_tensor), p._local_tensor.untyped_storage().data_ptr() != 0)
dist.destroy_process_group()
"""
    from child_process import run_python
    res = run_python(code, timeout=120)
    assert res.returncode == 0, res.stderr[-4000:]
    assert res.stdout.splitlines() == ["FakeTensor neuron:0 (3,) (4, 5)",
                                       "NeuronProcessGroup [1.0, 1.0]",
                                       "DTensor [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]",
                                       "True True"]  # the local tensor is a functional one, as user tensors


def test_the_readme_torchrun_example_runs_as_written():
    import re
    readme = (REPO_ROOT / "README.md").read_text()
    script = re.search(r'```python title="train_ddp.py"\n(.*?)```', readme, re.S).group(1)
    command = re.search(r"```sh\n(TORCH_NEURON_NUM_DEVICES=2 torchrun --nproc_per_node=2 train_ddp.py)\n```",
                        readme).group(1)
    assert command  # the command the README gives is the one run here
    work = Path(tempfile.mkdtemp(prefix="neuron_readme_ddp_"))
    (work / "train_ddp.py").write_text(script)
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          "--master_addr=127.0.0.1", f"--master_port={free_port()}", "train_ddp.py"],
                         env=child_env({"TORCH_NEURON_NUM_DEVICES": "2"}), cwd=str(work),
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-4000:]
    lines = [line.split() for line in res.stdout.splitlines() if line.strip()]
    assert [int(step) for step, _ in lines] == [0, 5, 10, 15]
    assert all(0 < float(loss) < 2 for _, loss in lines)
