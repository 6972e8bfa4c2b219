"""The model zoo's catalog: every Hugging Face transformers model type that has a
trainable head, as (architecture, head) entries, each with a tiny config and an
input builder.

    from tests.zoo import catalog
    entries = catalog.entries()                 # sorted by name, e.g. "bert/masked_lm"
    e = catalog.by_name()["llama/causal_lm"]
    config = e.config()                         # tiny: 2 layers, hidden 32, vocab 128
    model = e.build(seed=0)                     # random weights, on the CPU
    batch = e.batch(model, seed=0)              # inputs and labels for one step

The heads come from transformers' auto mappings (HEADS). A config is the config
class's defaults passed through one generic shrinking function (`shrink`, sizes
in SIZES) plus a small per-model override (OVERRIDES); no hub access. Inputs
come from one builder per head, with per-model hooks for the few that need more.

An entry that cannot be built or trained even on the CPU is "config-broken": it
stays in the catalog, marked in CONFIG_BROKEN with the CPU error (refresh with
`python tests/zoo/run_model.py --cpu-check --write-broken`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

BATCH = 2
SEQ = 16          # text length; the sliding window (8) is shorter, so it matters
TARGET_SEQ = 8    # decoder length of seq2seq models
VOCAB = 128
HIDDEN = 32
FFN = 64
LAYERS = 2
HEADS_N = 4
HEAD_DIM = HIDDEN // HEADS_N
NUM_LABELS = 3
IMAGE = 32
AUDIO_SAMPLES = 1024   # raw waveform length: 16 frames after the 64x conv stem below
MEL_FRAMES = 32

# head -> the auto mapping(s) its model classes come from.
HEADS = {
    "causal_lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked_lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "seq2seq_lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "seq_cls": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "token_cls": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "qa": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "image_cls": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "masked_image": "MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES",
    "audio_cls": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "audio_frame_cls": "MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES",
    "audio_xvector": "MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES",
    "ctc": "MODEL_FOR_CTC_MAPPING_NAMES",
    "speech_seq2seq": "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "multimodal_lm": "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
}

# A model type listed under several heads with the same class is one entry, under
# the first of these heads (bart's ForConditionalGeneration is its seq2seq_lm,
# not also its masked_lm).
HEAD_PRECEDENCE = ["causal_lm", "seq2seq_lm", "speech_seq2seq", "multimodal_lm", "masked_lm",
                   "seq_cls", "token_cls", "qa", "image_cls", "masked_image", "audio_cls",
                   "audio_frame_cls", "audio_xvector", "ctc"]

# ---------------------------------------------------------------------------
# The generic shrinking function.

_HIDDEN_KEYS = {"hidden_size", "d_model", "n_embd", "dim", "embed_dim", "word_embed_proj_dim",
                "embedding_size", "d_embed", "emb_dim", "model_dim", "text_hidden_size"}
_FFN_KEYS = {"intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "d_ff",
             "ffn_hidden_size", "inner_hidden_size", "d_inner", "intermediate_dim", "mlp_dim",
             "feed_forward_size", "decoder_intermediate_size", "encoder_intermediate_size"}
_LAYER_KEYS = {"num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers",
               "decoder_layers", "num_decoder_layers", "num_encoder_layers", "depth",
               "decoder_num_hidden_layers", "encoder_num_hidden_layers", "num_text_layers",
               "num_vision_layers"}
_HEAD_KEYS = {"num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
              "decoder_attention_heads", "num_decoder_attention_heads", "decoder_num_attention_heads",
              "encoder_num_attention_heads"}
_KV_KEYS = {"num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num",
            "n_head_kv", "num_kv_groups", "decoder_num_key_value_heads"}
_HEAD_DIM_KEYS = {"head_dim", "d_kv", "kv_channels", "attention_head_size", "d_head", "attention_head_dim"}
_POSITION_KEYS = {"max_position_embeddings", "n_positions", "n_ctx", "max_target_positions",
                  "max_seq_len", "max_sequence_length", "max_2d_position_embeddings",
                  "max_text_positions", "max_seq_length"}
_SIZES = {
    "vocab_size": VOCAB,
    "sliding_window": 8, "sliding_window_size": 8, "attention_window": 8, "local_window_size": 8,
    # mixture of experts: 4 experts, top-2, small experts, the second layer sparse
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_routed_experts": 4, "num_experts_per_tok": 2, "moe_topk": 2, "moe_k": 2,
    "num_selected_experts": 2, "moe_intermediate_size": 32, "expert_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "moe_shared_expert_intermediate_size": 32,
    "shared_intermediate_size": 32, "n_shared_experts": 1, "num_shared_experts": 1,
    "moe_num_shared_experts": 1, "first_k_dense_replace": 1, "num_dense_layers": 1,
    "n_group": 1, "topk_group": 1,
    # multi-head latent attention
    "q_lora_rank": 16, "kv_lora_rank": 16, "qk_rope_head_dim": 4, "qk_nope_head_dim": 4,
    "v_head_dim": 8, "qk_head_dim": 8,
    # state-space and recurrent mixers
    "state_size": 8, "mamba_d_state": 8, "ssm_state_size": 8, "d_state": 8, "time_step_rank": 4,
    "mamba_dt_rank": 4, "chunk_size": 8, "mamba_chunk_size": 8, "mamba_d_head": 8,
    "mamba_head_dim": 8, "mamba_n_heads": 8, "attention_hidden_size": HIDDEN,
    "lru_width": HIDDEN,
    # multimodal glue
    "projection_dim": HIDDEN, "pooler_output_size": HIDDEN, "pooler_hidden_size": HIDDEN,
    "classifier_proj_size": 16, "num_codevectors_per_group": 8, "codevector_dim": 16,
    "proj_codevector_dim": 16, "num_negatives": 4, "output_hidden_size": HIDDEN,
    "xvector_output_dim": 16, "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": VOCAB,
    "num_mel_bins": 16, "mm_tokens_per_image": 4,
}
_TOKEN_ID_FIXED = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                   "decoder_start_token_id": 0, "sep_token_id": 3, "cls_token_id": 1,
                   "mask_token_id": 3, "unk_token_id": 3}
_SUB_CONFIG_KEYS = {"text_config", "vision_config", "audio_config", "encoder", "decoder",
                    "encoder_config", "decoder_config", "speech_config", "vq_config", "qformer_config",
                    "perceiver_config", "backbone_config", "projector_config", "thinker_config",
                    "talker_config", "t2u_config", "audio_encoder", "text_encoder", "decoder_config"}
_SKIP_KEYS = {"id2label", "label2id", "transformers_version", "architectures", "_name_or_path",
              "model_type", "torch_dtype", "dtype", "rope_parameters", "rope_scaling"}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shrink_layer_lists(d: Dict[str, Any], n_before: int) -> int:
    """Per-layer lists (layer_types and friends, as long as the default layer count) keep
    each distinct kind once, so a 2-layer model still has a sliding and a full layer."""
    per_layer = [k for k, v in d.items() if isinstance(v, (list, tuple)) and len(v) == n_before and n_before > 2
                 and k not in ("stage_names", "out_features", "out_indices")]
    if not per_layer:
        return LAYERS
    key = "layer_types" if "layer_types" in per_layer else per_layer[0]
    seen, keep = set(), []
    for i, v in enumerate(d[key]):
        marker = repr(v)
        if marker not in seen:
            seen.add(marker)
            keep.append(i)
    for i in range(n_before):
        if len(keep) >= LAYERS:
            break
        if i not in keep:
            keep.append(i)
    keep = sorted(keep[:max(LAYERS, min(len(keep), 4))])
    for k in per_layer:
        d[k] = [d[k][i] for i in keep]
    return len(keep)


def shrink(d: Dict[str, Any], vocab: int = VOCAB) -> Dict[str, Any]:
    """A config dict (from `to_dict()`) made tiny: sizes from SIZES, dropout 0, special
    token ids inside the small vocab, nested sub-configs shrunk the same way."""
    d = {k: copy.deepcopy(v) for k, v in d.items() if k not in ("id2label", "label2id")}
    heads_before = next((d[k] for k in _HEAD_KEYS if _is_int(d.get(k))), None)
    layers_before = next((d[k] for k in ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
                          if _is_int(d.get(k))), None)
    n_layers = LAYERS
    if layers_before:
        n_layers = _shrink_layer_lists(d, layers_before)
    extra_ids = iter(range(vocab - 1, vocab - 64, -1))
    for k, v in list(d.items()):
        if k in _SKIP_KEYS:
            continue
        if isinstance(v, dict) and (k in _SUB_CONFIG_KEYS or "model_type" in v):
            d[k] = shrink(v, vocab)
            continue
        if isinstance(v, float):
            if "dropout" in k or "drop_path" in k or "layerdrop" in k or k.endswith("_prob") \
                    or k.endswith("drop_rate") or "jitter" in k:
                d[k] = 0.0
            continue
        if not _is_int(v):
            continue
        if k in _HIDDEN_KEYS:
            d[k] = min(v, HIDDEN)
        elif k in _FFN_KEYS:
            d[k] = min(v, FFN)
        elif k in _LAYER_KEYS:
            d[k] = min(v, n_layers if k in ("num_hidden_layers", "n_layer", "num_layers", "n_layers") else LAYERS)
        elif k in _HEAD_KEYS:
            d[k] = min(v, HEADS_N)
        elif k in _KV_KEYS:
            d[k] = 1 if v == 1 else (2 if heads_before and v < heads_before else HEADS_N)
        elif k in _HEAD_DIM_KEYS:
            d[k] = min(v, HEAD_DIM)
        elif k in _POSITION_KEYS:
            d[k] = min(v, 128)
        elif k in _SIZES:
            d[k] = min(v, _SIZES[k])
        elif k.endswith("token_id") or k.endswith("token_index") or k.endswith("_token"):
            if v >= vocab or v < 0:
                d[k] = _TOKEN_ID_FIXED.get(k, next(extra_ids))
        elif k == "image_size":
            d[k] = IMAGE
        elif k == "patch_size":
            d[k] = min(v, 8)
    for k in ("eos_token_id", "bos_token_id", "pad_token_id"):
        if isinstance(d.get(k), list):
            d[k] = [t if t < vocab else _TOKEN_ID_FIXED[k] for t in d[k]]
    if isinstance(d.get("image_size"), (list, tuple)):
        d["image_size"] = [IMAGE, IMAGE]
    if isinstance(d.get("patch_size"), (list, tuple)):
        d["patch_size"] = [min(p, 8) for p in d["patch_size"]]
    if "use_cache" in d:
        d["use_cache"] = False
    return d


def deep_update(base: Dict[str, Any], over: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and not v.get("__replace__"):
            out[k] = deep_update(out[k], v)
        else:
            out[k] = {a: b for a, b in v.items() if a != "__replace__"} if isinstance(v, dict) else v
    return out


# ---------------------------------------------------------------------------
# Per-model overrides, applied to the shrunk dict (nested dicts merge). Keys are a
# model type (every head) or an entry name ("model_type/head").

_W2V_AUDIO = dict(conv_dim=[16, 16, 16], conv_stride=[4, 4, 4], conv_kernel=[8, 8, 8],
                  num_feat_extract_layers=3, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                  tdnn_dim=[16, 16, 16], tdnn_kernel=[3, 3, 1], tdnn_dilation=[1, 2, 1],
                  ctc_loss_reduction="mean", ctc_zero_infinity=True, apply_spec_augment=False,
                  mask_time_prob=0.0, mask_feature_prob=0.0, vocab_size=32, num_adapter_layers=1)

OVERRIDES: Dict[str, Dict[str, Any]] = {
    "wav2vec2": _W2V_AUDIO, "hubert": _W2V_AUDIO, "wavlm": _W2V_AUDIO, "unispeech": _W2V_AUDIO,
    "unispeech-sat": _W2V_AUDIO, "data2vec-audio": dict(_W2V_AUDIO, conv_pos_kernel_size=5),
    "wav2vec2-conformer": _W2V_AUDIO, "sew": dict(_W2V_AUDIO, squeeze_factor=2),
    "sew-d": dict(_W2V_AUDIO, squeeze_factor=2, max_position_embeddings=32, position_buckets=16),
    "wav2vec2-bert": dict(_W2V_AUDIO, feature_projection_input_dim=16, conv_depthwise_kernel_size=3),
}

# Entries run with custom input hooks: name or model type -> callable(entry, model, batch, g)
# that edits the batch built for the head.
BATCH_HOOKS: Dict[str, Callable] = {}

# Entries that fail on the CPU with their tiny config: name -> the CPU error.
CONFIG_BROKEN: Dict[str, str] = {}


# ---------------------------------------------------------------------------
# Entries.

@dataclasses.dataclass
class Entry:
    name: str          # "model_type/head"
    model_type: str
    head: str
    class_name: str
    broken: Optional[str] = None   # the CPU error, for a config-broken entry

    def config_dict(self) -> Dict[str, Any]:
        from transformers import CONFIG_MAPPING

        base = CONFIG_MAPPING[self.model_type]().to_dict()
        d = shrink(base)
        for key in (self.model_type, self.name):
            if key in OVERRIDES:
                d = deep_update(d, OVERRIDES[key])
        if self.head in ("seq_cls", "token_cls", "image_cls", "audio_cls", "audio_frame_cls",
                         "audio_xvector"):
            d["num_labels"] = NUM_LABELS
        return d

    def config(self):
        from transformers import CONFIG_MAPPING

        d = self.config_dict()
        d.pop("model_type", None)
        d.pop("transformers_version", None)
        if "num_labels" in d:
            n = d.pop("num_labels")
            d["id2label"] = {i: f"L{i}" for i in range(n)}
            d["label2id"] = {f"L{i}": i for i in range(n)}
        return CONFIG_MAPPING[self.model_type](**d)

    def model_class(self):
        import transformers

        return getattr(transformers, self.class_name)

    def build(self, seed: int = 0):
        """The model with random weights from `seed`, on the CPU, in training mode."""
        config = self.config()
        torch.manual_seed(seed)
        model = self.model_class()(config)
        model.train()
        return model

    def batch(self, model, seed: int = 0) -> Dict[str, Any]:
        """Inputs and labels for one training step, on the CPU, from `seed`."""
        import inputs  # tests/zoo is on sys.path (the zoo's scripts put it there)

        return inputs.make_batch(self, model, seed)


def _class_name(v) -> str:
    return v[0] if isinstance(v, (tuple, list)) else v


def entries() -> List[Entry]:
    """Every (architecture, head) entry, sorted by name."""
    from transformers.models.auto import modeling_auto

    found: Dict[str, Entry] = {}
    classes_seen = set()
    for head in HEAD_PRECEDENCE:
        for model_type, cls in getattr(modeling_auto, HEADS[head]).items():
            cls = _class_name(cls)
            if (model_type, cls) in classes_seen:
                continue
            classes_seen.add((model_type, cls))
            name = f"{model_type}/{head}"
            found[name] = Entry(name, model_type, head, cls, CONFIG_BROKEN.get(name))
    return [found[k] for k in sorted(found)]


def by_name() -> Dict[str, Entry]:
    return {e.name: e for e in entries()}
