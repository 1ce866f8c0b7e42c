"""64-bit FNV-1a hashes of message ids: of one id, and of every id of an Arrow string column at once.

:class:`RowMap` finds a row by its id's hash; both functions give the same number for
the same UTF-8 bytes, so an id looked up one at a time meets the row hashed in bulk at load.
"""

from __future__ import annotations

import numpy as np

__all__ = ["hash_column", "id_hash"]

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def id_hash(mid: str) -> int:
    """The 64-bit FNV-1a hash of ``mid``'s UTF-8 bytes (what :func:`hash_column` computes for each string)."""
    h = _FNV_OFFSET
    for byte in mid.encode("utf-8"):
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


def hash_column(starts: np.ndarray, lengths: np.ndarray, data: np.ndarray) -> np.ndarray:
    """:func:`id_hash` of every string of a UTF-8 column (start and length of each in ``data``), vectorised.

    Strings are taken longest first, one byte position at a time, so step ``k`` touches only the strings longer
    than ``k``: the work is the column's bytes plus a few numpy calls per position of the longest string.
    """
    out = np.full(len(lengths), _FNV_OFFSET, dtype=np.uint64)
    if not len(lengths):
        return out
    order = np.argsort(-lengths, kind="stable")
    longest_first = -lengths[order]
    at = starts[order].astype(np.int64)
    h = out[order]
    prime = np.uint64(_FNV_PRIME)
    for k in range(int(-longest_first[0])):
        active = int(np.searchsorted(longest_first, -k, side="left"))
        h[:active] ^= data[at[:active]]
        h[:active] *= prime
        at[:active] += 1
    out[order] = h
    return out
