"""The terms of one persisted index and their ids: what lets every segment store postings by term id.

A term gets the next id the first time any document of the index uses it, and keeps it for the index's life, so
segments written at different times agree on ids and merge without looking at strings. The persisted terms live
in one section file (``terms``: UTF-8 bytes with offsets, in id order; ``order``: the ids sorted by their
bytes), memory-mapped: looking a term up is a binary search over it, with no per-term Python object until a
writer needs them all (:meth:`Lexicon.ids_of` builds a dict once).

Invariants: ids are dense (0 .. len - 1); a term's id never changes; terms added since the file was written live
in memory until the next :meth:`Lexicon.arrays` is written with a commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

import numpy as np

from agentlab.search._postings import numpy_ints
from agentlab.search._sections import SectionFile

__all__ = ["Lexicon"]


class Lexicon:
    """Term <-> id for one index (see the module docstring).

    Args:
        file: The persisted terms, or None for an empty index.
    """

    def __init__(self, file: SectionFile | None = None) -> None:
        self._file = file
        if file is not None:  # checked a block at a time as lookups touch them (sections.SectionFile.verified)
            self._offsets = file["term_offsets"]
            self._bytes = file["term_bytes"]
            self._order = file["order"]
            self.persisted = len(self._order)
        else:
            self._offsets = np.zeros(1, dtype=np.int64)
            self._bytes = np.zeros(0, dtype=np.uint8)
            self._order = np.zeros(0, dtype=np.int64)
            self.persisted = 0
        self._checked = False
        self._added: dict[str, int] = {}
        self._added_list: list[str] = []
        self._all: dict[str, int] | None = None

    def saved(self, file: SectionFile) -> None:
        """Every term was written to ``file``: read them from it from now on (ids, and a writer's dict, stay)."""
        self._file = file
        self._offsets = file["term_offsets"]
        self._bytes = file["term_bytes"]
        self._order = file["order"]
        self.persisted = len(self._order)
        self._added, self._added_list = {}, []
        self._checked = False

    def __len__(self) -> int:
        return self.persisted + len(self._added_list)

    @property
    def dirty(self) -> bool:
        """Whether terms were added since the file was written."""
        return bool(self._added_list)

    def _persisted_term(self, tid: int) -> bytes:
        file = self._file
        if file is None:
            return self._bytes[self._offsets[tid]:self._offsets[tid + 1]].tobytes()
        lo, hi = file.verified("term_offsets", tid, tid + 2)
        return file.verified("term_bytes", int(lo), int(hi)).tobytes()

    def get(self, term: str) -> int | None:
        """The id of ``term``, or None if no document of the index has it."""
        found = self._added.get(term)
        if found is not None:
            return found
        if self._file is not None and not self._checked:
            self._file.verify_all()  # once: a few MB, then lookups index the arrays directly
            self._checked = True
        key = term.encode("utf-8")
        lo, hi = 0, self.persisted
        order, offsets, data = self._order, self._offsets, self._bytes
        while lo < hi:
            mid = (lo + hi) // 2
            tid = int(order[mid])
            if data[offsets[tid]:offsets[tid + 1]].tobytes() < key:
                lo = mid + 1
            else:
                hi = mid
        if lo < self.persisted:
            tid = int(order[lo])
            if data[offsets[tid]:offsets[tid + 1]].tobytes() == key:
                return tid
        return None

    def term(self, tid: int) -> str:
        """The term with id ``tid``."""
        if tid < self.persisted:
            return self._persisted_term(tid).decode("utf-8")
        return self._added_list[tid - self.persisted]

    def ids_of(self, terms: Sequence[str]) -> np.ndarray:
        """Ids of ``terms`` (int64), giving new terms the next ids (for writers; builds a dict of every term once)."""
        if self._all is None:
            if self._file is not None:
                self._file.verify_all()
            offsets = self._offsets.tolist()
            raw = self._bytes.tobytes()
            every: dict[str, int] = {}
            every.update((raw[offsets[i]:offsets[i + 1]].decode("utf-8"), i) for i in range(self.persisted))
            every.update(self._added)
            self._all = every
        every = self._all
        found = np.fromiter(map(every.get, terms, repeat(-1)), dtype=np.int64, count=len(terms))
        missing = np.flatnonzero(found < 0)
        if len(missing):  # new terms, in first-seen order: the next ids, given in one go
            fresh = list(dict.fromkeys(terms[i] for i in missing.tolist()))
            first = len(self)
            ids = range(first, first + len(fresh))
            every.update(zip(fresh, ids))
            self._added.update(zip(fresh, ids))
            self._added_list.extend(fresh)
            found[missing] = np.fromiter(map(every.__getitem__, (terms[i] for i in missing.tolist())),
                                         dtype=np.int64, count=len(missing))
        return found

    def arrays(self) -> dict[str, np.ndarray]:
        """Every term, for writing a new terms file: ``term_offsets``, ``term_bytes`` and the sorted ``order``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self._file is not None:
            self._file.verify_all()
        encoded = [t.encode("utf-8") for t in self._added_list]
        sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        offsets = np.concatenate([self._offsets, self._offsets[-1] + np.cumsum(sizes)]).astype(np.int64)
        data = np.concatenate([self._bytes, np.frombuffer(b"".join(encoded), dtype=np.uint8)])
        binary = pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                       [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        order = numpy_ints(pc.sort_indices(binary)).astype(np.int64)
        return {"term_offsets": offsets, "term_bytes": data, "order": order}
