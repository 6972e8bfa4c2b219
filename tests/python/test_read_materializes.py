"""A read (.item(), .cpu(), printing) runs the graph its tensor needs, and every
other live tensor that graph computes is materialized with it: code that reads
values without mark_step (generate()'s stopping criteria, logging) never
computes its history again."""

import torch

import torch_neuron


def decode_like_loop(device, steps, counters=None):
    # A cache grown each step and a value read each step, as generate() does.
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(4, 4, generator=gen).to(device)
    cache = torch.randn(1, 4, generator=gen).to(device)
    x = torch.randn(1, 4, generator=gen).to(device)
    reads = []
    for _ in range(steps):
        x = torch.tanh(x @ w)
        cache = torch.cat([cache, x])
        scores = (cache @ x.t()).softmax(0)
        x = (scores * cache).sum(0, keepdim=True)
        if counters is not None:
            before = torch_neuron.metrics.counters().get("graph.execute.nodes", 0)
        reads.append(x.sum().item())
        if counters is not None:
            counters.append(torch_neuron.metrics.counters()["graph.execute.nodes"] - before)
    return reads, cache.cpu()


def test_reads_without_mark_step_compute_each_step_once(metrics):
    steps = 12
    cpu_reads, cpu_cache = decode_like_loop("cpu", steps)
    nodes = []
    reads, cache = decode_like_loop("neuron", steps, nodes)
    torch.testing.assert_close(torch.tensor(reads), torch.tensor(cpu_reads))
    torch.testing.assert_close(cache, cpu_cache)
    # Each read executes only its own step's nodes: as many as the step before
    # (before, the cache stayed pending and each read recomputed every step).
    assert len(set(nodes[1:])) == 1, nodes
    assert nodes[-1] < 3 * nodes[1]


def test_values_grown_after_a_read_are_not_recomputed_by_the_next(metrics):
    # generate()'s attention mask: grown after the read that needs it, so the
    # live mask is not on the read's way; the read's graph computes the old
    # mask, which the grown one reads.
    def loop(device, nodes=None):
        x = torch.arange(4.0).reshape(1, 4).to(device)
        mask = torch.ones(1, 1).to(device)
        reads = []
        for _ in range(10):
            before = torch_neuron.metrics.counter("graph.execute.nodes")
            reads.append((x * mask.sum() + mask.mean()).sum().item())
            if nodes is not None:
                nodes.append(torch_neuron.metrics.counter("graph.execute.nodes") - before)
            mask = torch.cat([mask * 1.5, torch.ones(1, 1).to(device)], dim=1)
        return reads, mask.cpu()

    nodes = []
    neuron_reads, neuron_mask = loop("neuron", nodes)
    cpu_reads, cpu_mask = loop("cpu")
    torch.testing.assert_close(torch.tensor(neuron_reads), torch.tensor(cpu_reads))
    torch.testing.assert_close(neuron_mask, cpu_mask)
    assert len(set(nodes[1:])) == 1, nodes


def test_a_read_materializes_the_live_tensors_its_graph_computes(metrics):
    a = torch.arange(6.0).to("neuron")
    b = a * 2          # computed on the way to c: materialized by c's read
    c = (b + 1).sum()
    d = a - 1          # not on c's way: stays pending
    assert c.item() == 36.0
    assert torch_neuron._C._pending_count([b, c, d]) == 1  # d only
    executed = metrics.counter("graph.execute.nodes")
    assert torch.equal(b.cpu(), torch.arange(6.0) * 2)  # read from its buffer: nothing runs
    assert metrics.counter("graph.execute.nodes") == executed
    assert torch.equal(d.cpu(), torch.arange(6.0) - 1)  # its own graph runs now
    assert metrics.counter("graph.execute.nodes") > executed
