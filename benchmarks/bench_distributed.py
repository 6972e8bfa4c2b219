"""DDP step time on the neuron backend against gloo DDP on CPU tensors, for 1, 2
and 4 ranks (weak scaling: each rank's batch is fixed).

    python benchmarks/bench_distributed.py [--quick] [--out DIR]

Peers: DDP of the small transformer (tests/python/models.py, dropout off) on
neuron tensors over the "neuron" backend (collectives traced into the step's
graph), and the same DDP on CPU tensors over gloo.

Each configuration starts its ranks as real processes on loopback; the two
backends alternate launch by launch, for each rank count. Every rank trains
warm-up steps, then alternates a normal step and a step whose backward runs
under DDP's no_sync() (no gradient all-reduce), each waited for (neuron:
mark_step, then the device's queue drains). The figure per configuration is
the median over ranks of each rank's median step time; the collective's share
is 1 - (no_sync step / step). Each process uses cores / ranks threads (at least
one): with more ranks than cores both peers are oversubscribed alike.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from common import bench_parser, doc_description, fmt, print_table, table, write_results  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(backend: str, rank: int, world: int, port: int, steps: int, out: str) -> None:
    """One rank: warm-up steps, then `steps` pairs of (step, no_sync step)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "python"))
    from models import TinyDecoder

    neuron = backend == "neuron"
    if neuron:
        import torch_neuron
    device = "neuron" if neuron else "cpu"
    dist.init_process_group("neuron" if neuron else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(TinyDecoder(p=0.0).to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, 32, (8, 16), generator=g).to(device)

    def step(sync: bool) -> float:
        start = time.perf_counter()
        opt.zero_grad()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        if sync:
            loss.backward()
        else:
            with model.no_sync():
                loss.backward()
        opt.step()
        if neuron:
            torch_neuron.mark_step()
            torch_neuron.wait_device_ops()
        return time.perf_counter() - start

    for _ in range(4):  # compiles, bucket rebuild, optimizer state
        step(True)
        step(False)
    synced, local = [], []
    for _ in range(steps):
        synced.append(step(True))
        local.append(step(False))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"step": synced, "no_sync": local}, f)
    dist.destroy_process_group()


def launch(backend: str, world: int, steps: int) -> dict:
    out = tempfile.mkdtemp(prefix=f"bench_dist_{backend}_")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NEURON_")}
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["TORCH_NEURON_CACHE_DIR"] = os.path.join(out, "cache")
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", backend, str(r), str(world), str(port),
                               str(steps), out], env=env, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    for p in procs:
        _, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"{backend} rank failed ({world} ranks):\n{err[-3000:]}")
    ranks = []
    for r in range(world):
        with open(os.path.join(out, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
    step = statistics.median(statistics.median(r["step"]) for r in ranks)
    local = statistics.median(statistics.median(r["no_sync"]) for r in ranks)
    return {"step_s": step, "no_sync_s": local, "collective_share": max(0.0, 1 - local / step)}


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        backend, rank, world, port, steps, out = sys.argv[2:8]
        worker(backend, int(rank), int(world), int(port), int(steps), out)
        return 0
    args = bench_parser(__doc__).parse_args(argv)
    worlds = [1, 2] if args.quick else [1, 2, 4]
    steps = 3 if args.quick else 20
    results = {}
    for world in worlds:
        for backend in ("neuron", "gloo_cpu"):
            print(f"  {backend}, {world} rank(s) ...", flush=True)
            results[f"{backend}/{world}"] = launch("neuron" if backend == "neuron" else "gloo", world, steps)
    rows = []
    for world in worlds:
        n, c = results[f"neuron/{world}"], results[f"gloo_cpu/{world}"]
        rows.append([world, fmt(n["step_s"] * 1e3), fmt(c["step_s"] * 1e3), fmt(c["step_s"] / n["step_s"]),
                     f"{n['collective_share']:.0%}", f"{c['collective_share']:.0%}"])
    header = ["ranks", "neuron step (ms)", "gloo CPU step (ms)", "speed, neuron / CPU",
              "collective share, neuron", "collective share, CPU"]
    top = worlds[-1]
    headline = {
        "DDP": (f"DDP transformer step, {top} ranks: neuron {fmt(results[f'neuron/{top}']['step_s'] * 1e3)} ms, "
                f"gloo on CPU tensors {fmt(results[f'gloo_cpu/{top}']['step_s'] * 1e3)} ms per rank"),
    }
    path = write_results("distributed", {
        "quick": args.quick, "results": results,
        "command": "python benchmarks/bench_distributed.py",
        "title": "Data-parallel training: DDP on the neuron backend against gloo on CPU tensors",
        "description": doc_description(__doc__),
        "tables": [table("DDP step per rank (medians; weak scaling, batch 8 per rank)", header, rows)],
        "plots": [{
            "name": "distributed_step", "title": "DDP step per rank (ms)", "kind": "line", "xlabel": "ranks",
            "ylabel": "ms", "logx": False, "logy": False, "x": worlds,
            "series": {"neuron": [results[f"neuron/{w}"]["step_s"] * 1e3 for w in worlds],
                       "gloo CPU": [results[f"gloo_cpu/{w}"]["step_s"] * 1e3 for w in worlds]},
        }],
        "headline": headline,
    }, args.out)
    print_table("DDP step per rank", header, rows)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
