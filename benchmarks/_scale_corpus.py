"""The corpus of ``scale_bench.py``: one big session of made-up chat messages, generated in seeded chunks.

Words: a vocabulary of :data:`VOCABULARY` made-up words (one to five syllables, an English-like suffix on some,
so the Porter stemmer has work to do), drawn with Zipf weights (s = 1, rank unrelated to spelling). Each message
has 20 to 200 words (uniform). Everything is a function of the seed and the chunk number, so both sides of the
benchmark, and every repeat, see the same messages without holding them all in memory.

Tree: one session (``""``), a conversation that goes on and on: each message answers the previous one, except
that 2 % are regenerated replies (a sibling of the previous message). The current branch is therefore about
0.98 N deep, and history reads are cut at the same depth on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

import numpy as np

VOCABULARY = 300_000
MIN_WORDS, MAX_WORDS = 20, 200
CHUNK = 10_000
_EPOCH = datetime(2025, 1, 1)
REGENERATED = 0.02
_SYLLABLES = ["ka", "ro", "mi", "ten", "sa", "lo", "ver", "an", "di", "mor", "el", "pu", "tra", "shi", "nel",
              "go", "ba", "qui", "den", "ly", "fo", "zu", "ham", "pe", "rin", "ost", "cal", "vi", "ne", "dro"]
_SUFFIXES = ["", "", "", "", "s", "ing", "ed", "er", "ly", "ation", "ness", "ies", "ful"]


def message_id(i: int) -> str:
    return f"msg-{i:08x}"


@dataclass(frozen=True)
class Chunk:
    """Messages ``start .. start + len(texts) - 1``: their texts, parents and stem ids (for document counts)."""

    start: int
    texts: list[str]
    parents: list[int]  # -1 for the root
    word_ids: np.ndarray  # flat, every word of every text in order
    lengths: np.ndarray

    def messages(self) -> list[dict]:
        """As agentlab takes them (``parent_id`` keys place each message)."""
        out = []
        for k, text in enumerate(self.texts):
            i = self.start + k
            parent = self.parents[k]
            out.append({"id": message_id(i), "role": "user" if i % 2 == 0 else "assistant",
                        "parts": [{"type": "text", "text": text}],
                        "created_at": (_EPOCH + timedelta(seconds=i)).isoformat(timespec="milliseconds") + "Z",
                        "parent_id": None if parent < 0 else message_id(parent)})
        return out


def stored_json(message: dict) -> str:
    """The message as upstream stores it (``JSON.stringify``), without the placement key."""
    return json.dumps({k: v for k, v in message.items() if k != "parent_id"}, ensure_ascii=False,
                      separators=(",", ":"))


class Corpus:
    """``n`` messages of one session, generated chunk by chunk from ``seed``."""

    def __init__(self, n: int, seed: int = 17) -> None:
        self.n = n
        self.seed = seed

    @cached_property
    def vocabulary(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        words: set[str] = set()
        syllables = np.array(_SYLLABLES)
        while len(words) < VOCABULARY:
            k = 50_000
            counts = rng.integers(1, 6, size=k)
            picks = rng.integers(0, len(syllables), size=(k, 5))
            suffixes = rng.integers(0, len(_SUFFIXES), size=k)
            for c, row, s in zip(counts.tolist(), picks.tolist(), suffixes.tolist()):
                words.add("".join(_SYLLABLES[j] for j in row[:c]) + _SUFFIXES[s])
        ordered = sorted(words)[:VOCABULARY] if len(words) > VOCABULARY else sorted(words)
        shuffled = np.array(ordered, dtype=object)
        rng.shuffle(shuffled)  # rank is unrelated to spelling
        return shuffled

    @cached_property
    def _cdf(self) -> np.ndarray:
        weights = 1.0 / np.arange(1, VOCABULARY + 1)
        return np.cumsum(weights / weights.sum())

    @cached_property
    def stem_ids(self) -> np.ndarray:
        """For each vocabulary word, the id of its stem (words sharing a stem match the same documents)."""
        from agentlab.search._tokenizer import tokenize

        stems: dict[str, int] = {}
        return np.array([stems.setdefault(" ".join(tokenize(w)), len(stems)) for w in self.vocabulary],
                        dtype=np.int32)

    def parents(self) -> np.ndarray:
        rng = np.random.default_rng([self.seed, 1])
        parent = np.arange(-1, self.n - 1, dtype=np.int64)
        regenerated = np.flatnonzero(rng.random(self.n) < REGENERATED)
        regenerated = regenerated[regenerated >= 2]
        # A regenerated reply hangs where the previous message hangs. Chains of regenerations resolve in order.
        for i in regenerated.tolist():
            parent[i] = parent[i - 1]
        return parent

    def chunks(self, size: int = CHUNK) -> Iterator[Chunk]:
        parents = self.parents()
        vocabulary = self.vocabulary
        for start in range(0, self.n, size):
            count = min(size, self.n - start)
            rng = np.random.default_rng([self.seed, 2, start])
            lengths = rng.integers(MIN_WORDS, MAX_WORDS + 1, size=count)
            word_ids = np.searchsorted(self._cdf, rng.random(int(lengths.sum()))).astype(np.int32)
            word_ids = np.minimum(word_ids, VOCABULARY - 1)
            words = vocabulary[word_ids]
            ends = np.cumsum(lengths)
            texts = [" ".join(words[e - k:e]) for e, k in zip(ends.tolist(), lengths.tolist())]
            yield Chunk(start, texts, parents[start:start + count].tolist(), word_ids, lengths)

    def stem_counts(self) -> np.ndarray:
        """For each stem id, its occurrences in the corpus (one pass). For the rare stems the queries use, this is
        their document count but for the odd repeat inside one message."""
        stems = self.stem_ids
        n_stems = int(stems.max()) + 1
        counts = np.zeros(n_stems, dtype=np.int64)
        for chunk in self.chunks():
            counts += np.bincount(stems[chunk.word_ids], minlength=n_stems)
        return counts
