"""Zoo entries from libraries beside transformers: diffusers (its denoisers and
autoencoders trained one step at a time, and its schedulers' sampling loops),
sentence-transformers (encoders trained with a pair loss, and `encode`) and timm
(one image classifier per model family, trained with cross entropy).

Each entry has the interface of catalog.Entry (name, model_type, head, class_name,
broken, build, batch) plus `library`, and `mode`:
  "train"   the model's forward returns {"loss", "logits"}; run_model.train() runs it
  "infer"   inference: `entry.infer(model, batch, device, mark_step)` returns the
            outputs to compare (a scheduler's whole sampling loop, one sample per
            step, `mark_step()` after each on neuron; or sentence-transformers'
            `encode`)

Configs are written here by hand, tiny (channels 8-32, one or two layers per
block), from random weights; nothing is downloaded. timm's models are its own
registered ones (the smallest of each family; see TIMM_MODELS), at 64 px. Names are
"<library>-<model>/<head>", e.g. "diffusers-unet_2d/denoise".
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import tempfile
from typing import Any, Callable, Dict, List, Optional

import torch

B = 2


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


class DenoiseLoss(torch.nn.Module):
    """A denoiser trained as diffusion models are: mean squared error between its
    prediction and a target drawn with the batch."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, target, **inputs):
        out = self.model(**inputs, return_dict=False)[0]
        return {"loss": torch.nn.functional.mse_loss(out, target), "logits": out}


class AutoencoderLoss(torch.nn.Module):
    """Reconstruction error, plus the KL term for a VAE (its posterior's mean is used
    for the latent, so the step draws no random numbers)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, sample):
        m = self.model
        if hasattr(m, "quant_conv") and hasattr(m.encode(sample), "latent_dist"):
            dist = m.encode(sample).latent_dist
            recon = m.decode(dist.mean).sample
            kl = dist.kl().mean()
        else:
            recon = m(sample, return_dict=False)[0]
            kl = recon.new_zeros(())
        loss = torch.nn.functional.mse_loss(recon, sample) + 1e-3 * kl
        return {"loss": loss, "logits": recon}


class ControlNetLoss(torch.nn.Module):
    """A ControlNet's residuals pulled toward zero: every down and mid residual is used.
    Its output convolutions start at zero (so a new ControlNet changes nothing); here
    they get small random weights, or the loss and most gradients would be zeros."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.startswith(("controlnet_down_blocks", "controlnet_mid_block")):
                    p.normal_(0.0, 0.1)

    def forward(self, **inputs):
        down, mid = self.model(**inputs, return_dict=False)
        loss = sum(r.pow(2).mean() for r in down) + mid.pow(2).mean()
        return {"loss": loss, "logits": mid}


class PriorLoss(DenoiseLoss):
    def forward(self, target, **inputs):
        out = self.model(**inputs).predicted_image_embedding
        return {"loss": torch.nn.functional.mse_loss(out, target), "logits": out}


@dataclasses.dataclass
class LibEntry:
    name: str
    model_type: str
    head: str
    class_name: str
    library: str
    make: Callable[[], torch.nn.Module]            # the library's model, random weights
    inputs: Callable[[torch.Generator], Dict[str, Any]]
    wrap: Callable[[torch.nn.Module], torch.nn.Module] = DenoiseLoss
    mode: str = "train"
    broken: Optional[str] = None
    scheduler: Optional[str] = None                 # sampling entries: the scheduler's class
    lr: Optional[float] = None                      # the training steps' rate, where LR diverges

    def build(self, seed: int = 0) -> torch.nn.Module:
        torch.manual_seed(seed)
        model = self.wrap(self.make())
        if self.lr is not None:
            model.zoo_lr = self.lr
        if self.mode == "infer":
            model.eval()
        else:
            model.train()
        return model

    def batch(self, model, seed: int = 0) -> Dict[str, Any]:
        return self.inputs(_g(1000 + seed))

    def infer(self, model, batch: Dict[str, Any], device: str, mark_step: Optional[Callable] = None):
        """The outputs to compare, on the CPU: `encode`'s embeddings, or every step's
        sample of the scheduler's sampling loop."""
        if self.scheduler is None:
            with torch.inference_mode():
                return [model.st.encode(batch["sentences"], convert_to_tensor=True, batch_size=len(batch["sentences"]))
                        .cpu()]
        import diffusers

        cls = getattr(diffusers, self.scheduler)
        kw = {"num_train_timesteps": 50} if "num_train_timesteps" in inspect.signature(cls.__init__).parameters else {}
        sched = cls(**kw)
        # Pipelines put the schedule on the model's device where the scheduler takes one.
        if "device" in inspect.signature(sched.set_timesteps).parameters:
            sched.set_timesteps(SAMPLE_STEPS, device=device)
        else:
            sched.set_timesteps(SAMPLE_STEPS)
        # The scheduler's noise comes from a CPU generator, as pipelines on
        # accelerators draw it; its draws are the same on both devices.
        gen = _g(batch["seed"])
        x = (batch["noise"] * getattr(sched, "init_noise_sigma", 1.0)).to(device)
        takes_generator = "generator" in inspect.signature(sched.step).parameters
        steps: List[torch.Tensor] = []
        unet = model.model
        with torch.inference_mode():
            for t in sched.timesteps:
                inp = sched.scale_model_input(x, t) if hasattr(sched, "scale_model_input") else x
                eps = unet(inp, t).sample
                out = sched.step(eps, t, x, **({"generator": gen} if takes_generator else {}))
                x = out.prev_sample
                if mark_step is not None:
                    mark_step()
                steps.append(x)
        return [s.cpu() for s in steps]


SAMPLE_STEPS = 6


# ---------------------------------------------------------------------------
# diffusers: denoisers, autoencoders, a ControlNet, a prior.

def _diffusers(cls_name: str, **config):
    def make():
        import diffusers

        return getattr(diffusers, cls_name)(**config)

    return make


_UNET2D = dict(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 16),
               down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
               norm_num_groups=4, attention_head_dim=4)
_CROSS = dict(layers_per_block=1, block_out_channels=(8, 16), norm_num_groups=4, cross_attention_dim=12,
              attention_head_dim=4)
_AE = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
           up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"), block_out_channels=(8, 16), latent_channels=4,
           norm_num_groups=4, sample_size=16)


def _inputs(key: str, shape, timestep: str, target_shape=None, **extra):
    """Inputs of a denoiser: `key` of `shape`, two timesteps (ints, or floats in [0, 1]),
    `extra` tensors (a shape, or a callable of the generator), and the target."""

    def inputs(g):
        d: Dict[str, Any] = {key: _randn(g, B, *shape)}
        d["timestep"] = torch.tensor([3, 7]) if timestep == "int" else torch.tensor([0.3, 0.7])
        for name, spec in extra.items():
            d[name] = spec(g) if callable(spec) else _randn(g, *spec)
        if target_shape is not False:
            d["target"] = _randn(g, B, *(target_shape or shape))
        return d

    return inputs


def _bool_mask(n: int):
    return lambda g: torch.ones(B, n, dtype=torch.bool)


def _image_batch(g):
    return {"sample": _randn(g, B, 3, 16, 16)}


def _denoisers() -> List[LibEntry]:
    d = "diffusers"
    E = LibEntry
    return [
        E("diffusers-unet_2d/denoise", "unet_2d", "denoise", "UNet2DModel", d,
          _diffusers("UNet2DModel", **_UNET2D), _inputs("sample", (3, 8, 8), "int")),
        E("diffusers-unet_2d_skip/denoise", "unet_2d_skip", "denoise", "UNet2DModel", d,
          _diffusers("UNet2DModel", **dict(_UNET2D, block_out_channels=(32, 32),
                                           down_block_types=("SkipDownBlock2D", "AttnSkipDownBlock2D"),
                                           up_block_types=("AttnSkipUpBlock2D", "SkipUpBlock2D"),
                                           time_embedding_type="fourier", resnet_time_scale_shift="scale_shift")),
          _inputs("sample", (3, 8, 8), "float"), lr=1e-3),
        E("diffusers-unet_2d_condition/denoise", "unet_2d_condition", "denoise", "UNet2DConditionModel", d,
          _diffusers("UNet2DConditionModel", sample_size=8, in_channels=4, out_channels=4,
                     down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                     up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), **_CROSS),
          _inputs("sample", (4, 8, 8), "int", encoder_hidden_states=(B, 5, 12))),
        E("diffusers-unet_3d_condition/denoise", "unet_3d_condition", "denoise", "UNet3DConditionModel", d,
          _diffusers("UNet3DConditionModel", sample_size=8, in_channels=4, out_channels=4,
                     down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
                     up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"), **_CROSS),
          _inputs("sample", (4, 2, 8, 8), "int", encoder_hidden_states=(B, 5, 12))),
        E("diffusers-unet_1d/denoise", "unet_1d", "denoise", "UNet1DModel", d,
          _diffusers("UNet1DModel", sample_size=64, in_channels=2, out_channels=2, block_out_channels=(32, 32, 32),
                     extra_in_channels=64, down_block_types=("DownBlock1DNoSkip", "DownBlock1D", "AttnDownBlock1D"),
                     up_block_types=("AttnUpBlock1D", "UpBlock1D", "UpBlock1DNoSkip"),
                     mid_block_type="UNetMidBlock1D", out_block_type=None, act_fn=None),
          _inputs("sample", (2, 64), "int"), lr=1e-3),
        E("diffusers-dit/denoise", "dit", "denoise", "DiTTransformer2DModel", d,
          _diffusers("DiTTransformer2DModel", num_attention_heads=2, attention_head_dim=8, in_channels=4,
                     out_channels=4, num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=10,
                     norm_num_groups=4),
          _inputs("hidden_states", (4, 8, 8), "int", class_labels=lambda g: torch.tensor([1, 4]))),
        E("diffusers-pixart/denoise", "pixart", "denoise", "PixArtTransformer2DModel", d,
          _diffusers("PixArtTransformer2DModel", num_attention_heads=2, attention_head_dim=8, in_channels=4,
                     out_channels=8, num_layers=2, sample_size=8, patch_size=2, cross_attention_dim=16,
                     caption_channels=12, norm_num_groups=4),
          _inputs("hidden_states", (4, 8, 8), "int", target_shape=(8, 8, 8), encoder_hidden_states=(B, 5, 12),
                  added_cond_kwargs=lambda g: {"resolution": None, "aspect_ratio": None})),
        E("diffusers-sd3/denoise", "sd3", "denoise", "SD3Transformer2DModel", d,
          _diffusers("SD3Transformer2DModel", sample_size=8, patch_size=2, in_channels=4, num_layers=2,
                     attention_head_dim=8, num_attention_heads=2, joint_attention_dim=12,
                     caption_projection_dim=16, pooled_projection_dim=10, out_channels=4, pos_embed_max_size=16),
          _inputs("hidden_states", (4, 8, 8), "int", encoder_hidden_states=(B, 5, 12), pooled_projections=(B, 10))),
        E("diffusers-flux/denoise", "flux", "denoise", "FluxTransformer2DModel", d,
          _diffusers("FluxTransformer2DModel", patch_size=1, in_channels=8, num_layers=1, num_single_layers=1,
                     attention_head_dim=8, num_attention_heads=2, joint_attention_dim=12, pooled_projection_dim=10,
                     axes_dims_rope=(2, 2, 4)),
          _inputs("hidden_states", (16, 8), "float", encoder_hidden_states=(B, 5, 12), pooled_projections=(B, 10),
                  img_ids=(16, 3), txt_ids=lambda g: torch.zeros(5, 3))),
        E("diffusers-auraflow/denoise", "auraflow", "denoise", "AuraFlowTransformer2DModel", d,
          _diffusers("AuraFlowTransformer2DModel", sample_size=8, patch_size=2, in_channels=4, num_mmdit_layers=1,
                     num_single_dit_layers=1, attention_head_dim=8, num_attention_heads=2, joint_attention_dim=12,
                     caption_projection_dim=16, out_channels=4, pos_embed_max_size=16),
          _inputs("hidden_states", (4, 8, 8), "int", encoder_hidden_states=(B, 5, 12))),
        E("diffusers-sana/denoise", "sana", "denoise", "SanaTransformer2DModel", d,
          _diffusers("SanaTransformer2DModel", in_channels=4, out_channels=4, num_attention_heads=2,
                     attention_head_dim=8, num_layers=2, num_cross_attention_heads=2, cross_attention_head_dim=8,
                     cross_attention_dim=16, caption_channels=12, mlp_ratio=2.0, sample_size=8, patch_size=1,
                     norm_elementwise_affine=False),
          _inputs("hidden_states", (4, 8, 8), "int", encoder_hidden_states=(B, 5, 12))),
        E("diffusers-lumina2/denoise", "lumina2", "denoise", "Lumina2Transformer2DModel", d,
          _diffusers("Lumina2Transformer2DModel", sample_size=8, patch_size=2, in_channels=4, hidden_size=16,
                     num_layers=1, num_refiner_layers=1, num_attention_heads=2, num_kv_heads=1, multiple_of=8,
                     cap_feat_dim=12, axes_dim_rope=(4, 2, 2), axes_lens=(32, 32, 32)),
          _inputs("hidden_states", (4, 8, 8), "float", encoder_hidden_states=(B, 5, 12),
                  encoder_attention_mask=_bool_mask(5))),
        E("diffusers-transformer_2d/denoise", "transformer_2d", "denoise", "Transformer2DModel", d,
          _diffusers("Transformer2DModel", num_attention_heads=2, attention_head_dim=8, in_channels=8,
                     num_layers=1, norm_num_groups=4, cross_attention_dim=12),
          _inputs("hidden_states", (8, 4, 4), "int", encoder_hidden_states=(B, 5, 12))),
        E("diffusers-prior/denoise", "prior", "denoise", "PriorTransformer", d,
          _diffusers("PriorTransformer", num_attention_heads=2, attention_head_dim=8, num_layers=2, embedding_dim=12,
                     num_embeddings=5, additional_embeddings=4),
          _inputs("hidden_states", (12,), "int", proj_embedding=(B, 12), encoder_hidden_states=(B, 5, 12),
                  attention_mask=_bool_mask(5)), wrap=PriorLoss),
        E("diffusers-controlnet/residuals", "controlnet", "residuals", "ControlNetModel", d,
          _diffusers("ControlNetModel", in_channels=4, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                     conditioning_embedding_out_channels=(4, 8), **_CROSS),
          _inputs("sample", (4, 8, 8), "int", target_shape=False, encoder_hidden_states=(B, 5, 12),
                  controlnet_cond=(B, 3, 16, 16)), wrap=ControlNetLoss),
        E("diffusers-autoencoder_kl/reconstruct", "autoencoder_kl", "reconstruct", "AutoencoderKL", d,
          _diffusers("AutoencoderKL", **_AE), _image_batch, wrap=AutoencoderLoss),
        E("diffusers-vq_model/reconstruct", "vq_model", "reconstruct", "VQModel", d,
          _diffusers("VQModel", **dict(_AE, num_vq_embeddings=16, vq_embed_dim=4)), _image_batch,
          wrap=AutoencoderLoss),
        E("diffusers-autoencoder_tiny/reconstruct", "autoencoder_tiny", "reconstruct", "AutoencoderTiny", d,
          _diffusers("AutoencoderTiny", in_channels=3, out_channels=3, encoder_block_out_channels=(8, 8),
                     decoder_block_out_channels=(8, 8), num_encoder_blocks=(1, 1), num_decoder_blocks=(1, 1),
                     latent_channels=4), _image_batch, wrap=AutoencoderLoss),
    ]


def _schedulers() -> List[LibEntry]:
    """A sampling loop per scheduler class diffusers exports, over one tiny UNet."""
    import diffusers

    def noise(g):
        return {"noise": _randn(g, 1, 3, 8, 8), "seed": 2}

    out = []
    for cls_name in sorted(n for n in dir(diffusers) if n.endswith("Scheduler")):
        model_type = "sched_" + cls_name[: -len("Scheduler")].lower()
        out.append(LibEntry(f"diffusers-{model_type}/sample", model_type, "sample", cls_name, "diffusers",
                            _diffusers("UNet2DModel", **_UNET2D), noise, mode="infer", scheduler=cls_name))
    return out


# ---------------------------------------------------------------------------
# sentence-transformers: a tiny transformers encoder saved to a temporary folder
# (with a word-level vocabulary), loaded as a Transformer module, then pooling.

WORDS = [f"w{i}" for i in range(40)]
SENTENCES_A = ["w1 w2 w3", "w4 w5 w6 w7 w8 w9", "w10 w11", "w12 w13 w14 w15"]
SENTENCES_B = ["w1 w3 w16", "w17 w5", "w10 w11 w18 w19 w20", "w21"]

_ENCODERS = {
    "bert": ("BertConfig", dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)),
    "distilbert": ("DistilBertConfig", dict(dim=16, n_layers=2, n_heads=2, hidden_dim=32)),
    "roberta": ("RobertaConfig", dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=32, pad_token_id=0, bos_token_id=2, eos_token_id=3)),
    "mpnet": ("MPNetConfig", dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                                  pad_token_id=0, bos_token_id=2, eos_token_id=3)),
    "electra": ("ElectraConfig", dict(hidden_size=16, embedding_size=8, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=32)),
    "albert": ("AlbertConfig", dict(hidden_size=16, embedding_size=8, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=32, pad_token_id=0, bos_token_id=2, eos_token_id=3)),
    "deberta-v2": ("DebertaV2Config", dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                           intermediate_size=32, pad_token_id=0)),
    "modernbert": ("ModernBertConfig", dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                            intermediate_size=32, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                                            cls_token_id=2, sep_token_id=3)),
}

# pooling mode and the modules after it
_HEADS_ST = {"mean": ("mean", False), "cls_dense_norm": ("cls", True), "max": ("max", False)}


class SentencePairLoss(torch.nn.Module):
    """sentence-transformers' CosineSimilarityLoss over a SentenceTransformer."""

    def __init__(self, st):
        super().__init__()
        from sentence_transformers import losses

        self.st = st
        self.loss = losses.CosineSimilarityLoss(st)

    def forward(self, features_a, features_b, labels):
        loss = self.loss([features_a, features_b], labels)
        emb = self.st(dict(features_a))["sentence_embedding"]
        return {"loss": loss, "logits": emb}


def _sentence_transformer(kind: str, head: str):
    def make():
        import transformers as tf
        from sentence_transformers import SentenceTransformer, models

        tf.utils.logging.disable_progress_bar()  # saving and loading the model below

        cfg_name, cfg = _ENCODERS[kind]
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
        config = getattr(tf, cfg_name)(vocab_size=len(vocab), max_position_embeddings=40, **cfg)
        pooling_mode, dense = _HEADS_ST[head]
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "vocab.txt"), "w") as f:
                f.write("\n".join(vocab))
            tf.BertTokenizerFast(vocab_file=os.path.join(d, "vocab.txt")).save_pretrained(d)
            tf.AutoModel.from_config(config).save_pretrained(d)
            transformer = models.Transformer(d, max_seq_length=16)
        dim = transformer.get_embedding_dimension()
        mods = [transformer, models.Pooling(dim, pooling_mode)]
        if dense:
            mods += [models.Dense(dim, 8), models.Normalize()]
        return SentenceTransformer(modules=mods, device="cpu")

    return make


def _sentence_pairs(model_holder):
    def inputs(g):
        st = model_holder.st
        labels = torch.rand(len(SENTENCES_A), generator=g)
        return {"features_a": dict(st.tokenize(SENTENCES_A)), "features_b": dict(st.tokenize(SENTENCES_B)),
                "labels": labels}

    return inputs


class _StEntry(LibEntry):
    def batch(self, model, seed: int = 0) -> Dict[str, Any]:
        if self.mode == "infer":
            return {"sentences": SENTENCES_A + SENTENCES_B}
        return _sentence_pairs(model)(_g(1000 + seed))


def _encoders() -> List[LibEntry]:
    out: List[LibEntry] = []
    for kind in _ENCODERS:
        for head in _HEADS_ST:
            if kind != "bert" and head != "mean":
                continue  # the poolings and heads are the same modules over any encoder
            make = _sentence_transformer(kind, head)
            out.append(_StEntry(f"sentence_transformers-{kind}/{head}", kind, head, "SentenceTransformer",
                                "sentence_transformers", make, None, wrap=SentencePairLoss))
        out.append(_StEntry(f"sentence_transformers-{kind}/encode", kind, "encode", "SentenceTransformer",
                            "sentence_transformers", _sentence_transformer(kind, "mean"), None,
                            wrap=SentencePairLoss, mode="infer"))
    return out


# ---------------------------------------------------------------------------
# timm: image classifiers, trained as the others are (cross entropy, 3 SGD steps).

class ClassifierLoss(torch.nn.Module):
    """Cross entropy over an image classifier's logits."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values, labels):
        logits = self.model(pixel_values)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


# One architecture per timm model family (a module of timm.models and a name prefix):
# its smallest registered model by parameter count, among those of at most 30M
# parameters. name -> (image size, whether the model is built for that size with
# `img_size=`, timm module). Sizes are at least 64 px, with a batch of 8: smaller,
# the last batch norms normalize a handful of values and the CPU's own float32 run
# drifts from float64 over three steps. Picked by creating every registered model
# on the meta device (timm 1.0.31: 1,371 models, 191 families, 166 within the bound).
TIMM_MODELS = {
    "bat_resnext26ts": (256, True, "byobnet"), "botnet26t_256": (64, True, "byoanet"),
    "caformer_s18": (64, False, "metaformer"), "cait_xxs24_224": (64, True, "cait"), "coat_tiny": (64, True, "coat"),
    "coatnet_pico_rw_224": (64, True, "maxxvit"), "coatnext_nano_rw_224": (64, True, "maxxvit"),
    "convformer_s18": (64, False, "metaformer"), "convit_tiny": (64, True, "convit"),
    "convmixer_768_32": (64, False, "convmixer"), "convnext_zepto_rms": (64, False, "convnext"),
    "convnextv2_atto": (64, False, "convnext"), "cpubone_nano": (64, False, "cpubone"),
    "crossvit_tiny_240": (64, False, "crossvit"), "cs3darknet_focus_s": (64, False, "cspnet"),
    "csatv2": (64, False, "csatv2"), "cspdarknet53": (64, False, "cspnet"), "cspnext_tiny": (64, False, "cspnext"),
    "cspresnet50": (64, False, "cspnet"), "cspresnext50": (64, False, "cspnet"), "darknet17": (64, False, "cspnet"),
    "davit_tiny": (64, False, "davit"), "deit_tiny_patch16_224": (64, True, "deit"),
    "densenet121": (64, False, "densenet"), "densenetblur121d": (64, False, "densenet"),
    "dla46x_c": (64, False, "dla"), "dpn48b": (64, False, "dpn"), "eca_botnext26ts_256": (64, True, "byoanet"),
    "eca_nfnet_l0": (64, False, "nfnet"), "eca_resnext26ts": (64, True, "byobnet"),
    "eca_vovnet39b": (64, False, "vovnet"), "ecaresnet26t": (64, False, "resnet"),
    "ecaresnetlight": (64, False, "resnet"), "ecaresnext26t_32x4d": (64, False, "resnet"),
    "edgenext_xx_small": (64, False, "edgenext"), "efficientformer_l1": (224, True, "efficientformer"),
    "efficientformerv2_s0": (64, True, "efficientformer_v2"), "efficientnet_lite0": (64, False, "efficientnet"),
    "efficientnetv2_rw_t": (64, False, "efficientnet"), "efficientvim_m1": (64, False, "efficientvim"),
    "efficientvit_b0": (64, False, "efficientvit_mit"), "efficientvit_m0": (64, True, "efficientvit_msra"),
    "ese_vovnet19b_slim_dw": (64, False, "vovnet"), "eva02_tiny_patch14_224": (64, True, "eva"),
    "fasternet_t0": (64, False, "fasternet"), "fastvit_t8": (64, False, "fastvit"),
    "fbnetc_100": (64, False, "efficientnet"), "fbnetv3_b": (64, False, "mobilenetv3"),
    "flexivit_small": (64, True, "vision_transformer"), "focalnet_tiny_srf": (64, False, "focalnet"),
    "gc_efficientnetv2_rw_t": (64, False, "efficientnet"), "gcresnet33ts": (64, True, "byobnet"),
    "gcresnext26ts": (64, True, "byobnet"), "gcvit_xxtiny": (64, True, "gcvit"), "gernet_s": (64, True, "byobnet"),
    "ghostnet_050": (64, False, "ghostnet"), "ghostnetv3_050": (64, False, "ghostnet"),
    "gmixer_12_224": (64, True, "mlp_mixer"), "gmlp_ti16_224": (64, True, "mlp_mixer"),
    "halo2botnet50ts_256": (128, True, "byoanet"), "halonet_h1": (256, False, "byoanet"),
    "haloregnetz_b": (224, True, "byoanet"), "hardcorenas_b": (64, False, "hardcorenas"),
    "hgnet_tiny": (64, False, "hgnet"), "hgnetv2_b0": (64, False, "hgnet"), "hiera_tiny_224": (64, True, "hiera"),
    "hrnet_w18_small": (64, False, "hrnet"), "iformer_t": (64, False, "iformer"),
    "inception_next_atto": (64, False, "inception_next"), "inception_v3": (96, False, "inception_v3"),
    "lambda_resnet26t": (64, True, "byoanet"), "lamhalobotnet50ts_256": (128, True, "byoanet"),
    "lcnet_035": (64, False, "mobilenetv3"), "lcnetv2_small": (64, False, "lcnetv2"),
    "legacy_seresnet18": (64, False, "senet"), "legacy_xception": (64, False, "xception"),
    "levit_128s": (64, True, "levit"), "lowformer_b0": (64, False, "lowformer"),
    "mambaout_femto": (64, False, "mambaout"), "maxvit_pico_rw_256": (64, True, "maxxvit"),
    "maxxvit_rmlp_nano_rw_256": (64, True, "maxxvit"), "maxxvitv2_nano_rw_256": (64, True, "maxxvit"),
    "mixer_s16_224": (64, True, "mlp_mixer"), "mixnet_s": (64, False, "efficientnet"),
    "mnasnet_small": (64, False, "efficientnet"), "mobilenet_edgetpu_100": (64, False, "efficientnet"),
    "mobilenetv2_035": (64, False, "efficientnet"), "mobilenetv3_small_050": (64, False, "mobilenetv3"),
    "mobileone_s1": (64, True, "byobnet"), "mobilevit_xxs": (64, True, "mobilevit"),
    "mobilevitv2_050": (64, True, "mobilevit"), "mvitv2_tiny": (64, True, "mvitv2"), "nest_tiny": (64, True, "nest"),
    "nf_regnet_b0": (64, False, "nfnet"), "pit_ti_224": (64, True, "pit"),
    "poolformer_s12": (64, False, "metaformer"), "poolformerv2_s12": (64, False, "metaformer"),
    "pvt_v2_b0": (64, False, "pvt_v2"), "rdnet_tiny": (64, False, "rdnet"), "regnetv_040": (64, False, "regnet"),
    "regnetx_002": (64, False, "regnet"), "regnety_002": (64, False, "regnet"), "regnetz_005": (64, False, "regnet"),
    "regnetz_b16": (64, True, "byobnet"), "repghostnet_050": (64, False, "repghost"),
    "repvgg_a0": (64, True, "byobnet"), "repvit_m1": (64, True, "repvit"), "res2next50": (64, False, "res2net"),
    "resmlp_12_224": (64, True, "mlp_mixer"), "resnest14d": (64, False, "resnest"),
    "resnet10t": (64, False, "resnet"), "resnet32ts": (64, True, "byobnet"), "resnetaa34d": (64, False, "resnet"),
    "resnetblur18": (64, False, "resnet"), "resnetv2_18": (64, False, "resnetv2"),
    "resnext26ts": (64, True, "byobnet"), "resnext50_32x4d": (64, False, "resnet"),
    "rexnet_100": (64, False, "rexnet"), "rexnetr_100": (64, False, "rexnet"),
    "sam2_hiera_tiny": (64, False, "hieradet_sam2"), "sebotnet33ts_256": (64, True, "byoanet"),
    "sedarknet21": (64, False, "cspnet"), "sehalonet33ts": (256, True, "byoanet"),
    "selecsls42": (64, False, "selecsls"), "semnasnet_050": (64, False, "efficientnet"),
    "sequencer2d_s": (64, True, "sequencer"), "seresnet18": (64, False, "resnet"),
    "seresnet33ts": (64, True, "byobnet"), "seresnetaa50d": (64, False, "resnet"),
    "seresnext26t_32x4d": (64, False, "resnet"), "seresnext26ts": (64, True, "byobnet"),
    "shvit_s1": (64, False, "shvit"), "skresnet18": (64, False, "sknet"), "skresnext50_32x4d": (64, False, "sknet"),
    "spnasnet_100": (64, False, "efficientnet"), "starnet_s050": (64, False, "starnet"),
    "swiftformer_xs": (64, True, "swiftformer"), "swin_tiny_patch4_window7_224": (64, True, "swin_transformer"),
    "swinv2_cr_tiny_224": (64, True, "swin_transformer_v2_cr"),
    "swinv2_tiny_window8_256": (64, True, "swin_transformer_v2"), "test_byobnet": (64, True, "byobnet"),
    "test_coatnet": (64, True, "maxxvit"), "test_convnext": (64, False, "convnext"),
    "test_efficientnet": (64, False, "efficientnet"), "test_mambaout": (64, False, "mambaout"),
    "test_nfnet": (64, False, "nfnet"), "test_resnet": (64, False, "resnet"),
    "test_vit": (64, True, "vision_transformer"), "test_vit_relpos": (64, True, "vision_transformer_relpos"),
    "tf_mixnet_s": (64, False, "efficientnet"), "tf_mobilenetv3_small_075": (64, False, "mobilenetv3"),
    "tiny_vit_5m_224": (64, False, "tiny_vit"), "tinynet_e": (64, False, "efficientnet"),
    "tnt_s_legacy_patch16_224": (64, True, "tnt"), "tresnet_m": (64, False, "tresnet"),
    "twins_svt_small": (64, True, "twins"), "visformer_tiny": (64, True, "visformer"),
    "vit_srelpos_small_patch16_224": (64, True, "vision_transformer_relpos"),
    "vit_tiny_patch16_224": (64, True, "vision_transformer"), "vit_tiny_patch16_dinov3_qkvb": (64, True, "eva"),
    "vit_tiny_r_s16_p8_224": (64, True, "vision_transformer_hybrid"), "vitamin_small_224": (64, True, "vitamin"),
    "volo_d1_224": (64, True, "volo"), "vovnet39a": (64, False, "vovnet"),
    "xception41p": (64, False, "xception_aligned"), "xcit_nano_12_p8_224": (64, True, "xcit"),
}
TIMM_BATCH = 8
# Deep batch-normed networks at the zoo's rate of 0.1 diverge within three steps from
# random weights (inception_v3's loss moves by 4 between float32 and float64 on the
# CPU alone), and then the comparison measures chaos, not the device.
TIMM_LR = 1e-2
TIMM_CLASSES = 8


def _timm(name: str, size: int, img_size: bool):
    def make():
        import timm

        kw = {"img_size": size} if img_size else {}
        return timm.create_model(name, pretrained=False, num_classes=TIMM_CLASSES, **kw)

    def inputs(g):
        return {"pixel_values": _randn(g, TIMM_BATCH, 3, size, size),
                "labels": torch.randint(0, TIMM_CLASSES, (TIMM_BATCH,), generator=g)}

    return make, inputs


def _timm_models() -> List[LibEntry]:
    out = []
    for name, (size, img_size, module) in TIMM_MODELS.items():
        make, inputs = _timm(name, size, img_size)
        out.append(LibEntry(f"timm-{name}/classify", name, "classify", module, "timm", make, inputs,
                            wrap=ClassifierLoss, lr=TIMM_LR))
    return out


def classify(entry: LibEntry, model: torch.nn.Module) -> Dict[str, List[str]]:
    """Traits of a library entry, in traits.py's dimensions plus "library"; read from
    module class names, as traits.py does for transformers."""
    names = {type(m).__name__ for m in model.modules()}
    lower = " ".join(sorted(names)).lower()
    # The poolings of a sentence encoder are one head: the pair loss over them.
    head = "sentence_pair" if entry.library == "sentence_transformers" and entry.mode == "train" else entry.head
    t: Dict[str, set] = {"library": {entry.library}, "head": {head}}
    convs = any(isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)) for m in model.modules())
    if entry.library == "sentence_transformers":
        t["front_end"] = {"token-embedding"}
        t["structure"] = {"encoder"}
    elif entry.library == "timm":
        patches = "patchembed" in lower or "patch_embed" in " ".join(n for n, _ in model.named_modules())
        attends = "attention" in lower or "attn" in lower
        t["front_end"] = {"patch-embedding"} if patches else {"conv-stem"}
        t["structure"] = {"vision-transformer" if attends and patches else "conv-attention" if attends else "cnn"}
    elif "PatchEmbed" in lower or "patchembed" in lower or entry.model_type in ("flux", "lumina2", "prior"):
        t["front_end"] = {"patch-embedding"}
        t["structure"] = {"diffusion-transformer"}
    else:
        t["front_end"] = {"conv-stem"} if convs else {"none"}
        t["structure"] = {"unet" if "unet" in entry.class_name.lower() or entry.head == "residuals"
                          else "autoencoder" if entry.head == "reconstruct" else "other"}
    if entry.scheduler is not None:
        t["structure"] = {"scheduler-loop"}
    t["attention"] = set()
    if "attention" in lower or "attn" in lower:
        t["attention"].add("mha")
        if "crossattn" in lower or "transformer2dmodel" in lower or "jointtransformer" in lower \
                or "cross_attention" in " ".join(n for n, _ in model.named_modules()).lower() \
                or any("attn2" in n for n, _ in model.named_modules()):
            t["attention"].add("cross-attention")
    t["attention"] = t["attention"] or {"none"}
    t["position"] = set()
    if any("Timestep" in n or "Fourier" in n for n in names):
        t["position"].add("sinusoidal")   # the timestep's embedding
    if any("Rope" in n or "Rotary" in n or "PosEmbed" in n for n in names):
        t["position"].add("rotary")
    for n, _ in model.named_parameters():
        if "relative_position" in n or "rel_pos" in n:
            t["position"].add("relative-bias")
        elif "position" in n or "pos_embed" in n:
            t["position"].add("learned-absolute")
    t["position"] = t["position"] or {"none"}
    t["norm"] = set()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            t["norm"].add("batchnorm")
        elif isinstance(m, torch.nn.GroupNorm):
            t["norm"].add("groupnorm")
        elif isinstance(m, torch.nn.LayerNorm):
            t["norm"].add("layernorm")
        elif "RMSNorm" in type(m).__name__:
            t["norm"].add("rmsnorm")
        elif "AdaLayerNorm" in type(m).__name__:
            t["norm"].add("adaptive-norm")
    t["norm"] = t["norm"] or {"none"}
    t["mlp"] = {"gated"} if "geglu" in lower or "swiglu" in lower else set()
    for frag, act in (("gelu", "gelu"), ("silu", "silu"), ("mish", "silu"), ("relu", "relu")):
        if frag in lower:
            t["mlp"].add(act)
    t["mlp"] = t["mlp"] or {"other"}
    return {k: sorted(v) for k, v in t.items()}


def entries() -> List[LibEntry]:
    """Every entry of the libraries above, sorted by name."""
    return sorted(_denoisers() + _schedulers() + _encoders() + _timm_models(), key=lambda e: e.name)
