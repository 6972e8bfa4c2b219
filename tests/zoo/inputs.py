"""Input builders for the zoo: one batch (inputs and labels, on the CPU) per entry
from a seed. One builder per head; catalog.BATCH_HOOKS edits the batch for the
few models that need more (image tokens, eos markers, feature shapes).

Text batches have a padded second row (the last 3 tokens masked out, labels
-100 there), so attention masks are exercised too.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict

import torch

import catalog

_TEXT_HEADS = {"causal_lm", "masked_lm", "seq2seq_lm", "seq_cls", "token_cls", "qa", "multimodal_lm"}
_AUDIO_HEADS = {"audio_cls", "audio_frame_cls", "audio_xvector", "ctc", "speech_seq2seq"}
PAD_TAIL = 3


def _text_config(config):
    try:
        return config.get_text_config()
    except Exception:
        return config


def _get(config, *names, default=None):
    for n in names:
        v = getattr(config, n, None)
        if v is not None:
            return v
    return default


def text_ids(config, g, batch=catalog.BATCH, seq=catalog.SEQ, pad=True):
    tc = _text_config(config)
    vocab = _get(tc, "vocab_size", default=catalog.VOCAB)
    hi = max(min(vocab, catalog.VOCAB) - 16, 12)
    ids = torch.randint(8, hi, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    if pad and batch > 1:
        mask[1, -PAD_TAIL:] = 0
        pad_id = _get(tc, "pad_token_id")
        if isinstance(pad_id, int):
            ids[1, -PAD_TAIL:] = pad_id
    return ids, mask


def _image_size(config):
    vc = _get(config, "vision_config", default=config)
    size = _get(vc, "image_size", default=catalog.IMAGE)
    if isinstance(size, dict):
        size = size.get("height", catalog.IMAGE)
    if isinstance(size, (list, tuple)):
        return int(size[0]), int(size[-1])
    return int(size), int(size)


def pixel_values(config, g, batch=catalog.BATCH):
    vc = _get(config, "vision_config", default=config)
    channels = _get(vc, "num_channels", "in_channels", "in_chans", default=3)
    h, w = _image_size(config)
    return torch.randn(batch, channels, h, w, generator=g)


def audio_values(config, g, batch=catalog.BATCH, samples=catalog.AUDIO_SAMPLES):
    return torch.randn(batch, samples, generator=g)


# Models whose input_features are (batch, frames, features); the others take (batch, mel, frames).
_TIME_MAJOR = {"parakeet_ctc", "canary", "cohere_asr", "lasr_ctc", "granite_speech5_ctc", "speech_to_text",
               "wav2vec2-bert", "seamless_m4t", "seamless_m4t_v2", "granite_speech", "granite_speech_plus",
               "audio-spectrogram-transformer"}


def audio_features(config, g, batch=catalog.BATCH, model_type=""):
    enc = _get(config, "encoder_config", "audio_config", "encoder", "speech_config", default=config)
    if _get(config, "feature_projection_input_dim") is not None:
        feat = config.feature_projection_input_dim
    elif _get(config, "input_feat_per_channel") is not None:
        feat = config.input_feat_per_channel * (_get(config, "input_channels", default=1))
    else:
        feat = _get(config, "num_mel_bins", default=None) or _get(enc, "num_mel_bins", "feature_size", default=16)
    frames = catalog.MEL_FRAMES
    if model_type == "audio-spectrogram-transformer":
        frames = _get(config, "max_length", default=catalog.MEL_FRAMES)
    if model_type in _TIME_MAJOR or _get(config, "feature_projection_input_dim") is not None:
        return torch.randn(batch, frames, feat, generator=g)
    return torch.randn(batch, feat, frames, generator=g)


def make_batch(entry, model, seed: int) -> Dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    config = model.config
    head = entry.head
    main = getattr(model, "main_input_name", "input_ids")
    b: Dict[str, Any] = {}
    n = catalog.BATCH
    if head in _TEXT_HEADS or main == "input_ids":
        ids, mask = text_ids(config, g)
        b["input_ids"], b["attention_mask"] = ids, mask
        if head == "causal_lm" or head == "multimodal_lm":
            b["labels"] = ids.masked_fill(mask == 0, -100)
        elif head == "masked_lm":
            pick = (torch.rand(ids.shape, generator=g) < 0.3) & (mask == 1)
            pick[:, 1] = True
            b["labels"] = ids.masked_fill(~pick, -100)
        elif head in ("seq2seq_lm", "speech_seq2seq") and not getattr(config, "is_encoder_decoder", False):
            # a decoder-only "seq2seq" model (audio LMs): labels align with the inputs
            b["labels"] = ids.masked_fill(mask == 0, -100)
        elif head == "image_cls":   # pixels as tokens (imagegpt)
            b["labels"] = torch.randint(0, catalog.NUM_LABELS, (n,), generator=g)
        elif head == "seq2seq_lm":
            tc = _text_config(config)
            vocab = min(_get(tc, "vocab_size", default=catalog.VOCAB), catalog.VOCAB)
            b["labels"] = torch.randint(8, max(vocab - 16, 12), (n, catalog.TARGET_SEQ), generator=g)
        elif head == "seq_cls":
            b["labels"] = torch.randint(0, catalog.NUM_LABELS, (n,), generator=g)
            if getattr(config, "is_encoder_decoder", False):
                eos = _get(_text_config(config), "eos_token_id", default=2)
                for row in range(n):
                    last = int(mask[row].sum()) - 1
                    ids[row, last] = eos
        elif head == "token_cls":
            labels = torch.randint(0, catalog.NUM_LABELS, ids.shape, generator=g)
            b["labels"] = labels.masked_fill(mask == 0, -100)
        elif head == "qa":
            b["start_positions"] = torch.randint(0, catalog.SEQ - PAD_TAIL, (n,), generator=g)
            b["end_positions"] = torch.randint(0, catalog.SEQ - PAD_TAIL, (n,), generator=g)
    elif head in ("image_cls", "masked_image") or main == "pixel_values":
        b["pixel_values"] = pixel_values(config, g)
        if head == "image_cls":
            b["labels"] = torch.randint(0, catalog.NUM_LABELS, (n,), generator=g)
        elif head == "masked_image":
            h, w = _image_size(config)
            p = _get(config, "patch_size", default=8)
            p = p[0] if isinstance(p, (list, tuple)) else p
            b["bool_masked_pos"] = torch.rand(n, (h // p) * (w // p), generator=g) < 0.5
    elif head in _AUDIO_HEADS:
        if main == "input_features" or entry.model_type == "audio-spectrogram-transformer":
            b[main] = audio_features(config, g, model_type=entry.model_type)
        else:
            b[main] = audio_values(config, g)
        if head in ("audio_cls", "audio_xvector"):
            b["labels"] = torch.randint(0, catalog.NUM_LABELS, (n,), generator=g)
        elif head == "ctc":
            vocab = _get(config, "vocab_size", default=32)
            labels = torch.randint(1, vocab, (n, 4), generator=g)
            labels[1, -1] = -100
            b["labels"] = labels
        elif head == "speech_seq2seq" and not getattr(config, "is_encoder_decoder", True):
            ids, mask = text_ids(config, g)
            b["input_ids"], b["attention_mask"] = ids, mask
            b["labels"] = ids.masked_fill(mask == 0, -100)
        elif head == "speech_seq2seq":
            vocab = min(_get(_text_config(config), "vocab_size", default=catalog.VOCAB), catalog.VOCAB)
            b["labels"] = torch.randint(8, max(vocab - 16, 12), (n, catalog.TARGET_SEQ), generator=g)
        elif head == "audio_frame_cls":
            with torch.no_grad():
                frames = model(**{main: b[main]}).logits.shape[1]
            which = torch.randint(0, catalog.NUM_LABELS, (n, frames), generator=g)
            b["labels"] = torch.nn.functional.one_hot(which, catalog.NUM_LABELS).float()
    hook = catalog.BATCH_HOOKS.get(entry.name) or catalog.BATCH_HOOKS.get(entry.model_type)
    if hook is not None:
        b = hook(entry, model, b, g)
    return _accepted(model, b)


def _accepted(model, b: Dict[str, Any]) -> Dict[str, Any]:
    """The batch less the inputs the model's forward does not take."""
    params = inspect.signature(model.forward).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return b   # **kwargs takes anything; the model ignores what it does not use
    return {k: v for k, v in b.items() if k in params}
