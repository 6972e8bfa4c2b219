"""Positions as data in lazy mode (issue 49, item 2).

A loop that reads or writes a tensor at a moving position (a static KV cache
updated at the token's position, the last column of ids that grow by one per
token) must reuse one graph:

- integer positions that do not shape a result by themselves (a slice's start
  and end, a select's index, a narrow's start, the same positions of
  slice_scatter and select_scatter, which write through those views, and
  arange's integer bounds) are bound as scalar parameters, as Python numbers
  other than 0 and 1 are, and at 0 and 1 too: one graph for every position,
  values equal to the CPU's, out-of-range positions refused with the CPU's
  error at the op;
- a read that lies inside one operand of a pending cat reads that operand, so
  generate()'s ids and position ids, grown by torch.cat every token, stay out
  of the token's graph: generate() with the static cache and no torch.compile
  compiles its decoding graph once, whatever the number of tokens.

Graphs are counted exactly: compiles plus disk hits after emptying the
in-memory cache (tiered compilation is off in tests, conftest.py).
"""

import subprocess
import sys

import pytest
import torch

import torch_neuron
from child_process import child_env, fresh_cache_dir


def count_graphs(metrics):
    """Graphs needed from now on that the process did not hold in memory."""
    torch_neuron._C._clear_compile_cache()
    metrics.reset()
    return lambda: metrics.counter("graph.compile.count") + metrics.counter("cache.disk_hit.count")


# ------------------------------------------------------------- positions as data

def static_cache_loop(device, positions, opt_level):
    """A static cache written and read at moving positions, one step each."""
    torch.manual_seed(0)
    cache = torch.zeros(2, 12, 3, device=device)
    rows = torch.randn(len(positions), 2, 2, 3).to(device)
    out = []
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL=opt_level):
        for i, p in enumerate(positions):
            cache[:, p:p + 2] = rows[i] * 2  # slice_scatter at p
            window = cache[:, p:p + 3] + 1   # slice at p (a fixed length)
            last = cache[:, p] * 3           # select at p
            narrow = cache.narrow(1, p, 2).sum()
            cache[:, p + 2] = last           # select_scatter at p + 2
            where = torch.arange(p, p + 1, device=device)  # transformers' cache_position
            cache.index_copy_(1, where + 3, rows[i][:, :1] - 1)  # a static cache's update
            out.append((window, last, narrow))
            if device == "neuron":
                torch_neuron.mark_step()
    return cache, out


@pytest.mark.parametrize("opt_level", ["0", "1"])
def test_a_loop_over_positions_reuses_one_graph_and_matches_the_cpu(opt_level, metrics):
    positions = [0, 1, 2, 5, 7, 3]  # 0 and 1 too: positions are never constants
    expected_cache, expected = static_cache_loop("cpu", positions, opt_level)
    graphs = count_graphs(metrics)
    cache, got = static_cache_loop("neuron", positions, opt_level)
    assert graphs() == 1
    torch.testing.assert_close(cache.cpu(), expected_cache, rtol=0, atol=0)
    for (w, l, n), (ew, el, en) in zip(got, expected):
        torch.testing.assert_close(w.cpu(), ew, rtol=0, atol=0)
        torch.testing.assert_close(l.cpu(), el, rtol=0, atol=0)
        torch.testing.assert_close(n.cpu(), en)


def test_positions_are_graph_parameters_not_attributes():
    x = torch.arange(24.0).reshape(4, 6).to("neuron")
    a, b = x[:, 2:4], x[:, 3:5]
    assert torch_neuron.debug.graph_hash([a]) == torch_neuron.debug.graph_hash([b])
    text = torch_neuron.debug.ir_text([x[1]])
    assert "aten::select_copy.int(%0, 0, %1)" in text
    assert "parameter(1, scalar) : i64[]" in text
    # A length is a size: a longer slice is another graph.
    assert torch_neuron.debug.graph_hash([x[:, 2:5]]) != torch_neuron.debug.graph_hash([a])
    assert torch.equal(b.cpu(), torch.arange(24.0).reshape(4, 6)[:, 3:5])


@pytest.mark.parametrize("read", ["select", "select_negative", "narrow", "index_select_scatter"])
def test_out_of_range_positions_raise_the_cpus_error_at_the_op(read):
    def run(device):
        x = torch.zeros(2, 5, device=device)
        if read == "select":
            return x[:, 5]
        if read == "select_negative":
            return x.select(1, -6)
        if read == "narrow":
            return x.narrow(1, 4, 2)
        x[:, 7] = 1.0
        return x

    with pytest.raises(Exception) as cpu:
        run("cpu")
    with pytest.raises(type(cpu.value)) as neuron:
        run("neuron")
    assert str(neuron.value) == str(cpu.value)


def test_slices_past_the_end_are_empty_as_on_the_cpu():
    x = torch.arange(10.0)
    n = x.to("neuron")
    for start in (8, 10, 12):
        torch.testing.assert_close(n[start:start + 3].cpu(), x[start:start + 3])


# ------------------------------------------------------ reads of a pending cat

def test_the_last_column_of_growing_ids_is_read_without_the_cat(metrics):
    def loop(device):
        torch.manual_seed(0)
        table = torch.randn(16, 16).to(device)
        ids = torch.tensor([[3, 1, 4]], device=device)
        flags = []
        for _ in range(10):
            nxt = (table[ids[:, -1]] * 3).argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=-1)
            flags.append(bool((ids[:, -1] == 15).any()))  # a read, as generate()'s stop check
        return ids.cpu(), flags

    expected = loop("cpu")
    graphs = count_graphs(metrics)
    got = loop("neuron")
    # The first token's read slices the prompt; every later one reads the
    # column the token before computed; the final read of the ids is the cat.
    assert graphs() == 3
    assert torch.equal(got[0], expected[0])
    assert got[1] == expected[1]
    graphs = count_graphs(metrics)
    assert loop("neuron")[0].tolist() == expected[0].tolist()
    assert graphs() == 3  # nothing new but what the emptied memory cache held


# ------------------------------------------------------------------- generate

def tiny_causal_lm(kind: str):
    import transformers as tf

    torch.manual_seed(0)
    if kind == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64))
    return tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                              max_position_embeddings=64))


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_generate_with_the_static_cache_in_lazy_mode_compiles_its_decoding_graph_once(kind, metrics):
    pytest.importorskip("transformers")
    model = tiny_causal_lm(kind).eval()
    prompts = [torch.randint(3, 64, (1, 5), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    # disable_compile: generate() would otherwise compile the decoding step
    # with torch.compile itself (test_hf_libraries.py); here it is traced lazily.
    kwargs = dict(do_sample=False, cache_implementation="static", disable_compile=True)
    expected = [model.generate(p, max_new_tokens=32, **kwargs) for p in prompts]
    assert [e.shape[1] for e in expected] == [37, 37]  # no early end of sequence
    model.to("neuron")

    graphs = count_graphs(metrics)
    got = model.generate(prompts[0].to("neuron"), max_new_tokens=32, **kwargs)
    assert got.cpu().tolist() == expected[0].tolist()
    # 8 graphs for 32 tokens: 4 small ones of generate()'s argument checks, the
    # prompt's, the first token's (it reads the prompt's position ids), one for
    # every later token, and the read of the ids above (the cat of the tokens).
    assert graphs() == 8
    assert not any(k.startswith("dynamo.") for k in metrics.counters())  # lazy, not compiled

    # 8 tokens: the same graphs but the read of the ids, a cat of other sizes.
    graphs = count_graphs(metrics)
    short = model.generate(prompts[0].to("neuron"), max_new_tokens=8, **kwargs)
    assert short.cpu().tolist() == expected[0][:, :13].tolist()
    assert graphs() == 8

    torch_neuron._C._clear_compile_cache()
    model.generate(prompts[0].to("neuron"), max_new_tokens=32, **kwargs).cpu()  # all in memory again
    metrics.reset()
    got = model.generate(prompts[1].to("neuron"), max_new_tokens=32, **kwargs)
    assert got.cpu().tolist() == expected[1].tolist()
    assert metrics.counter("graph.compile.count") + metrics.counter("cache.disk_hit.count") == 0


# ------------------------------------------------------------- recompile report

GROWING = r"""
import torch, torch_neuron
x = torch.ones(2, 3).to("neuron")
for n in range(3, 6):
    y = (torch.ones(2, n).to("neuron") * 2).sum()
    y.item()
print("reason", torch_neuron.debug.last_recompile_reason())
"""


def test_the_recompile_report_says_when_only_sizes_differ_and_names_the_fixes():
    result = subprocess.run([sys.executable, "-c", GROWING], capture_output=True, text=True, timeout=120,
                            env=child_env({"TORCH_NEURON_DEBUG": "1", "TORCH_NEURON_CACHE_DIR": fresh_cache_dir()}))
    assert result.returncode == 0, result.stderr
    reason = [l for l in result.stdout.splitlines() if l.startswith("reason ")][0]
    assert reason == (
        "reason input changed from device_data f32[2,4] to device_data f32[2,5]; only sizes differ, so every new "
        "size compiles a new graph: keep the sizes fixed (for generate(), cache_implementation=\"static\"; "
        "elsewhere, pad to a few lengths), set TORCH_NEURON_DYNAMIC_SHAPES=1 (one tier-0 graph for every size) "
        "or compile the code with torch.compile(backend=\"neuron\", dynamic=True)")
    lines = [l for l in result.stderr.splitlines() if l.startswith("torch_neuron: compiling")]
    assert len(lines) == 2 and all("only sizes differ" in l for l in lines), result.stderr
