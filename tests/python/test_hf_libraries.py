"""The Hugging Face stack, unmodified, on neuron (issue 46): transformers'
Trainer with default arguments, an accelerate loop, peft LoRA,
sentence-transformers' encode, a diffusers UNet sampling loop and
transformers' generate(). Tiny configs and random weights, no downloads
(conftest.py sets HF_HUB_OFFLINE=1). Each run is compared with the same run on
the CPU from the same initial weights, and where a loop repeats a step, the
graphs it compiles are counted step by step: after its warm-up steps, none.

The libraries choose the device themselves (test_library_detection.py): the
Trainer and the Accelerator are given no device. The training loops never
call mark_step: the optimizer's step ends each step (test_optimizer_steps.py).
Each test's model has sizes of its own, so its graphs are its own to compile.
"""

import copy
import os

import pytest
import torch
import torch.nn.functional as F

import torch_neuron

from library_training import assert_close_lists, assert_same_parameters, new_graphs, per_step, train_steps

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


# --------------------------------------------------------------------------- Trainer

TRAINER_STEPS = 6


def tiny_gpt2(n_embd: int, n_positions: int = 16):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=48, n_positions=n_positions, n_embd=n_embd, n_layer=2, n_head=2,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config)


def token_data(count: int, length: int = 8, vocab: int = 48):
    gen = torch.Generator().manual_seed(1)
    return [{"input_ids": ids, "labels": ids}
            for ids in (torch.randint(0, vocab, (length,), generator=gen) for _ in range(count))]


def train_with_trainer(model, data, tmp_path, metrics, **arguments):
    """Trainer with default TrainingArguments but for the run's length and a
    loss logged at every step; returns the logged losses, the graphs new in
    each step and the trained model."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    graphs = []

    class CountGraphs(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            graphs.append(new_graphs(metrics))

    args = TrainingArguments(output_dir=str(tmp_path), max_steps=TRAINER_STEPS, per_device_train_batch_size=2,
                             logging_steps=1, **arguments)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[CountGraphs()])
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, per_step(graphs), trainer.model


def check_trainer(tmp_path, metrics, n_embd, **arguments):
    base = tiny_gpt2(n_embd)
    data = token_data(2 * TRAINER_STEPS)
    cpu_losses, _, cpu_model = train_with_trainer(copy.deepcopy(base), data, tmp_path / "cpu", metrics,
                                                  use_cpu=True, **arguments)
    metrics.reset()
    losses, graphs, model = train_with_trainer(copy.deepcopy(base), data, tmp_path / "neuron", metrics,
                                               **arguments)
    assert next(model.parameters()).device == torch.device("neuron:0")
    assert len(losses) == TRAINER_STEPS
    assert_close_lists(losses, cpu_losses)
    assert_same_parameters(model, cpu_model)
    # Step 1 makes AdamW's state; step 2 is the steady step plus the first
    # logging after it. Then nothing new: the Trainer never calls mark_step.
    assert sum(graphs[:2]) > 0 and graphs[2:] == [0] * (TRAINER_STEPS - 2), graphs
    assert metrics.counter("step.ended_by_optimizer.count") == TRAINER_STEPS


def test_trainer_with_default_arguments_trains_on_neuron_as_on_the_cpu(tmp_path, metrics):
    # The default optim is adamw_torch_fused: torch._fused_adamw_ on neuron.
    check_trainer(tmp_path, metrics, n_embd=20)


def test_trainer_with_adamw_torch_trains_on_neuron_as_on_the_cpu(tmp_path, metrics):
    check_trainer(tmp_path, metrics, n_embd=12, optim="adamw_torch")


def test_trainer_with_torch_compile_trains_on_neuron_as_on_the_cpu(tmp_path, metrics):
    # torch_compile=True picks backend "neuron" on a neuron machine
    # (TrainingArguments.torch_compile_backend). The reference is the CPU
    # without torch.compile (Inductor on the CPU would take minutes here).
    import torch._dynamo

    base = tiny_gpt2(12)
    data = token_data(2 * TRAINER_STEPS)
    cpu_losses, _, cpu_model = train_with_trainer(copy.deepcopy(base), data, tmp_path / "cpu", metrics,
                                                  use_cpu=True, optim="adamw_torch")
    metrics.reset()
    torch._dynamo.reset()
    try:
        losses, graphs, model = train_with_trainer(copy.deepcopy(base), data, tmp_path / "neuron", metrics,
                                                   optim="adamw_torch", torch_compile=True)
    finally:
        torch._dynamo.reset()
    assert next(model.parameters()).device == torch.device("neuron:0")
    assert_close_lists(losses, cpu_losses)
    assert_same_parameters(model, cpu_model)
    assert sum(graphs[:2]) > 0 and graphs[2:] == [0] * (TRAINER_STEPS - 2), graphs
    assert metrics.counter("step.ended_by_optimizer.count") == TRAINER_STEPS
    # GPT-2's forward in two graphs (Dynamo breaks at transformers' logger.warning_once),
    # each with its backward, compiled and traced at the first step only and run
    # as their programs by every later step.
    assert {k: v for k, v in metrics.counters().items() if k.startswith("dynamo.")} == {
        "dynamo.graph.forward.count": 2, "dynamo.graph.backward.count": 2,
        "dynamo.region.trace.count": 4, "dynamo.region.run.count": 4 * (TRAINER_STEPS - 1)}


# ------------------------------------------------------------------------ accelerate

@pytest.fixture
def accelerate_state():
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield AcceleratorState
    AcceleratorState._reset_state(reset_partial_state=True)


def test_an_accelerate_loop_trains_on_neuron_as_on_the_cpu(accelerate_state, metrics):
    from accelerate import Accelerator

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(6, 14), torch.nn.GELU(), torch.nn.Linear(14, 2))
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 6, generator=gen), torch.randn(4, 2, generator=gen)) for _ in range(2)]
    data = batches * 4

    def run(cpu):
        accelerate_state._reset_state(reset_partial_state=True)
        accelerator = Accelerator(cpu=cpu)
        model = copy.deepcopy(base)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-2)
        loader = torch.utils.data.DataLoader(data, batch_size=None)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        losses, graphs = train_steps(loader, lambda b: F.mse_loss(model(b[0]), b[1]), optimizer, metrics,
                                     backward=accelerator.backward)
        return losses, graphs, accelerator.unwrap_model(model), accelerator.device

    cpu_losses, _, cpu_model, cpu_device = run(cpu=True)
    metrics.reset()
    losses, graphs, model, device = run(cpu=False)
    assert (device.type, cpu_device.type) == ("neuron", "cpu")
    assert next(model.parameters()).device.type == "neuron"
    assert cpu_losses[-2] < 0.8 * cpu_losses[0]
    assert_close_lists(losses, cpu_losses)
    assert_same_parameters(model, cpu_model)
    assert graphs == [1] + [0] * 7  # AdamW's first step hashes like the others


# ------------------------------------------------------------------------------ peft

def test_peft_lora_trains_on_neuron_as_on_the_cpu(metrics):
    from peft import LoraConfig, get_peft_model
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=50, hidden_size=18, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=36, max_position_embeddings=16, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, num_labels=2)
    torch.manual_seed(0)
    lora = LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["query", "value"],
                      lora_dropout=0.0, init_lora_weights=False)
    base = get_peft_model(BertForSequenceClassification(config), lora)
    gen = torch.Generator().manual_seed(1)
    ids, labels = torch.randint(0, 50, (4, 10), generator=gen), torch.tensor([0, 1, 1, 0])

    def run(device):
        model = copy.deepcopy(base).to(device)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=5e-2)
        batch = (ids.to(device), labels.to(device))
        losses, graphs = train_steps([batch] * 6, lambda b: model(input_ids=b[0], labels=b[1]).loss, optimizer,
                                     metrics)
        return losses, graphs, model

    cpu_losses, _, cpu_model = run("cpu")
    metrics.reset()
    losses, graphs, model = run("neuron")
    assert cpu_losses[-1] < 0.9 * cpu_losses[0]
    assert_close_lists(losses, cpu_losses)
    # AdamW divides by the root of tiny second moments: float32 rounding of
    # the gradients reaches the adapters' weights as a few 1e-6.
    assert_same_parameters(model, cpu_model, rtol=1e-4, atol=1e-5)
    frozen = dict(base.named_parameters())
    for name, p in model.named_parameters():  # only the adapters and the classifier trained
        if not p.requires_grad:
            assert torch.equal(p.detach().cpu(), frozen[name].detach()), name
    assert graphs == [1] + [0] * 5


# -------------------------------------------------------------- sentence-transformers

def test_sentence_transformers_encode_on_neuron_equals_the_cpu(tmp_path, metrics):
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = [f"w{i}" for i in range(40)]
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words))
    BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt")).save_pretrained(tmp_path)
    config = BertConfig(vocab_size=45, hidden_size=22, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=44, max_position_embeddings=32)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(tmp_path)
    transformer = models.Transformer(str(tmp_path))
    pooling = models.Pooling(transformer.get_embedding_dimension(), "mean")
    encoder = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    sentences = ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9 w10", "w11"]

    expected = encoder.encode(sentences, convert_to_tensor=True, batch_size=4)
    encoder.to("neuron")
    got = encoder.encode(sentences, convert_to_tensor=True, batch_size=4)
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-6)
    assert new_graphs(metrics) > 0
    metrics.reset()
    again = encoder.encode(sentences, convert_to_tensor=True, batch_size=4)  # same lengths: no new graph
    assert new_graphs(metrics) == 0
    assert torch.equal(again.cpu(), got.cpu())


# ------------------------------------------------------------------------- diffusers

def test_a_diffusers_unet_sampling_loop_on_neuron_equals_the_cpu(metrics):
    from diffusers import DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(8, 16), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=4,
                       attention_head_dim=4).eval()
    scheduler = DDPMScheduler(num_train_timesteps=10)

    def sample(model, device):
        scheduler.set_timesteps(10)
        gen = torch.Generator().manual_seed(2)  # the scheduler's noise, drawn on the CPU
        x = torch.randn(1, 3, 8, 8, generator=gen).to(device)
        graphs, start = [], new_graphs(metrics)
        with torch.no_grad():
            for t in scheduler.timesteps:
                x = scheduler.step(model(x, t).sample, t, x, generator=gen).prev_sample
                if device == "neuron":
                    # No optimizer here: a sampling loop ends its steps itself,
                    # or the whole loop becomes one graph per number of steps.
                    torch_neuron.mark_step()
                graphs.append(new_graphs(metrics) - start)
        return x.cpu(), per_step(graphs)

    expected, _ = sample(unet, "cpu")
    model = copy.deepcopy(unet).to("neuron")
    got, graphs = sample(model, "neuron")
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # One denoising step graph; the last step adds no noise: a graph of its own.
    assert graphs == [1] + [0] * 8 + [1]
    again, graphs = sample(model, "neuron")
    assert graphs == [0] * 10
    assert torch.equal(again, got)


# -------------------------------------------------------------------------- generate

def test_generate_with_the_default_cache_gives_the_cpu_tokens(metrics):
    model = tiny_gpt2(n_embd=26, n_positions=64).eval()
    prompts = [torch.tensor([[1, 5, 9, 3]]), torch.tensor([[2, 6, 8, 4]])]
    expected = [model.generate(p, max_new_tokens=10, do_sample=False, pad_token_id=0) for p in prompts]
    model.to("neuron")
    got = model.generate(prompts[0].to("neuron"), max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert got.device.type == "neuron"
    assert got.cpu().tolist() == expected[0].tolist()
    assert new_graphs(metrics) > 0  # each new length of the cache is a new graph
    metrics.reset()
    got = model.generate(prompts[1].to("neuron"), max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert got.cpu().tolist() == expected[1].tolist()
    assert new_graphs(metrics) == 0  # the same lengths again: every graph is known


def tiny_causal_lm(kind: str):
    """A tiny random model of each family generate() compiles for (static cache)."""
    import transformers as tf

    common = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    if kind == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64))
    if kind == "gemma":
        return tf.GemmaForCausalLM(tf.GemmaConfig(**common, head_dim=8))
    model_class, config_class = {"llama": (tf.LlamaForCausalLM, tf.LlamaConfig),
                                 "qwen2": (tf.Qwen2ForCausalLM, tf.Qwen2Config)}[kind]
    return model_class(config_class(**common))


@pytest.mark.parametrize("kind", ["llama", "gpt2", "qwen2", "gemma"])
def test_generate_with_the_static_cache_compiles_with_the_neuron_backend_and_gives_the_cpu_tokens(kind, metrics):
    # cache_implementation="static" makes generate() call
    # torch.compile(backend="neuron") on its decoding step by itself.
    import torch._dynamo

    torch._dynamo.reset()
    model = tiny_causal_lm(kind).eval()
    # Tokens 0-2 are some families' pad, bos and eos: left out, so that both
    # prompts take one path through generate().
    prompts = [torch.randint(3, 64, (1, 5), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    kwargs = dict(max_new_tokens=6, do_sample=False, cache_implementation="static")
    expected = [model.generate(p, **kwargs) for p in prompts]
    model.to("neuron")
    try:
        got = model.generate(prompts[0].to("neuron"), **kwargs)
        assert got.cpu().tolist() == expected[0].tolist()
        assert metrics.counter("dynamo.region.trace.count") == 1  # the decoding step, once
        metrics.reset()
        got = model.generate(prompts[1].to("neuron"), **kwargs)
        assert got.cpu().tolist() == expected[1].tolist()
        # The same shapes again: nothing compiles, nothing is traced; the 5
        # decoding steps after the prompt's run the step's program.
        assert new_graphs(metrics) == 0
        assert {k: v for k, v in metrics.counters().items() if k.startswith("dynamo.")} == {
            "dynamo.region.run.count": 5}
    finally:
        torch._dynamo.reset()
