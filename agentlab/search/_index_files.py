"""The files of a persisted search index, in a folder beside the agent's DuckDB file (``<file>.search-index``).

The folder holds immutable section files (:mod:`agentlab.search._sections`): segments (``seg-*.sec``), the lexicon
(``lex-*.sec``) and the deleted documents of a segment (``del-*.sec``), plus ``meta.json``, which names the files
that make up the index now. Everything in it is derived from the DuckDB file and can be deleted at any time.

Invariants:

* A commit writes every new file under a new name, flushed to disk, then replaces ``meta.json`` atomically (write,
  flush, rename, flush the folder). A process killed at any point leaves either the old or the new
  ``meta.json``, each naming complete files; files no ``meta.json`` names are removed by the next writer.
* ``meta.json`` carries ``stamp``: the :func:`~agentlab.store._stamp.file_stamp` of the DuckDB file when the index
  was last made to cover exactly its committed documents (at a clean close), or null. A reader may trust the index
  without checking it against the file only when that stamp equals the file's stamp at open.
* A missing, unreadable or foreign ``meta.json`` (another format version) reads as no index.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from agentlab.errors import CorruptIndexError
from agentlab.search._sections import SectionFile, write_sections
from agentlab.store import SEARCH_INDEX_SUFFIX, fsync_dir

__all__ = ["FORMAT", "IndexFiles", "index_folder"]

FORMAT = 1
_META = "meta.json"


def index_folder(database: str) -> Path:
    """Where the index of the DuckDB file ``database`` lives."""
    return Path(database + SEARCH_INDEX_SUFFIX)


class IndexFiles:
    """The folder of one index (see the module docstring)."""

    def __init__(self, database: str) -> None:
        self.folder = index_folder(database)

    def read_meta(self) -> dict[str, Any] | None:
        """The committed ``meta.json``, or None if there is none usable."""
        try:
            raw = (self.folder / _META).read_bytes()
            meta = json.loads(raw)
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("segments"), list):
            return None
        return meta

    def open(self, name: str) -> SectionFile:
        """A file of the index, mapped.

        Raises:
            CorruptIndexError: It is missing or damaged.
        """
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            raise CorruptIndexError(self.folder / str(name), "is not a name this index writes")
        return SectionFile(self.folder / name)

    def write(self, kind: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> str:
        """Write a new immutable file of ``kind`` (``seg``, ``lex``, ``del``); returns its name."""
        self.folder.mkdir(exist_ok=True)
        name = f"{kind}-{uuid.uuid4().hex[:16]}.sec"
        write_sections(self.folder / name, meta, arrays)
        return name

    def commit(self, meta: dict[str, Any]) -> None:
        """Make ``meta`` (naming files already written) the index, atomically and durably."""
        self.folder.mkdir(exist_ok=True)
        data = json.dumps({**meta, "format": FORMAT}, separators=(",", ":")).encode()
        tmp = self.folder / f"{_META}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.folder / _META)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(self.folder)

    def collect_garbage(self, meta: dict[str, Any] | None) -> None:
        """Remove files ``meta`` does not name (older versions, leftovers of a killed writer)."""
        keep = {_META}
        if meta is not None:
            keep.add(str(meta.get("lexicon")))
            for entry in meta.get("segments", []):
                keep.update(str(entry.get(k)) for k in ("file", "deletes"))
        try:
            entries = list(self.folder.iterdir())
        except OSError:
            return
        for entry in entries:
            if entry.name not in keep and (entry.suffix in (".sec", ".tmp")):
                try:
                    entry.unlink()
                except OSError:
                    pass

    def remove(self) -> None:
        """Delete the whole index (it is rebuilt from the DuckDB file when next needed)."""
        try:
            (self.folder / _META).unlink(missing_ok=True)
        except OSError:
            pass
        self.collect_garbage(None)
        try:
            self.folder.rmdir()
        except OSError:
            pass
