"""Architectural traits of zoo entries, read from each model's config and modules,
and the covering-set selection of a representative subset.

    python tests/zoo/traits.py --write     # classify every entry -> traits.json
    python tests/zoo/traits.py --subset    # print the covering subset

Traits (each a set of values; a model may have several per dimension):
  front_end  token-embedding, patch-embedding, conv-stem, audio-waveform (a conv
             feature encoder on raw samples), audio-spectrogram (mel features),
             multimodal (a vision or audio tower beside a text model, fed both),
             multimodal-text-only (such a model fed text only: the tower is not run)
  attention  mha, gqa, mqa, latent (MLA), sliding-window, local/sparse,
             cross-attention, ssm, linear, recurrent, conv-mixing, fourier, none
  position   rotary, learned-absolute, sinusoidal, relative-bias, alibi,
             conv-positional, none
  norm       layernorm, rmsnorm, batchnorm, groupnorm, none
  mlp        gelu, relu, silu, tanh, gated (SwiGLU/GeGLU), moe, none
  structure  decoder, encoder, encoder-decoder
  head       the entry's head (causal_lm, masked_lm, seq2seq_lm, seq_cls, ...)
  library    diffusers, sentence_transformers or timm (catalog_libs.py); transformers
             entries have none. Those entries also use structure values unet,
             autoencoder, diffusion-transformer, scheduler-loop, cnn, vision-transformer,
             conv-attention, and norm adaptive-norm

The heuristics are deliberately plain (module class names, config fields); a
wrong trait costs coverage, not correctness: every entry is still compared.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import sys
from typing import Any, Dict, Iterable, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import catalog  # noqa: E402

TRAITS_JSON = os.path.join(HERE, "traits.json")
DIMENSIONS = ("front_end", "attention", "position", "norm", "mlp", "structure", "head", "library")

_MIXERS = (  # module class-name fragment -> attention trait
    ("Mamba", "ssm"), ("SSM", "ssm"), ("Ssm", "ssm"), ("Mixer", "ssm"), ("S4", "ssm"),
    ("GatedDeltaNet", "linear"), ("DeltaNet", "linear"), ("LinearAttention", "linear"),
    ("Lightning", "linear"), ("KimiDelta", "linear"), ("Rwkv", "recurrent"), ("RWKV", "recurrent"),
    ("xLSTM", "recurrent"), ("mLSTM", "recurrent"), ("sLSTM", "recurrent"), ("Recurrent", "recurrent"),
    ("Rglru", "recurrent"), ("RGLRU", "recurrent"), ("ShortConv", "conv-mixing"), ("ConvMixer", "conv-mixing"),
    ("Hyena", "conv-mixing"), ("Fourier", "fourier"), ("Pooling", "conv-mixing"),
)


def _cfg_get(config, *names, default=None):
    for c in _configs(config):
        for n in names:
            v = getattr(c, n, None)
            if v is not None:
                return v
    return default


def _configs(config) -> List[Any]:
    """The config and its nested sub-configs (text, vision, audio, encoder, decoder)."""
    out, todo = [], [config]
    while todo:
        c = todo.pop(0)
        if c is None or any(c is o for o in out):
            continue
        out.append(c)
        for key in sorted(getattr(c, "sub_configs", {}) or {}):
            todo.append(getattr(c, key, None))
        for key in ("text_config", "vision_config", "audio_config", "encoder", "decoder"):
            todo.append(getattr(c, key, None))
    return [c for c in out if hasattr(c, "to_dict")]


def _module_source(model) -> str:
    try:
        return inspect.getsource(sys.modules[type(model).__module__])
    except Exception:
        return ""


def _act_kind(act) -> Optional[str]:
    if not isinstance(act, str):
        return None
    a = act.lower()
    for key, kind in (("gelu", "gelu"), ("geglu", "gated"), ("swiglu", "gated"), ("relu", "relu"),
                      ("silu", "silu"), ("swish", "silu"), ("tanh", "tanh"), ("gated", "gated")):
        if key in a:
            return kind
    return None


def classify(entry, model, batch_keys: Optional[Iterable[str]] = None) -> Dict[str, List[str]]:
    """Traits of one entry, from its (built) model and the names of its batch's inputs
    (a multimodal model fed text only is "multimodal-text-only": its tower is not run).
    Entries of other libraries (catalog_libs) are classified there; transformers
    entries have no "library" value, so adding that dimension changed none of theirs."""
    if getattr(entry, "library", "transformers") != "transformers":
        import catalog_libs

        return catalog_libs.classify(entry, model)
    config = model.config
    names = [type(m).__name__ for m in model.modules()]
    name_set = set(names)
    mod_names = [n for n, _ in model.named_modules()]
    param_names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    configs = _configs(config)
    t: Dict[str, set] = {d: set() for d in DIMENSIONS}
    t["head"].add(entry.head)

    # front end
    main = getattr(model, "main_input_name", "input_ids")
    towers = [k for k in ("vision_config", "audio_config", "speech_config") if getattr(config, k, None) is not None]
    has_text = any(getattr(c, "vocab_size", None) for c in configs)
    fed = set(batch_keys or ())
    non_text = {"pixel_values", "input_features", "input_values", "pixel_values_videos", "flattened_patches"}
    if (towers and has_text or entry.head == "multimodal_lm") and (batch_keys is None or "input_ids" in fed):
        t["front_end"].add("multimodal" if batch_keys is None or fed & non_text else "multimodal-text-only")
    if main in ("input_ids",) or (has_text and entry.head in ("causal_lm", "masked_lm", "seq2seq_lm", "seq_cls",
                                                              "token_cls", "qa")):
        t["front_end"].add("token-embedding")
    if main == "pixel_values" or entry.head in ("image_cls", "masked_image"):
        first_conv = next((m for m in model.modules() if type(m).__name__ == "Conv2d"), None)
        if first_conv is not None and tuple(first_conv.kernel_size) == tuple(first_conv.stride) \
                and first_conv.kernel_size[0] > 1:
            t["front_end"].add("patch-embedding")
        elif first_conv is not None:
            t["front_end"].add("conv-stem")
        else:
            t["front_end"].add("patch-embedding")
    if main == "input_values" and entry.head not in ("image_cls",):
        t["front_end"].add("audio-waveform" if any("Conv1d" in n for n in name_set) else "audio-spectrogram")
    if main == "input_features":
        t["front_end"].add("audio-spectrogram")

    # attention
    attn_modules = [n for n in names if "Attention" in n or "SelfAttn" in n or n.endswith("Attn")]
    for frag, kind in _MIXERS:
        if any(frag in n for n in name_set):
            t["attention"].add(kind)
    heads = _cfg_get(config, "num_attention_heads", "n_head", "num_heads", "encoder_attention_heads")
    kv = _cfg_get(config, "num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num")
    if _cfg_get(config, "multi_query") is True:
        kv = 1
    if attn_modules:
        if _cfg_get(config, "kv_lora_rank") is not None:
            t["attention"].add("latent")
        elif isinstance(heads, int) and isinstance(kv, int) and kv < heads:
            t["attention"].add("mqa" if kv == 1 else "gqa")
        else:
            t["attention"].add("mha")
        layer_types = _cfg_get(config, "layer_types") or []
        sliding = _cfg_get(config, "sliding_window", "attention_window")
        use_sliding = _cfg_get(config, "use_sliding_window")
        if any("sliding" in str(x) for x in layer_types) or (sliding is not None and use_sliding is not False):
            t["attention"].add("sliding-window")
        if any(k in n for n in name_set for k in ("Local", "BlockSparse", "Chunk", "LSH", "Nystrom", "Yoso",
                                                 "Mra", "BigBird", "Longformer")):
            t["attention"].add("local/sparse")
        if getattr(config, "is_encoder_decoder", False) or _cfg_get(config, "add_cross_attention") \
                or any("CrossAttention" in n for n in name_set) or "crossattention" in " ".join(mod_names).lower() \
                or "encoder_attn" in " ".join(mod_names):
            t["attention"].add("cross-attention")
    if not t["attention"]:
        t["attention"].add("none")

    # position encoding
    source = _module_source(model)
    joined = " ".join(param_names).lower()
    if any("Rotary" in n or "RoPE" in n or "Rope" in n for n in name_set) or _cfg_get(config, "rotary_dim") \
            or (_cfg_get(config, "rope_parameters", "rope_theta") is not None and "rotary" in source.lower()):
        t["position"].add("rotary")
    if _cfg_get(config, "relative_attention_num_buckets") or "relative_attention_bias" in joined \
            or str(_cfg_get(config, "position_embedding_type", default="")).startswith("relative") \
            or "rel_pos" in joined or "relative_position" in joined or "pos_bias" in joined:
        t["position"].add("relative-bias")
    alibi_flag = _cfg_get(config, "alibi")
    attn_cfg = getattr(config, "attn_config", None)
    if attn_cfg is not None and getattr(attn_cfg, "alibi", None) is not None:
        alibi_flag = attn_cfg.alibi
    if "alibi" in source.lower() and alibi_flag is not False:
        t["position"].add("alibi")
    if any("Sinusoid" in n or "Sinusoidal" in n for n in name_set) or "sinusoid" in source.lower() \
            and "position" in joined:
        t["position"].add("sinusoidal")
    if any("PositionalConv" in n or "ConvPos" in n for n in name_set) or "pos_conv" in joined:
        t["position"].add("conv-positional")
    for n, p in list(model.named_parameters()):
        low = n.lower()
        if ("position" in low or "wpe" in low or "pos_emb" in low or "embed_positions" in low) \
                and "relative" not in low and "conv" not in low and "bias" not in low:
            t["position"].add("learned-absolute")
            break
    if not t["position"]:
        t["position"].add("none")

    # normalization
    import torch

    for m in model.modules():
        cls = type(m).__name__
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) or "BatchNorm" in cls:
            t["norm"].add("batchnorm")
        elif isinstance(m, torch.nn.GroupNorm):
            t["norm"].add("groupnorm")
        elif isinstance(m, torch.nn.RMSNorm) or "RMSNorm" in cls or "RmsNorm" in cls:
            t["norm"].add("rmsnorm")
        elif isinstance(m, torch.nn.LayerNorm):
            t["norm"].add("layernorm")
        elif "WeightNorm" in cls or "SpectralNorm" in cls:
            continue  # a weight parametrization, not a normalization layer
        elif "LayerNorm" in cls or cls.endswith("Norm"):
            t["norm"].add("layernorm" if getattr(m, "bias", None) is not None else "rmsnorm")
    if not t["norm"]:
        t["norm"].add("none")

    # MLP
    experts = _cfg_get(config, "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
    if any(k in n for n in name_set for k in ("MoE", "Moe", "Expert", "SparseMLP", "Router", "Switch")) \
            or (isinstance(experts, int) and experts > 1):
        t["mlp"].add("moe")
    gated_names = ("gate_proj", "gate_up_proj", "w1", "w3", "wi_0", "wi_1", "fc1_g", "gate")
    if any(mn.rsplit(".", 1)[-1] in gated_names for mn in mod_names) \
            or any(pn.rsplit(".", 2)[-2] in ("gate_up_proj", "gate_proj") for pn in param_names if "." in pn) \
            or _act_kind(_cfg_get(config, "feed_forward_proj")) == "gated" \
            or "gated" in str(_cfg_get(config, "feed_forward_proj", default="")):
        t["mlp"].add("gated")
    acts = {_act_kind(_cfg_get(config, "hidden_act", "hidden_activation", "activation_function", "activation",
                               "dense_act_fn", "feed_forward_proj", "ffn_act"))}
    for cls in name_set:  # activation modules (not Tanh: poolers use it)
        low = cls.lower()
        if "gelu" in low:
            acts.add("gelu")
        elif "relu" in low:
            acts.add("relu")
        elif "silu" in low or "swish" in low:
            acts.add("silu")
    for act in sorted(a for a in acts if a):
        if act != "gated" and not ("gated" in t["mlp"] and act == "silu"):
            t["mlp"].add(act)
    if not t["mlp"]:
        t["mlp"].add("none" if not any(isinstance(m, torch.nn.Linear) for m in model.modules()) else "other")

    # structure
    if getattr(config, "is_encoder_decoder", False) or entry.head in ("seq2seq_lm", "speech_seq2seq"):
        t["structure"].add("encoder-decoder")
    elif entry.head in ("causal_lm", "multimodal_lm") or getattr(config, "is_decoder", False):
        t["structure"].add("decoder")
    else:
        t["structure"].add("encoder")
    return {k: sorted(v) for k, v in t.items()}


# ---------------------------------------------------------------------------
# All entries' traits, cached in traits.json.

def catalog_fingerprint() -> str:
    """Changes when the catalog does: its source files and the libraries' versions."""
    import diffusers
    import sentence_transformers
    import transformers

    h = hashlib.sha256(" ".join((transformers.__version__, diffusers.__version__,
                                 sentence_transformers.__version__)).encode())
    for name in ("catalog.py", "catalog_libs.py", "inputs.py", "traits.py", "config_broken.json"):
        path = os.path.join(HERE, name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def compute_all(entries: Iterable, verbose: bool = False) -> Dict[str, Dict[str, Any]]:
    import torch

    torch.set_num_threads(1)
    out = {}
    for e in entries:
        if e.broken:
            continue
        try:
            model = e.build(0)
            keys = list(e.batch(model, 0))
            out[e.name] = {"traits": classify(e, model, keys), "n_params": sum(p.numel() for p in model.parameters())}
        except Exception as ex:  # built on the CPU fine when the catalog was checked; say so
            out[e.name] = {"error": f"{type(ex).__name__}: {str(ex).splitlines()[0][:200] if str(ex) else ''}"}
        if verbose:
            print(e.name, out[e.name], flush=True)
    return out


def load_all(refresh: bool = False) -> Dict[str, Dict[str, Any]]:
    """Every valid entry's traits, from traits.json (recomputed when the catalog changed)."""
    fp = catalog_fingerprint()
    if not refresh and os.path.exists(TRAITS_JSON):
        with open(TRAITS_JSON) as f:
            data = json.load(f)
        if data.get("fingerprint") == fp:
            return data["entries"]
    entries = compute_all(catalog.entries())
    with open(TRAITS_JSON + ".tmp", "w") as f:
        json.dump({"fingerprint": fp, "entries": entries}, f, indent=1, sort_keys=True)
    os.replace(TRAITS_JSON + ".tmp", TRAITS_JSON)
    return entries


def trait_values(traits: Dict[str, List[str]]) -> List[str]:
    return [f"{dim}={v}" for dim in DIMENSIONS for v in traits.get(dim, [])]


def select_covering(entries: Dict[str, Dict[str, Any]]) -> List[str]:
    """A representative subset covering every trait value at least once: greedy set
    cover (the entry covering most uncovered values first; ties to the smaller model,
    then the name), deterministic, returned sorted by name, so the subset changes
    only when the catalog (its entries or their traits) does.

    `entries` maps name -> {"traits": {...}, "n_params": int} (as load_all returns).
    """
    pool = {n: set(trait_values(d["traits"])) for n, d in entries.items() if "traits" in d}
    size = {n: entries[n].get("n_params", 0) for n in pool}
    uncovered = set().union(*pool.values()) if pool else set()
    chosen: List[str] = []
    while uncovered:
        best = min(pool, key=lambda n: (-len(pool[n] & uncovered), size[n], n))
        gain = pool[best] & uncovered
        if not gain:
            break
        chosen.append(best)
        uncovered -= gain
        del pool[best]
    return sorted(chosen)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write", action="store_true", help="recompute traits.json")
    p.add_argument("--subset", action="store_true", help="print the covering subset")
    p.add_argument("--show", metavar="NAME", help="print one entry's traits")
    args = p.parse_args(argv)
    data = load_all(refresh=args.write)
    if args.show:
        print(json.dumps(data.get(args.show), indent=1))
    if args.subset:
        subset = select_covering(data)
        for n in subset:
            print(n)
        print(f"{len(subset)} entries cover {len(set().union(*(set(trait_values(d['traits'])) for d in data.values() if 'traits' in d)))} trait values")
    if not (args.show or args.subset):
        counts: Dict[str, int] = {}
        for d in data.values():
            for v in trait_values(d.get("traits", {})):
                counts[v] = counts.get(v, 0) + 1
        for v in sorted(counts):
            print(f"{counts[v]:5d}  {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
