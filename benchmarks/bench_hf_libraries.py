"""The Hugging Face stack on neuron and on the CPU: for each library's workload,
the steps until no new graph compiles, and the wall time of the same work on
both devices once warmed up.

  trainer         transformers' Trainer, default TrainingArguments but
                  optim="adamw_torch" (a tiny GPT-2), step = an optimizer step
  trainer_fused   the same with the default optim, adamw_torch_fused
  accelerate      Accelerator().prepare + accelerator.backward, an MLP, AdamW
  peft_lora       peft LoRA on a tiny BERT classifier, AdamW
  st_encode       sentence-transformers encode of 16 sentences, step = a call
  diffusers       UNet2DModel + DDPMScheduler, step = a denoising step (10 a
                  run), mark_step after each (no optimizer ends a step there)
  generate        transformers generate(), greedy, 16 new tokens, default
                  cache, step = a call

Each workload runs twice, on neuron and on the CPU, each time in a process of
its own (python bench_hf_libraries.py --one NAME:DEVICE) with an empty compile
cache and tiered compilation off, so the graph counts are exact: warm-up steps,
counting the new graphs of each, then the timed steps. Time is wall time after
the end of warm-up, per step: the timed steps run in blocks of 5, device work
waited for at each block's end, and the median block is taken; training loops
never call mark_step (the optimizer's step ends the step).
"steps to zero" is the number of the last step that compiled anything.

    python benchmarks/bench_hf_libraries.py [--quick] [--out DIR]
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# Timed steps are measured in blocks of this many; the median block gives the time per step.
BLOCK = 5

WORKLOADS = ["trainer", "trainer_fused", "accelerate", "peft_lora", "st_encode", "diffusers", "generate"]


# ------------------------------------------------------------------- one workload

def _new_graphs() -> int:
    import torch_neuron

    m = torch_neuron.metrics
    return m.counter("graph.compile.count") + m.counter("cache.disk_hit.count")


def _wait(device: str) -> None:
    import torch_neuron

    if device == "neuron":
        torch_neuron.wait_device_ops()


class _Run:
    """Counts new graphs after each step, and times the steps after warm-up
    in blocks of BLOCK steps (device work waited for at each block's end)."""

    def __init__(self, device: str, warmup: int):
        self.device, self.warmup = device, warmup
        self.graphs, self.blocks, self.steps, self.start = [], [], 0, None

    def step_done(self) -> None:
        self.steps += 1
        self.graphs.append(_new_graphs())
        timed = self.steps - self.warmup
        if timed >= 0 and timed % BLOCK == 0:
            _wait(self.device)
            now = time.perf_counter()
            if timed > 0:
                self.blocks.append((now - self.start) / BLOCK)
            self.start = now

    def result(self) -> dict:
        per_step = [b - a for a, b in zip([0] + self.graphs[:-1], self.graphs)]
        last = max((i + 1 for i, n in enumerate(per_step) if n), default=0)
        return {"step_s": statistics.median(self.blocks), "step_s_blocks": self.blocks,
                "timed_steps": self.steps - self.warmup, "graphs_per_step": per_step, "steps_to_zero": last}


def _tiny_gpt2(n_embd=32, n_positions=32):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=n_positions, n_embd=n_embd, n_layer=2,
                                      n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def trainer(device, warmup, steps, optim="adamw_torch"):
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    gen = torch.Generator().manual_seed(1)
    data = [{"input_ids": ids, "labels": ids} for ids in
            (torch.randint(0, 64, (16,), generator=gen) for _ in range(4 * (warmup + steps)))]
    run = _Run(device, warmup)

    class Count(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            run.step_done()

    extra = {} if optim is None else {"optim": optim}
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=warmup + steps, per_device_train_batch_size=4,
                             save_strategy="no", use_cpu=device == "cpu", disable_tqdm=True, **extra)
    trainer = Trainer(model=_tiny_gpt2(), args=args, train_dataset=data, callbacks=[Count()])
    trainer.train()
    assert next(trainer.model.parameters()).device.type == device
    out = run.result()
    out["loss"] = trainer.state.log_history[-1]["train_loss"]
    return out


def trainer_fused(device, warmup, steps):
    return trainer(device, warmup, steps, optim=None)


def accelerate(device, warmup, steps):
    import torch
    from accelerate import Accelerator

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8))
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(32, 64, generator=gen), torch.randn(32, 8, generator=gen)) for _ in range(warmup + steps)]
    accelerator = Accelerator(cpu=device == "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, torch.utils.data.DataLoader(data, batch_size=None))
    run = _Run(device, warmup)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        run.step_done()
    out = run.result()
    out["loss"] = loss.item()
    return out


def peft_lora(device, warmup, steps):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=32, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, num_labels=2)
    torch.manual_seed(0)
    model = get_peft_model(BertForSequenceClassification(config),
                           LoraConfig(task_type="SEQ_CLS", r=8, target_modules=["query", "value"],
                                      lora_dropout=0.0)).to(device)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 128, (8, 24), generator=gen).to(device)
    labels = torch.randint(0, 2, (8,), generator=gen).to(device)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    run = _Run(device, warmup)
    for _ in range(warmup + steps):
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        run.step_done()
    out = run.result()
    out["loss"] = loss.item()
    return out


def st_encode(device, warmup, steps):
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tempfile.mkdtemp()
    words = [f"w{i}" for i in range(100)]
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words))
    BertTokenizerFast(vocab_file=os.path.join(folder, "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=105, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=128, max_position_embeddings=64)).save_pretrained(folder)
    transformer = models.Transformer(folder)
    encoder = SentenceTransformer(modules=[transformer, models.Pooling(transformer.get_embedding_dimension(), "mean")],
                                  device=device)
    sentences = [" ".join(words[i:i + 3 + i % 7]) for i in range(16)]
    run = _Run(device, warmup)
    for _ in range(warmup + steps):
        embeddings = encoder.encode(sentences, convert_to_tensor=True, batch_size=16, show_progress_bar=False)
        run.step_done()
    out = run.result()
    out["norm"] = float(embeddings.cpu().norm())
    return out


def diffusers(device, warmup, steps):
    import torch
    import torch_neuron
    from diffusers import DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(16, 32), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8,
                       attention_head_dim=8).eval().to(device)
    scheduler = DDPMScheduler(num_train_timesteps=10)
    run = _Run(device, warmup)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for _ in range((warmup + steps) // 10):
            scheduler.set_timesteps(10)
            x = torch.randn(2, 3, 16, 16, generator=gen).to(device)
            for t in scheduler.timesteps:
                x = scheduler.step(unet(x, t).sample, t, x, generator=gen).prev_sample
                if device == "neuron":
                    torch_neuron.mark_step()
                run.step_done()
    out = run.result()
    out["norm"] = float(x.cpu().norm())
    return out


def generate(device, warmup, steps):
    import torch

    model = _tiny_gpt2(n_positions=64).eval().to(device)
    prompt = torch.tensor([[1, 5, 9, 3, 7, 2]]).to(device)
    run = _Run(device, warmup)
    for _ in range(warmup + steps):
        tokens = model.generate(prompt, max_new_tokens=16, do_sample=False, pad_token_id=0)
        run.step_done()
    out = run.result()
    out["tokens"] = tokens.cpu().tolist()
    return out


# (warm-up steps, timed steps: a multiple of BLOCK), full and quick
SIZES = {"trainer": ((4, 25), (4, 10)), "trainer_fused": ((4, 25), (4, 10)), "accelerate": ((4, 50), (4, 10)),
         "peft_lora": ((4, 25), (4, 10)), "st_encode": ((2, 25), (2, 10)), "diffusers": ((10, 30), (10, 10)),
         "generate": ((2, 15), (2, 5))}


def run_one(name: str, device: str, quick: bool) -> dict:
    warnings.simplefilter("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    warmup, steps = SIZES[name][1 if quick else 0]
    try:
        return dict(globals()[name](device, warmup, steps), warmup_steps=warmup)
    except Exception as e:  # reported, not fatal: the other workloads still run
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}", "warmup_steps": warmup}


# ------------------------------------------------------------------------- driver

def _same(neuron: dict, cpu: dict) -> str:
    """Whether the run's final loss, embedding norm or tokens match the CPU's."""
    for key in ("loss", "norm"):
        if key in neuron and key in cpu:
            return "yes" if abs(neuron[key] - cpu[key]) <= 1e-4 * max(1.0, abs(cpu[key])) else "NO"
    if "tokens" in neuron and "tokens" in cpu:
        return "yes" if neuron["tokens"] == cpu["tokens"] else "NO"
    return ""


def main(argv=None) -> int:
    from common import bench_parser, fmt, print_table, table, write_results

    parser = bench_parser(__doc__)
    parser.add_argument("--one", help="NAME:DEVICE: run one workload in this process, print its JSON (the driver's)")
    parser.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads")
    args = parser.parse_args(argv)
    if args.one:
        name, device = args.one.split(":")
        print(json.dumps(run_one(name, device, args.quick)))
        return 0

    results = {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NEURON_")}
    env["TORCH_NEURON_TIERED_COMPILE"] = "0"
    env["HF_HUB_OFFLINE"] = "1"
    for name in args.only.split(","):
        results[name] = {}
        for device in ("neuron", "cpu"):  # each in a process of its own: no threads left behind
            env["TORCH_NEURON_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_hf_")
            cmd = [sys.executable, os.path.abspath(__file__), "--one", f"{name}:{device}"]
            print(f"  {name} on {device} ...", flush=True)
            done = subprocess.run(cmd + (["--quick"] if args.quick else []), capture_output=True, text=True,
                                  env=env, timeout=1800)
            if done.returncode != 0:
                results[name][device] = {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:300]}
            else:
                results[name][device] = json.loads(done.stdout.strip().splitlines()[-1])
        results[name]["warmup_steps"] = results[name]["neuron"].get("warmup_steps", 0)

    header = ["workload", "warm-up steps", "steps to zero compiles", "new graphs per warm-up step",
              "timed steps", "neuron ms/step", "cpu ms/step", "neuron / cpu", "ratio of minima", "result = CPU's"]
    rows, headline = [], {}
    for name, r in results.items():
        n, c = r.get("neuron", {}), r.get("cpu", {})
        if "error" in n:
            rows.append([name, r.get("warmup_steps", ""), "error", n["error"][:80], "", "", "", "", "", ""])
            continue
        never = any(n["graphs_per_step"][r["warmup_steps"]:])
        zero = f"never (step {n['steps_to_zero']})" if never else n["steps_to_zero"]
        ratio = n["step_s"] / c["step_s"] if "step_s" in c else float("nan")
        # The least disturbed block of each: on a shared 2-core host the
        # CPU's blocks vary most (other processes take its cores).
        ratio_min = min(n["step_s_blocks"]) / min(c["step_s_blocks"]) if "step_s" in c else float("nan")
        rows.append([name, r["warmup_steps"], zero, " ".join(map(str, n["graphs_per_step"][:r["warmup_steps"]])),
                     n["timed_steps"], fmt(1e3 * n["step_s"]), fmt(1e3 * c.get("step_s", float("nan"))), fmt(ratio), fmt(ratio_min),
                     _same(n, c)])
        headline[name] = f"graphs settle after step {zero}; neuron {fmt(ratio)}x the CPU's time"
    path = write_results("hf_libraries", {
        "quick": args.quick, "results": results,
        "command": "python benchmarks/bench_hf_libraries.py",
        "title": "Hugging Face libraries",
        "description": __doc__.split("\n\n")[0].replace("\n", " ") + " " + __doc__.split("\n\n")[2].replace("\n", " "),
        "tables": [table("Steps until no new graph, and the time of the same steps after warm-up", header, rows)],
        "plots": [],
        "headline": headline,
    }, args.out)
    print_table("Hugging Face libraries on neuron and on the CPU", header, rows)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
