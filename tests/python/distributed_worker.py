"""One rank of a multi-process test of the neuron c10d backend
(test_distributed.py starts one real process per rank, on loopback).

    python distributed_worker.py SCENARIO RANK WORLD PORT OUT_DIR

Each scenario writes what it measured to OUT_DIR/rank<R>.pt for the test to
compare; an exception exits non-zero with its traceback on stderr.
"""

import datetime
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch_neuron  # noqa: E402
from models import TinyDecoder, seeded_mlp  # noqa: E402

NEURON = "neuron"


def counters():
    c = torch_neuron.metrics.counters()
    return c.get("graph.compile.count", 0), c.get("graph.execute.count", 0)


def init(rank, world, port, backend="neuron", timeout_s=60):
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=timeout_s))


def collectives(rank, world, port):
    """Every collective on neuron tensors, and the same on CPU tensors over a
    plain gloo group as the reference. Results are read after one mark_step."""
    init(rank, world, port, "cpu:gloo,neuron:neuron")
    gloo = dist.new_group(backend="gloo")
    pairs = {}  # name -> (neuron tensors, cpu tensors)

    def both(make):
        """The same tensor on neuron and on the CPU."""
        cpu = make()
        return cpu.to(NEURON), cpu.clone()

    def base(dtype=torch.float32, n=6):
        return torch.arange(n, dtype=dtype).reshape(2, n // 2) * (rank + 1) + rank

    c0 = counters()
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX):
        n, c = both(base)
        dist.all_reduce(n, op=op)
        dist.all_reduce(c, op=op, group=gloo)
        pairs[f"all_reduce {op}"] = ([n], [c])
    for op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR):
        n, c = both(lambda: base(torch.int64))
        dist.all_reduce(n, op=op)
        dist.all_reduce(c, op=op, group=gloo)
        pairs[f"all_reduce {op}"] = ([n], [c])
    # gloo has no AVG: its reference is the sum over the ranks' count.
    n, c = both(base)
    dist.all_reduce(n, op=dist.ReduceOp.AVG)
    dist.all_reduce(c, group=gloo)
    pairs["all_reduce avg"] = ([n], [c / world])
    # Through views: a transposed view, and a slice that writes into its base.
    n, c = both(base)
    nt, ct = n.t(), c.t()
    dist.all_reduce(nt)
    dist.all_reduce(ct, group=gloo)
    pairs["all_reduce transposed view"] = ([n, nt], [c, ct])
    n, c = both(lambda: base(n=8))
    dist.all_reduce(n[:, 1:3])
    dist.all_reduce(c[:, 1:3].contiguous(), group=gloo)  # gloo wants it contiguous
    c2 = c.clone()
    gsum = c[:, 1:3].contiguous()
    dist.all_reduce(gsum, group=gloo)
    c2[:, 1:3] = gsum
    pairs["all_reduce slice writes its base"] = ([n], [c2])
    n, c = both(base)
    work = dist.all_reduce(n, async_op=True)
    pairs["async wait"] = ([torch.tensor([float(work.wait()), float(work.is_completed())])],
                           [torch.tensor([1.0, 1.0])])
    dist.all_reduce(c, group=gloo)
    pairs["all_reduce async"] = ([n], [c])

    n, c = both(base)
    dist.broadcast(n, src=1)
    dist.broadcast(c, src=1, group=gloo)
    pairs["broadcast"] = ([n], [c])

    n, c = both(base)
    n_out = [torch.zeros(2, 3, device=NEURON) for _ in range(world)]
    c_out = [torch.zeros(2, 3) for _ in range(world)]
    dist.all_gather(n_out, n)
    dist.all_gather(c_out, c, group=gloo)
    pairs["all_gather"] = (n_out, c_out)

    n, c = both(base)
    n_out, c_out = torch.zeros(2 * world, 3, device=NEURON), torch.zeros(2 * world, 3)
    dist.all_gather_into_tensor(n_out, n)
    dist.all_gather_into_tensor(c_out, c, group=gloo)
    pairs["all_gather_into_tensor"] = ([n_out], [c_out])

    n_in = [torch.full((3,), float(rank * 10 + r), device=NEURON) for r in range(world)]
    c_in = [t.cpu() for t in n_in]
    n_out, c_out = torch.zeros(3, device=NEURON), torch.zeros(3)
    dist.reduce_scatter(n_out, n_in)
    # gloo's reduce_scatter of lists is the reference's sum of the r-th inputs.
    c_all = torch.stack(c_in)
    dist.all_reduce(c_all, group=gloo)
    c_out.copy_(c_all[rank])
    pairs["reduce_scatter"] = ([n_out], [c_out])

    n, c = both(lambda: torch.arange(4.0 * world) * (rank + 1))
    n_out, c_out = torch.zeros(4, device=NEURON), torch.zeros(4)
    dist.reduce_scatter_tensor(n_out, n)
    dist.reduce_scatter_tensor(c_out, c, group=gloo)
    pairs["reduce_scatter_tensor"] = ([n_out], [c_out])

    n, c = both(lambda: torch.arange(2.0 * world) + 100 * rank)
    n_out, c_out = torch.zeros(2 * world, device=NEURON), torch.zeros(2 * world)
    dist.all_to_all_single(n_out, n)
    dist.all_to_all_single(c_out, c, group=gloo)
    pairs["all_to_all_single"] = ([n_out], [c_out])
    # Uneven splits: rank r sends r + 1 + d elements to rank d.
    in_splits = [rank + 1 + d for d in range(world)]
    out_splits = [s + 1 + rank for s in range(world)]
    n, c = both(lambda: torch.arange(float(sum(in_splits))) + 100 * rank)
    n_out, c_out = torch.zeros(sum(out_splits), device=NEURON), torch.zeros(sum(out_splits))
    dist.all_to_all_single(n_out, n, out_splits, in_splits)
    dist.all_to_all_single(c_out, c, out_splits, in_splits, group=gloo)
    pairs["all_to_all_single uneven"] = ([n_out], [c_out])

    n_in = [torch.full((2,), float(rank * 10 + d), device=NEURON) for d in range(world)]
    c_in = [t.cpu() for t in n_in]
    n_out = [torch.zeros(2, device=NEURON) for _ in range(world)]
    c_out = [torch.zeros(2) for _ in range(world)]
    dist.all_to_all(n_out, n_in)
    dist.all_to_all(c_out, c_in, group=gloo)
    pairs["all_to_all"] = (n_out, c_out)

    n, c = both(base)
    dist.reduce(n, dst=0)
    dist.reduce(c, dst=0, group=gloo)
    if rank == 0:  # other ranks' tensors are unspecified after a reduce
        pairs["reduce"] = ([n], [c])

    n, c = both(base)
    n_out = [torch.zeros(2, 3, device=NEURON) for _ in range(world)] if rank == 0 else None
    c_out = [torch.zeros(2, 3) for _ in range(world)] if rank == 0 else None
    dist.gather(n, n_out, dst=0)
    dist.gather(c, c_out, dst=0, group=gloo)
    if rank == 0:
        pairs["gather"] = (n_out, c_out)

    n_in = [torch.full((2,), float(10 * r + 1), device=NEURON) for r in range(world)] if rank == 0 else None
    c_in = [t.cpu() for t in n_in] if rank == 0 else None
    n_out, c_out = torch.zeros(2, device=NEURON), torch.zeros(2)
    dist.scatter(n_out, n_in, src=0)
    dist.scatter(c_out, c_in, src=0, group=gloo)
    pairs["scatter"] = ([n_out], [c_out])

    # Point to point around a ring.
    n, c = both(lambda: torch.full((3,), float(rank + 1)))
    n_got, c_got = torch.zeros(3, device=NEURON), torch.zeros(3)
    right, left = (rank + 1) % world, (rank - 1) % world
    if rank % 2 == 0:
        dist.send(n, right)
        dist.recv(n_got, left)
        dist.send(c, right, group=gloo)
        dist.recv(c_got, left, group=gloo)
    else:
        dist.recv(n_got, left)
        dist.send(n, right)
        dist.recv(c_got, left, group=gloo)
        dist.send(c, right, group=gloo)
    pairs["send/recv"] = ([n_got], [c_got])

    # CPU tensors on the neuron group go over its own gloo channel.
    c_plain = base()
    dist.all_reduce(c_plain)
    c_ref = base()
    dist.all_reduce(c_ref, group=gloo)
    pairs["cpu tensors on the neuron group"] = ([c_plain], [c_ref])

    traced = counters()
    torch_neuron.mark_step()
    dist.barrier()
    after = counters()
    out = {
        "pairs": {k: ([t.cpu() for t in n], [t.cpu() for t in c]) for k, (n, c) in pairs.items()},
        "executions_before_mark_step": traced[1] - c0[1],
        "compiles_at_mark_step": after[0] - traced[0],
        "backend": dist.get_backend(),
        "errors": bad_input(gloo),
    }
    return out


def bad_input(gloo):
    """What refuses bad input, and with which message."""
    errors = {}
    cases = {
        "mixed devices": lambda: dist.all_gather([torch.zeros(2), torch.zeros(2, device=NEURON)],
                                                 torch.zeros(2, device=NEURON)),
        "avg of ints": lambda: dist.all_reduce(torch.ones(2, dtype=torch.int64, device=NEURON),
                                               op=dist.ReduceOp.AVG),
        "band of floats": lambda: dist.all_reduce(torch.ones(2, device=NEURON), op=dist.ReduceOp.BAND),
        "wrong output size": lambda: dist.all_gather_into_tensor(torch.zeros(5, device=NEURON),
                                                                 torch.zeros(2, device=NEURON)),
    }
    for name, call in cases.items():
        try:
            call()
            errors[name] = None
        except Exception as e:  # noqa: BLE001 -- the test reads the type and message
            errors[name] = f"{type(e).__name__}: {e}"
    return errors


def _data(step, batch, features):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(batch, features, generator=g), torch.randint(0, 3, (batch,), generator=g)


def _tokens(step, batch):
    g = torch.Generator().manual_seed(2000 + step)
    return torch.randint(0, 32, (batch, 16), generator=g)


def make_model(kind):
    if kind == "mlp":
        return seeded_mlp()
    torch.manual_seed(0)
    return TinyDecoder(p=0.0)


def loss_of(kind, model, step, batch, device, part=None):
    """The loss of `model` on step `step`'s global batch, or on rank `part`'s
    share of it (part = (rank, world))."""
    if kind == "mlp":
        x, y = _data(step, batch, 8)
        if part is not None:
            x, y = x.chunk(part[1])[part[0]], y.chunk(part[1])[part[0]]
        return torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
    tokens = _tokens(step, batch)
    if part is not None:
        tokens = tokens.chunk(part[1])[part[0]]
    tokens = tokens.to(device)
    logits = model(tokens[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def ddp(rank, world, port, kind, steps="10", no_sync="0"):
    """DDP training on each rank's share of every step's batch; no_sync=1 runs
    each step as two micro-batches, the first under no_sync()."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    init(rank, world, port)
    steps, no_sync = int(steps), no_sync == "1"
    model = DDP(make_model(kind).to(NEURON), bucket_cap_mb=0.002)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch = 8 * world
    per_step = []
    losses = []
    for step in range(steps):
        before = counters()
        opt.zero_grad()
        if no_sync:
            with model.no_sync():
                (loss_of(kind, model, step, batch, NEURON, (2 * rank, 2 * world)) / 2).backward()
            loss = loss_of(kind, model, step, batch, NEURON, (2 * rank + 1, 2 * world)) / 2
        else:
            loss = loss_of(kind, model, step, batch, NEURON, (rank, world))
        loss.backward()
        opt.step()
        step_hash = torch_neuron.debug.graph_hash(list(model.parameters()))
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
        after = counters()
        per_step.append((after[0] - before[0], after[1] - before[1]))
        losses.append(loss.detach())
    return {
        "params": {k: v.detach().cpu() for k, v in model.module.state_dict().items()},
        "per_step": per_step,
        "losses": torch.stack([l.cpu() for l in losses]),
        "last_step_hash": step_hash,
    }


def ddp_options(rank, world, port, mode):
    """DDP with find_unused_parameters=True (a layer used every other step),
    static_graph=True, ZeroRedundancyOptimizer (Adam's state sharded over the
    ranks), or under torch.compile(backend="neuron") on neuron (Dynamo's
    DDPOptimizer splits the graph at DDP's buckets), on neuron and on CPU
    tensors over gloo (eager), from the same weights and data."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    init(rank, world, port, "cpu:gloo,neuron:neuron")
    gloo = dist.new_group(backend="gloo")

    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)

        def forward(self, x, use_b):
            h = torch.relu(self.a(x))
            return self.c(self.b(h) if use_b else h)

    options = {"unused": {"find_unused_parameters": True}, "static": {"static_graph": True}, "zero": {},
               "compiled": {}}[mode]
    results = {}
    for device in (NEURON, "cpu"):
        torch.manual_seed(0)
        module = Branchy().to(device)
        group = None if device == NEURON else gloo
        model = DDP(module, process_group=group, **options)
        forward = model
        if mode == "compiled" and device == NEURON:
            forward = torch.compile(model, backend="neuron")
        if mode == "zero":
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01,
                                          process_group=group)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(1 + rank)
        for step in range(4):
            x = torch.randn(8, 4, generator=gen).to(device)
            loss = forward(x, step % 2 == 0 or mode != "unused").pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if device == NEURON:
                torch_neuron.mark_step()
        results[device] = {k: v.detach().cpu() for k, v in module.state_dict().items()}
    return results


def fsdp2(rank, world, port, steps="10"):
    """FSDP2 (fully_shard, DTensor parameters) on the transformer: each
    attention and MLP input projection is its own unit, the whole model the
    root; each rank trains on its share of every step's batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    init(rank, world, port)
    steps = int(steps)
    model = make_model("transformer").to(NEURON)
    mesh = init_device_mesh(NEURON, (world,))
    for block in model.blocks:
        fully_shard(block["qkv"], mesh=mesh)
        fully_shard(block["fc1"], mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch = 8 * world
    per_step, losses = [], []
    for step in range(steps):
        before = counters()
        opt.zero_grad()
        loss = loss_of("transformer", model, step, batch, NEURON, (rank, world))
        loss.backward()
        opt.step()
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
        after = counters()
        per_step.append((after[0] - before[0], after[1] - before[1]))
        losses.append(loss.detach())
    shards = {k: v.to_local().cpu() for k, v in model.state_dict().items()}
    full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
    return {
        "params": full,
        "shards": shards,
        "per_step": per_step,
        "losses": torch.stack([l.cpu() for l in losses]),
        "sharded": sorted(k for k, v in model.state_dict().items()
                          if type(v).__name__ == "DTensor" and v.device.type == NEURON),
    }


def functional_collectives(rank, world, port):
    """torch.distributed._functional_collectives (what DTensor and tensor
    parallelism use) on neuron tensors, against the same on CPU tensors over
    gloo; and a DTensor sharded then replicated."""
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    init(rank, world, port, "cpu:gloo,neuron:neuron")
    gloo = dist.new_group(backend="gloo")
    x = torch.arange(8, dtype=torch.float32).reshape(4, 2) * (rank + 1)

    def both(fn):
        return fn(x.to(NEURON), dist.group.WORLD), fn(x.clone(), gloo)

    pairs = {
        "all_reduce": both(lambda t, g: funcol.all_reduce(t, "sum", g)),
        "all_reduce max": both(lambda t, g: funcol.all_reduce(t, "max", g)),
        "all_gather_tensor": both(lambda t, g: funcol.all_gather_tensor(t, 0, g)),
        "all_gather_tensor dim 1": both(lambda t, g: funcol.all_gather_tensor(t, 1, g)),
        "reduce_scatter_tensor": both(lambda t, g: funcol.reduce_scatter_tensor(t, "sum", 0, g)),
        "all_to_all_single": both(lambda t, g: funcol.all_to_all_single(t, None, None, g)),
        "broadcast": both(lambda t, g: funcol.broadcast(t, 1, g)),
        "all_reduce_coalesced": both(lambda t, g: funcol.all_reduce_coalesced([t, t * 2], "sum", g)[1]),
    }

    def in_place(t, g):
        torch.ops._c10d_functional.all_reduce_(t, "sum", g.group_name)
        return torch.ops._c10d_functional.wait_tensor(t)

    pairs["all_reduce_ (in place)"] = both(in_place)
    mesh = init_device_mesh(NEURON, (world,))
    sharded = distribute_tensor(torch.arange(12.0).reshape(6, 2), mesh, [Shard(0)])
    pairs["DTensor Shard(0) -> Replicate"] = (sharded.redistribute(mesh, [Replicate()]).to_local(),
                                              torch.arange(12.0).reshape(6, 2))
    pairs["DTensor full_tensor"] = (sharded.full_tensor(), torch.arange(12.0).reshape(6, 2))
    torch_neuron.mark_step()

    def waited(t):  # an AsyncCollectiveTensor's value
        return funcol.wait_tensor(t) if isinstance(t, funcol.AsyncCollectiveTensor) else t

    return {name: (waited(n).cpu(), waited(c).clone()) for name, (n, c) in pairs.items()}


def killed_peer(rank, world, port, how="killed"):
    """Rank 1 dies (how=killed) or stops taking part (how=hung) before the
    step's collective; rank 0 must get torch.distributed's error within the
    group's timeout, not hang."""
    init(rank, world, port, timeout_s=10 if how == "killed" else 4)
    x = torch.ones(4, device=NEURON)
    dist.all_reduce(x)
    torch_neuron.mark_step()
    x.cpu()
    if rank == 1:
        if how == "hung":
            import time
            time.sleep(10)
        os._exit(3)
    y = torch.ones(4, device=NEURON)
    dist.all_reduce(y)
    try:
        y.cpu()
    except Exception as e:  # noqa: BLE001 -- the test reads the message
        return {"error": f"{type(e).__name__}: {e}"}
    return {"error": None}


def early_exit(rank, world, port):
    """Rank 1 queues a step with a collective and destroys its group at once;
    rank 0 joins the collective a second later. The destroy must wait for the
    queued collective, or rank 0 finds its peer gone."""
    import time

    init(rank, world, port, timeout_s=30)
    if rank == 0:
        time.sleep(1.5)
    x = torch.full((3,), float(rank + 1), device=NEURON)
    dist.all_reduce(x)
    torch_neuron.mark_step()
    if rank == 1:
        dist.destroy_process_group()
        return {"sum": None}
    return {"sum": x.cpu()}


def torchrun_device():
    """Run under torchrun: the device each rank took, and an all-reduce on it."""
    dist.init_process_group("neuron")
    rank = dist.get_rank()
    x = torch.full((2,), float(rank + 1), device=NEURON)
    dist.all_reduce(x)
    return rank, {"device": torch.neuron.current_device(), "x_device": x.device.index,
                  "local_rank": int(os.environ["LOCAL_RANK"]), "sum": x.cpu()}


def main():
    scenario = sys.argv[1]
    if scenario == "torchrun":
        rank, out = torchrun_device()
        out_dir = sys.argv[2]
    else:
        rank, world, port, out_dir = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        out = {"collectives": collectives, "ddp": ddp, "fsdp2": fsdp2, "ddp_options": ddp_options,
               "functional_collectives": functional_collectives, "killed_peer": killed_peer,
               "early_exit": early_exit}[scenario](
            rank, world, port, *sys.argv[6:])
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
