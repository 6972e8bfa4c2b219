"""The model zoo's catalog: every Hugging Face transformers model type that has a
trainable head, as (architecture, head) entries, each with a tiny config and an
input builder.

    from tests.zoo import catalog
    entries = catalog.entries()                 # sorted by name, e.g. "bert/masked_lm"
    e = catalog.by_name()["llama/causal_lm"]
    config = e.config()                         # tiny: 2 layers, hidden 32, vocab 128
    model = e.build(seed=0)                     # random weights, on the CPU
    batch = e.batch(model, seed=0)              # inputs and labels for one step

Entries of diffusers and sentence-transformers come from catalog_libs.py.

The heads come from transformers' auto mappings (HEADS). A config is the config
class's defaults passed through one generic shrinking function (`shrink`: the
size keys and _SIZES) plus a small per-model override (OVERRIDES); no hub access. Inputs
come from one builder per head, with per-model hooks for the few that need more.

An entry that cannot be built or trained even on the CPU is "config-broken": it
stays in the catalog, marked with the CPU error from config_broken.json (refresh
it with `python tests/zoo/run_model.py --cpu-check --write-broken`).
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
        if isinstance(v, list) and v and all(isinstance(x, float) for x in v) and (
                "drop" in k or k.endswith("_prob")):
            d[k] = [0.0] * len(v)   # per-stage dropout rates (cvt)
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
    for k, v in list(d.items()):  # per-layer sizes given as lists (gemma3n's intermediate_size)
        if isinstance(v, list) and v and all(_is_int(x) for x in v) and d.get("model_type") not in _KEEP_STAGES:
            if k in _FFN_KEYS:
                d[k] = [min(x, FFN) for x in v]
            elif k in _HIDDEN_KEYS:
                d[k] = [min(x, HIDDEN) for x in v]
    if isinstance(d.get("per_layer_config"), dict):
        d["per_layer_config"] = {k: v for k, v in d["per_layer_config"].items() if int(k) < n_layers}
    _fill_missing(d)
    _shrink_stages(d)
    for k in ("stage_names", "out_features", "out_indices"):
        d.pop(k, None)   # recomputed from the (fewer) stages
    for k in ("eos_token_id", "bos_token_id", "pad_token_id"):
        if isinstance(d.get(k), list):
            d[k] = [t if t < vocab else _TOKEN_ID_FIXED[k] for t in d[k]]
    if isinstance(d.get("image_size"), (list, tuple)):
        d["image_size"] = [IMAGE, IMAGE]
    if isinstance(d.get("patch_size"), (list, tuple)):
        d["patch_size"] = [min(p, 8) for p in d["patch_size"]]
    if "use_cache" in d:
        d["use_cache"] = False
    if _is_int(d.get("encoder_stride")) and _is_int(d.get("patch_size")):
        d["encoder_stride"] = d["patch_size"]   # masked image modeling reconstructs patch by patch
    if d.get("is_encoder_decoder") and d.get("decoder_start_token_id") is None:
        d["decoder_start_token_id"] = d.get("pad_token_id") or 0
    return d


_FILL_IF_NONE = {  # fields a default config leaves None that the model needs
    "head_dim": HEAD_DIM, "num_key_value_heads": HEADS_N, "vocab_size": VOCAB,
    "num_experts_per_tok": 2, "n_routed_experts": 4, "n_shared_experts": 1, "n_group": 1,
    "topk_group": 1, "num_experts_per_token": 2, "num_expert_group": 1, "moe_top_k": 2,
}


def _fill_missing(d: Dict[str, Any]) -> None:
    has_heads = any(_is_int(d.get(k)) for k in _HEAD_KEYS)
    for k, v in _FILL_IF_NONE.items():
        if k in d and d[k] is None:
            if k in ("head_dim", "num_key_value_heads") and not has_heads:
                continue
            d[k] = v
    if _is_int(d.get("qk_rope_head_dim")) and _is_int(d.get("head_dim")):
        d["head_dim"] = d["qk_rope_head_dim"]   # multi-head latent attention rotates only the rope part
    for k in ("rotary_dim", "rotary_emb_base_dim"):
        if _is_int(d.get(k)):
            d[k] = min(d[k], HEAD_DIM // 2)
    for k in ("decoder_vocab_size", "src_vocab_size", "tgt_vocab_size", "target_vocab_size",
              "text_vocab_size", "audio_vocab_size", "embedding_dim"):
        if _is_int(d.get(k)):
            d[k] = min(d[k], VOCAB if "vocab" in k else HIDDEN)


# Stage lists these models index in ways the generic cut breaks; their defaults are small enough.
_KEEP_STAGES = {"hgnet_v2", "textnet", "cvt", "pp_lcnet", "hiera", "pvt"}
_STAGE_WIDTH_KEYS = {"hidden_sizes", "embed_dims", "embed_dim", "dims", "out_channels", "stage_out_channels",
                     "neck_hidden_sizes", "base_attn_unit_dims", "channels", "widths"}
_STAGE_HEAD_KEYS = {"num_heads", "num_attention_heads", "heads"}


def _shrink_stages(d: Dict[str, Any]) -> None:
    """Convolutional / hierarchical vision models: the first 2 stages, 1 block each,
    widths 16 and 32, heads 1 and 2; every per-stage list cut to match."""
    key = next((k for k in ("depths", "depth", "hidden_sizes") if isinstance(d.get(k), (list, tuple))), None)
    if key is None or d.get("model_type") in _KEEP_STAGES:
        return
    n_before = len(d[key])
    n = min(n_before, 2)
    for k, v in list(d.items()):
        if isinstance(v, (list, tuple)) and len(v) == n_before and k not in ("image_size", "patch_size"):
            d[k] = list(v[:n])
    for k in ("depths", "depth"):
        if isinstance(d.get(k), list):
            d[k] = [1] * n
    for k in _STAGE_WIDTH_KEYS:
        if isinstance(d.get(k), list) and len(d[k]) == n and all(_is_int(x) for x in d[k]):
            d[k] = [16 * 2 ** i for i in range(n)]
    for k in _STAGE_HEAD_KEYS:
        if isinstance(d.get(k), list) and len(d[k]) == n and all(_is_int(x) for x in d[k]):
            d[k] = [min(x, 2 ** i) for i, x in enumerate(d[k])]
    for k in ("num_stages", "num_encoder_blocks"):
        if _is_int(d.get(k)) and d[k] == n_before:
            d[k] = n
    if _is_int(d.get("embed_dim")):
        d["embed_dim"] = 16
    if isinstance(d.get("hidden_sizes"), list) and _is_int(d.get("embedding_size")):
        d["embedding_size"] = 16


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
    "whisper": dict(max_source_positions=MEL_FRAMES // 2),
    "ministral": dict(layer_types=["sliding_attention", "full_attention"], num_hidden_layers=2),
    "cohere_compass_text": dict(rope_parameters={"__replace__": True, "full_attention":
                                                 {"rope_type": "default", "rope_theta": 10000.0}}),
    "cohere_compass": dict(text_config=dict(rope_parameters={"__replace__": True, "full_attention":
                                                             {"rope_type": "default", "rope_theta": 10000.0}})),
    "dbrx": dict(d_model=HIDDEN, n_heads=HEADS_N, attn_config=dict(kv_n_heads=2, rope_theta=10000.0),
                 ffn_config=dict(hidden_size=HIDDEN, ffn_hidden_size=FFN, moe_num_experts=4, moe_top_k=2)),
    "lfm2_moe": dict(layer_types=["conv", "full_attention"], num_dense_layers=1),
    "lfm2": dict(layer_types=["conv", "full_attention"]),
    "xmod": dict(default_language="en_XX"),
    "mamba2": dict(num_heads=8, head_dim=8, n_groups=1, state_size=8),
    "falcon_h1": dict(mamba_d_ssm=64, mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=1, mamba_d_state=8),
    "granitemoehybrid": dict(mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=1, mamba_d_state=8,
                             layer_types=["mamba", "attention"]),
    "nemotron_h": dict(mamba_num_heads=8, mamba_head_dim=8, n_groups=1, ssm_state_size=8,
                       layers_block_type=["mamba", "moe", "attention", "mlp"], num_hidden_layers=4),
    "bamba": dict(mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=1, mamba_d_state=8),
    "dory": dict(num_hidden_layers=4, n_input_layers=1, n_recurrent_layers=2, n_output_layers=1,
                 n_recurrent_loops=2, layer_types=["sliding_attention", "mlp", "full_attention", "mlp"]),
    "reformer": dict(attention_head_size=8, axial_pos_shape=[4, 4], axial_pos_embds_dim=[16, 16],
                     local_attn_chunk_length=4, lsh_attn_chunk_length=4, num_buckets=2, hash_seed=0,
                     attn_layers=["local", "lsh"], feed_forward_size=FFN),
    "reformer/causal_lm": dict(is_decoder=True),
    "layoutlmv3": dict(coordinate_size=4, shape_size=8, input_size=IMAGE, patch_size=8, rel_pos_bins=8,
                       max_rel_pos=16, rel_2d_pos_bins=8, max_rel_2d_pos=16),
    "lilt": dict(channel_shrink_ratio=4),
    "zamba": dict(num_hidden_layers=3, attn_layer_period=3, attn_layer_offset=1, attention_head_dim=16,
                  attention_hidden_size=2 * HIDDEN, n_mamba_heads=2,
                  layers_block_type=["mamba", "hybrid", "mamba"]),
    "zamba2": dict(num_hidden_layers=3, layers_block_type=["mamba", "hybrid", "mamba"], hybrid_layer_ids=[1],
                   mamba_headdim=8, n_mamba_heads=8, attention_head_dim=16, attention_hidden_size=2 * HIDDEN,
                   kv_channels=8, num_query_groups=4, adapter_rank=8),
    "bailing_hybrid": dict(num_expert_group=1, topk_group=1, num_experts=4, num_experts_per_token=2,
                           first_k_dense_replace=1, linear_head_dim=8, linear_num_heads=4, layer_group_size=2,
                           layer_types=["linear_attention", "full_attention"], mlp_layer_types=["dense", "sparse"]),
    "kimi_linear": dict(num_experts=4, num_experts_per_token=2, num_expert_group=1, topk_group=1),
    "deepseek_v2": dict(n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1),
    "dots1": dict(n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1),
    "hunyuan_v1_dense": dict(head_dim=HEAD_DIM),
    "hunyuan_v1_moe": dict(head_dim=HEAD_DIM),
    "nemotron": dict(num_key_value_heads=2),
    "esm": dict(vocab_size=VOCAB, pad_token_id=1, mask_token_id=3, position_embedding_type="rotary"),
    "levit": dict(hidden_sizes=[16, 32], num_attention_heads=[1, 2], depths=[1, 1], key_dim=[8, 8],
                  mlp_ratio=[2, 2], attention_ratio=[2, 2], patch_size=16,
                  down_ops=[["Subsample", 8, 1, 4, 2, 2]]),
    "mobilevitv2": dict(n_attn_blocks=[1, 1, 1], base_attn_unit_dims=[16, 24, 32], width_multiplier=0.25,
                        image_size=64),
    "mobilevit": dict(hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32], image_size=64),
    "siglip2": dict(vision_config=dict(num_patches=16)),
    "musicgen": dict(decoder=dict(dropout=0.0)),
    "wav2vec2-bert": dict(_W2V_AUDIO, feature_projection_input_dim=16, conv_depthwise_kernel_size=3),
    "swin": dict(window_size=4, encoder_stride=8),
    "bit": dict(num_groups=8),
    "deepseek_v4": dict(head_dim=32, qk_rope_head_dim=4),
    "swinv2": dict(window_size=4, encoder_stride=8),
    "donut-swin": dict(window_size=4),
    "focalnet": dict(encoder_stride=8),
    "gemma3n_text": dict(num_kv_shared_layers=0),
    "dbrx/causal_lm": dict(attn_config=dict(clip_qkv=8.0)),
    "audio-spectrogram-transformer": dict(max_length=MEL_FRAMES, num_mel_bins=16, frequency_stride=4,
                                          time_stride=4, patch_size=8),
    "lxmert": dict(visual_feat_dim=16, visual_pos_dim=4, num_qa_labels=NUM_LABELS, l_layers=1, x_layers=1,
                   r_layers=1, num_object_labels=8, num_attr_labels=8),
    "perceiver": dict(d_latents=HIDDEN, num_latents=16, num_blocks=1, num_self_attends_per_block=1,
                      num_self_attention_heads=2, num_cross_attention_heads=1, d_model=HIDDEN,
                      max_position_embeddings=SEQ, image_size=16),
    "qwen2_vl": dict(text_config=dict(rope_parameters=dict(mrope_section=[2, 1, 1]))),
    "qwen2_5_vl": dict(text_config=dict(rope_parameters=dict(mrope_section=[2, 1, 1]))),
    "paddleocr_vl": dict(text_config=dict(rope_parameters=dict(mrope_section=[2, 1, 1]))),
    "glm4v": dict(text_config=dict(rope_parameters=dict(mrope_section=[2, 1, 1]))),
    "glm46v": dict(text_config=dict(rope_parameters=dict(mrope_section=[2, 1, 1]))),
    "glmga": dict(text_config=dict(rope_parameters=dict(mrope_section=[2, 1, 1]))),
    "glm_ocr": dict(text_config=dict(rope_parameters=dict(mrope_section=[2, 1, 1]))),
    "glm4v_moe": dict(text_config=dict(rope_parameters=dict(mrope_section=[1, 0, 0]))),
}

# Entries run with custom input hooks: name or model type -> callable(entry, model, batch, g)
# that edits the batch built for the head.
BATCH_HOOKS: Dict[str, Callable] = {}



def load_config_broken() -> Dict[str, str]:
    """Entries that fail on the CPU with their tiny config: name -> the CPU error
    (config_broken.json, written by `run_model.py --cpu-check --write-broken`)."""
    import json

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config_broken.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


# ---------------------------------------------------------------------------
# Entries.

@dataclasses.dataclass
class Entry:
    name: str          # "model_type/head"
    model_type: str
    head: str
    class_name: str
    broken: Optional[str] = None   # the CPU error, for a config-broken entry
    library = "transformers"       # catalog_libs.py's entries name their own

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
        if self.head == "seq_cls":   # decoders pool the last non-pad token
            for sub in [d] + [v for k, v in d.items() if k == "text_config" and isinstance(v, dict)]:
                if sub.get("pad_token_id") is None:
                    sub["pad_token_id"] = 0
        if self.head in ("seq2seq_lm", "speech_seq2seq") and d.get("pad_token_id") is None:
            d["pad_token_id"] = 0   # shift_tokens_right pads the decoder inputs with it
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
        cls = self.model_class()
        wanted = getattr(cls, "config_class", None)
        if wanted is not None and not isinstance(config, wanted):
            # a head class over one part of a composite config (Llama4ForCausalLM: the text config)
            for key in sorted(getattr(config, "sub_configs", {}) or {}):
                sub = getattr(config, key, None)
                if isinstance(sub, wanted):
                    config = sub
                    break
        torch.manual_seed(seed)
        model = cls(config)
        model.train()
        return model

    def batch(self, model, seed: int = 0) -> Dict[str, Any]:
        """Inputs and labels for one training step, on the CPU, from `seed`."""
        import inputs  # tests/zoo is on sys.path (the zoo's scripts put it there)

        return inputs.make_batch(self, model, seed)


def _class_name(v) -> str:
    return v[0] if isinstance(v, (tuple, list)) else v


def entries(include_broken: bool = True) -> List[Entry]:
    """Every (architecture, head) entry, sorted by name; config-broken ones marked
    (or left out with include_broken=False)."""
    from transformers.models.auto import modeling_auto

    broken = load_config_broken()
    found: Dict[str, Entry] = {}
    classes_seen = set()
    for head in HEAD_PRECEDENCE:
        for model_type, cls in getattr(modeling_auto, HEADS[head]).items():
            cls = _class_name(cls)
            if (model_type, cls) in classes_seen:
                continue
            classes_seen.add((model_type, cls))
            name = f"{model_type}/{head}"
            found[name] = Entry(name, model_type, head, cls, broken.get(name))
    import catalog_libs  # tests/zoo is on sys.path (the zoo's scripts put it there)

    for e in catalog_libs.entries():
        e.broken = broken.get(e.name)
        found[e.name] = e
    return [found[k] for k in sorted(found) if include_broken or found[k].broken is None]


def by_name(include_broken: bool = True) -> Dict[str, Entry]:
    return {e.name: e for e in entries(include_broken)}


# ---------------------------------------------------------------------------
# Batch hooks: the few models whose inputs the head builders cannot guess.

def _decoder_inputs(entry, model, b, g):
    """Models that do not derive decoder inputs from the labels."""
    start = model.config.decoder_start_token_id
    start = 0 if start is None else start
    labels = b["labels"]
    b["decoder_input_ids"] = torch.cat([torch.full_like(labels[:, :1], start), labels[:, :-1]], dim=1)
    return b


def _global_attention(entry, model, b, g):
    gm = torch.zeros_like(b["input_ids"])
    gm[:, 0] = 1
    b["global_attention_mask"] = gm
    return b


def _bbox(entry, model, b, g):
    n, s = b["input_ids"].shape
    xy = torch.randint(0, 60, (n, s, 2), generator=g)
    wh = torch.randint(1, 60, (n, s, 2), generator=g)
    box = torch.cat([xy, xy + wh], dim=-1)
    if entry.model_type == "bros":
        box = box.float() / 128
        box = torch.cat([box[..., :2], box[..., 2:3], box[..., 1:2], box[..., 2:], box[..., 0:1], box[..., 3:]], -1)
    b["bbox"] = box
    return b


def _lxmert(entry, model, b, g):
    n = b["input_ids"].shape[0]
    b["visual_feats"] = torch.randn(n, 4, model.config.visual_feat_dim, generator=g)
    b["visual_pos"] = torch.rand(n, 4, model.config.visual_pos_dim, generator=g)
    b["labels"] = torch.randint(0, NUM_LABELS, (n,), generator=g)
    b.pop("start_positions", None)
    b.pop("end_positions", None)
    return b


def _siglip2(entry, model, b, g):
    n = b["pixel_values"].shape[0]
    p = model.config.vision_config.patch_size
    side = IMAGE // p
    b["pixel_values"] = torch.randn(n, side * side, 3 * p * p, generator=g)
    b["pixel_attention_mask"] = torch.ones(n, side * side, dtype=torch.long)
    b["spatial_shapes"] = torch.tensor([[side, side]] * n)
    return b


def _musicgen(entry, model, b, g):
    dec = getattr(model.config, "decoder", model.config)
    k = dec.num_codebooks
    n, s = b["input_ids"].shape
    ids = torch.randint(8, 100, (n * k, s), generator=g)
    b = {"input_ids": ids, "labels": ids.view(n, k, s).transpose(1, 2).contiguous()}
    return b


BATCH_HOOKS.update({
    "fsmt": _decoder_inputs, "pop2piano": _decoder_inputs,
    "longformer/qa": _global_attention, "led": _global_attention,
    "bros": _bbox, "layoutlm": _bbox, "layoutlmv3": _bbox, "lilt": _bbox,
    "lxmert": _lxmert, "siglip2": _siglip2,
    "musicgen": _musicgen, "musicgen_melody": _musicgen,
})


def _image_text(entry, model, b, g):
    """A vision-language model fed an image: pixel values, and as many image tokens in
    the text as the model makes image features (counted by its get_image_features)."""
    import inputs

    cfg = model.config
    tok = next((getattr(cfg, k) for k in ("image_token_id", "image_token_index") if getattr(cfg, k, None) is not None),
               None)
    if tok is None or not hasattr(model, "get_image_features"):
        return b
    pv = inputs.pixel_values(cfg, g)
    extra = {}
    import inspect

    if "image_sizes" in inspect.signature(model.get_image_features).parameters:
        extra["image_sizes"] = torch.tensor([list(pv.shape[-2:])] * pv.shape[0])
    try:
        with torch.no_grad():
            feats = model.get_image_features(pixel_values=pv, **extra)
    except Exception:  # an image input this builder cannot make: the model runs on text only
        return b
    if not isinstance(feats, (torch.Tensor, list, tuple)):
        feats = feats.pooler_output if getattr(feats, "pooler_output", None) is not None else feats.last_hidden_state
    parts = list(feats) if isinstance(feats, (list, tuple)) else [feats]
    hidden = cfg.get_text_config().hidden_size
    tokens = sum(p.numel() // hidden for p in parts)
    per_image = tokens // pv.shape[0]
    ids, mask = inputs.text_ids(cfg, g, seq=per_image + 8)
    ids[:, 1:1 + per_image] = tok
    b.update(input_ids=ids, attention_mask=mask, pixel_values=pv, **extra,
             labels=ids.masked_fill((mask == 0) | (ids == tok), -100))
    return b


BATCH_HOOKS.update({name: _image_text for name in (
    "llava/multimodal_lm", "paligemma/multimodal_lm", "gemma3/causal_lm", "mistral3/multimodal_lm",
    "aya_vision/multimodal_lm", "internvl/multimodal_lm", "vipllava/multimodal_lm", "got_ocr2/causal_lm",
    "idefics3/multimodal_lm", "smolvlm/multimodal_lm", "cohere2_vision/multimodal_lm", "lighton_ocr/multimodal_lm",
    "llava_onevision/multimodal_lm", "llava_next/multimodal_lm", "janus/multimodal_lm", "deepseek_vl/multimodal_lm",
    "ovis2/multimodal_lm", "fuyu/causal_lm", "chameleon/multimodal_lm", "perception_lm/multimodal_lm",
    "aria/multimodal_lm", "idefics2/multimodal_lm", "qianfan_ocr/multimodal_lm", "exaone4_5/multimodal_lm",
    "minicpmv4_6/multimodal_lm", "granite4_vision/multimodal_lm", "pp_chart2table/multimodal_lm",
    "florence2/multimodal_lm", "lfm2_vl/multimodal_lm", "video_llava/multimodal_lm")})
