"""A file of named numpy arrays, memory-mapped on read and checked with checksums: the container of index segments.

Layout (little-endian): an 8-byte magic, the header's length and CRC-32 (4 bytes each), the header as JSON, then
each array at a 64-byte-aligned offset. The header names every array with its offset, dtype, length and the
64-bit XXH3 checksum of each :data:`BLOCK`-byte block of its bytes (XXH3 runs several times faster than CRC-32,
which matters for a query that is the first to read a frequent term's postings).

Invariants:

* A file is written under a temporary name, flushed to disk and renamed into place, so a reader never sees a
  half-written file under the final name; files are never changed after that (a new version is a new file).
* Reading checks the magic, the header's CRC-32 and that every array lies inside the file; a mismatch raises
  :class:`CorruptIndexError`. Array bytes are checked block by block the first time a caller asks for a range
  (:meth:`SectionFile.verified`), so opening costs nothing per byte and a query checks only what it reads.
* Arrays are read-only views of the mapping: a caller can never change a file through them.
"""

from __future__ import annotations

import json
import mmap
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from xxhash import xxh3_64_intdigest

from agentlab.errors import CorruptIndexError

__all__ = ["BLOCK", "SectionFile", "write_sections"]

MAGIC = b"ALSECT2\n"
BLOCK = 1 << 16
_ALIGN = 64


def _block_sums(data: memoryview) -> list[int]:
    return [xxh3_64_intdigest(data[i:i + BLOCK]) for i in range(0, len(data), BLOCK)]


def write_sections(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray], *, durable: bool = True) -> int:
    """Write ``arrays`` and ``meta`` (JSON-able) to ``path`` atomically; returns the file's size in bytes.

    Args:
        path: The final name; the file appears there complete or not at all.
        meta: Anything the reader needs besides the arrays.
        arrays: Named one-dimensional arrays.
        durable: Flush the file to disk before renaming it (what a commit needs; a scratch file may skip it).
    """
    layout: dict[str, list[Any]] = {}
    views = []
    offset = 0
    for name, array in arrays.items():
        data = np.ascontiguousarray(array)
        raw = data.data.cast("B") if data.nbytes else memoryview(b"")
        layout[name] = [offset, data.dtype.str, int(data.size), _block_sums(raw)]
        views.append((offset, raw))
        offset += -(-data.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"meta": meta, "sections": layout}, separators=(",", ":")).encode()
    start = -(-(len(MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(MAGIC)
            handle.write(len(header).to_bytes(4, "little") + zlib.crc32(header).to_bytes(4, "little"))
            handle.write(header)
            for section_offset, raw in views:
                handle.seek(start + section_offset)
                handle.write(raw)
            handle.truncate(start + offset)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return start + offset


class SectionFile:
    """A file written by :func:`write_sections`, memory-mapped read-only.

    Raises:
        CorruptIndexError: Not such a file, a damaged header, or an array outside the file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except (OSError, ValueError) as exc:
            raise CorruptIndexError(path, f"cannot be read ({exc})") from exc
        buf = self._map if self._map is not None else b""
        if len(buf) < len(MAGIC) + 8 or buf[:len(MAGIC)] != MAGIC:
            raise CorruptIndexError(path, "is not an index section file")
        length = int.from_bytes(buf[8:12], "little")
        crc = int.from_bytes(buf[12:16], "little")
        raw = bytes(buf[16:16 + length])
        if len(raw) != length or zlib.crc32(raw) != crc:
            raise CorruptIndexError(path, "has a damaged header")
        try:
            parsed = json.loads(raw)
            self.meta: dict[str, Any] = parsed["meta"]
            layout = parsed["sections"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptIndexError(path, "has an unreadable header") from exc
        start = -(-(16 + length) // _ALIGN) * _ALIGN
        self._arrays: dict[str, np.ndarray] = {}
        self._crcs: dict[str, list[int]] = {}
        self._checked: dict[str, bytearray] = {}  # 1 for a block already checked (a bytearray: cheap to index)
        for name, (offset, dtype, count, crcs) in layout.items():
            kind = np.dtype(dtype)
            begin, nbytes = start + int(offset), int(count) * kind.itemsize
            if begin + nbytes > len(buf) or len(crcs) != -(-nbytes // BLOCK):
                raise CorruptIndexError(path, f"is truncated (section {name})")
            array = np.frombuffer(buf, dtype=kind, count=int(count), offset=begin) if count else np.zeros(0, kind)
            self._arrays[name] = array
            self._crcs[name] = crcs
            self._checked[name] = bytearray(len(crcs))

    def __getitem__(self, name: str) -> np.ndarray:
        return self._arrays[name]

    def __contains__(self, name: str) -> bool:
        return name in self._arrays

    def verified(self, name: str, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """``self[name][lo:hi]``, after checking the checksum of every block it touches (once per block).

        Raises:
            CorruptIndexError: A block's bytes do not match the checksum written with them.
        """
        array = self._arrays[name]
        hi = len(array) if hi is None else hi
        if hi <= lo:
            return array[lo:lo]
        size = array.itemsize
        first, last = lo * size // BLOCK, ((hi * size) - 1) // BLOCK
        checked = self._checked[name]
        if not checked[first] or (last > first and 0 in checked[first + 1:last + 1]):
            raw = array.data.cast("B")
            crcs = self._crcs[name]
            for block in range(first, last + 1):
                if checked[block]:
                    continue
                if xxh3_64_intdigest(raw[block * BLOCK:(block + 1) * BLOCK]) != crcs[block]:
                    raise CorruptIndexError(self.path, f"has a damaged block in section {name}")
                checked[block] = 1
        return array[lo:hi]

    def verify_all(self) -> None:
        """Check every block of every array (what a merge does before trusting a whole file)."""
        for name in self._arrays:
            self.verified(name)
