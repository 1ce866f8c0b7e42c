"""The state of one store's message index: its parts, how far they are trusted, and how they reach the disk.

See :mod:`agentlab.session.duckdb._message_index` for the design (persisted segments, in-memory segments per bulk batch,
the buffer of single appends, the stamp written at a clean close, reconciliation with the file); this module
holds the mechanics, :class:`MessageIndex` the public face.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from collections.abc import Collection
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentlab._memory import release_freed_memory
from agentlab.errors import CorruptIndexError, SearchIndexWarning
from agentlab.search import (
    BufferPart,
    IndexFiles,
    Lexicon,
    Segment,
    SegmentPart,
    arrow_ints,
    arrow_strings,
    build_segment,
    merge_segments,
    numpy_ints,
)
from agentlab.session.duckdb import _messages_table as messages_table
from agentlab.store import MEMORY, Store, file_stamp

__all__ = ["BUILD_DOCS", "FLUSH_DOCS", "FLUSH_TOKENS", "MAX_SEGMENTS", "MERGE_AT_ONCE", "PERSIST_MIN_DOCS",
           "IndexState"]

PERSIST_MIN_DOCS = 1_000
"""An index is first written to disk when it holds this many messages (smaller ones rebuild in milliseconds)."""
FLUSH_DOCS = 100_000
"""In-memory documents that trigger writing them as a segment."""
FLUSH_TOKENS = 10_000_000
"""In-memory tokens that trigger writing them as a segment."""
MAX_SEGMENTS = 8
"""Persisted segments kept before the smallest are merged."""
MERGE_AT_ONCE = 4
BUILD_DOCS = 5_000
"""Bulk-written documents that are built into an in-memory segment as soon as they are written. Building batches of
about this size and merging them at the flush costs half as much as one build of the whole flush: a build sorts
every token by term, and a merge of sorted inputs does not; smaller batches wait for more."""
_READ_BATCH = 50_000



def _uints(array: Any) -> np.ndarray:
    return numpy_ints(array).view(np.uint64)


@dataclass
class _Build:
    """A bulk batch being built into a segment on the builder thread."""

    future: Future[Segment]
    docs: int
    tokens: int
    pid: int  # the process whose builder thread runs it (a child started by fork has no such thread)


_builder: ThreadPoolExecutor | None = None
_builder_lock = threading.Lock()


def _forget_builder_after_fork() -> None:
    global _builder, _builder_lock
    _builder, _builder_lock = None, threading.Lock()  # the parent's thread did not survive the fork


os.register_at_fork(after_in_child=_forget_builder_after_fork)


def _start_build(table: Any, lexicon: Lexicon) -> Future[Segment]:
    """Build a segment on the one builder thread of the process (started on first use)."""
    global _builder
    with _builder_lock:
        if _builder is None:
            _builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentlab-index-build")
        return _builder.submit(build_segment, table, lexicon)


@dataclass
class _Persisted:
    name: str
    part: SegmentPart
    deletes: str | None
    changed: bool = False


class IndexState:
    """One store's index: its parts and how far they can be trusted (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = weakref.ref(store)
        self.files = IndexFiles(store.path) if store.path != MEMORY else None
        self.opened = False
        self.ignore_files = False  # set when a file of the index turned out damaged and could not be removed
        self.write_failed = False  # set when writing the folder failed (a full disk): memory only from then on
        store.on_close(self.before_close, self.after_close)

    @property
    def store(self) -> Store:
        store = self._store()
        if store is None:  # pragma: no cover - the store owns this object
            raise RuntimeError("The store of this index was garbage-collected.")
        return store

    # -- opening and trusting ------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every part; the next use reopens the persisted index and reconciles it (after outside SQL)."""
        self.opened = False

    def open(self, indexed: int | None = None) -> None:
        """Read the persisted index, if any, and decide whether it can be trusted as it is.

        Args:
            indexed: The file's number of indexed messages, if the caller knows it (else it is counted when
                there is no persisted index).
        """
        if self.opened:
            return
        self.lexicon = Lexicon()
        self.persisted: list[_Persisted] = []
        self.memory: list[SegmentPart] = []
        self._settle()  # a build started before a reset belongs to the forgotten parts
        self.pending: list[Any] = []  # bulk batches not built yet: a flush builds them at once, a search first
        self.building: list[_Build] = []  # bulk batches being built on the builder thread, oldest first
        self.buffer = BufferPart()
        self.lexicon_name: str | None = None
        self.saved_stamp: str | None = None
        self.changed = False
        store = self.store
        meta = self.files.read_meta() if self.files is not None and not self.ignore_files else None
        if meta is not None:
            try:
                self._load(meta)
            except (CorruptIndexError, KeyError, TypeError, ValueError):
                self.lexicon, self.persisted, self.lexicon_name = Lexicon(), [], None
                meta = None
        if meta is not None:
            self.exact = meta.get("stamp") is not None and meta.get("stamp") == store.opened_stamp and \
                store.outside_writes == 0
        else:  # no index yet: exact only if the file has nothing to index (a new agent)
            if indexed is None:
                indexed = messages_table.count_indexed(store)
            self.exact = not indexed
        self.saved_stamp = meta.get("stamp") if meta is not None else None
        self.opened = True
        if self.files is not None and not store.read_only:
            self.files.collect_garbage(meta)

    def _load(self, meta: dict[str, Any]) -> None:
        assert self.files is not None
        self.lexicon_name = meta["lexicon"]
        self.lexicon = Lexicon(self.files.open(meta["lexicon"]))
        for entry in meta["segments"]:
            segment = Segment(self.files.open(entry["file"]))
            if segment.n_terms > len(self.lexicon):
                raise CorruptIndexError(self.files.folder / entry["file"], "uses terms its lexicon lacks")
            live = None
            if entry.get("deletes"):
                dead = self.files.open(entry["deletes"]).verified("deleted")
                if len(dead) and (int(dead.max()) >= segment.n_docs or int(dead.min()) < 0):
                    raise CorruptIndexError(self.files.folder / entry["deletes"], "names documents out of range")
                live = np.ones(segment.n_docs, dtype=np.bool_)
                live[dead] = False
            self.persisted.append(_Persisted(entry["file"], SegmentPart(segment, live), entry.get("deletes")))

    def damaged(self) -> None:
        """A file of the index failed its check: forget the index (and delete it if we may); it is rebuilt from
        the DuckDB file, which holds every change the forgotten parts held."""
        self.opened = False
        if self._writable():
            assert self.files is not None
            self.files.remove()
        else:
            self.ignore_files = True

    def guarded(self, action: Any) -> None:
        """Run a change; if it meets a damaged file, forget the index (the change is in the DuckDB file)."""
        try:
            action()
        except CorruptIndexError:
            self.damaged()

    def ready(self) -> None:
        """Open, and reconcile with the file unless the index is known to be exact."""
        self.open()
        self._settle()
        if not self.exact:
            self.reconcile()

    def parts(self) -> list[SegmentPart | BufferPart]:
        self.build_pending()
        return [*(p.part for p in self.persisted), *self.memory, self.buffer]

    def _settle(self) -> None:
        """Wait for the builds in flight and keep their segments, in the order the batches were written.

        The builder thread uses the lexicon, so everything that reads the lexicon or the in-memory parts settles
        first. A build that failed leaves its rows to be read back from the file (the index is no longer exact).
        """
        builds: list[_Build] = getattr(self, "building", [])
        self.building = []
        for build in builds:
            if build.pid != os.getpid() and not build.future.done():  # its thread stayed in the parent process
                self.exact = False
                continue
            try:
                segment = build.future.result()
            except Exception:  # the rows are in the file: reconciling reads them again
                self.exact = False
                continue
            if self.opened:
                self.memory.append(SegmentPart(segment))

    def build_pending(self) -> None:
        """Build the bulk batches written since the last search or flush into one in-memory segment."""
        self._settle()
        if self.pending:
            import pyarrow as pa

            table = pa.concat_tables(self.pending)
            self.pending = []
            self.memory.append(SegmentPart(build_segment(table, self.lexicon)))

    def reconcile(self) -> None:
        """Make the parts hold exactly the file's committed indexed rows (see the module docstring)."""
        store = self.store
        cursor = store.conn.cursor()  # committed rows only, even inside an open transaction
        try:
            table = cursor.sql(messages_table.INDEX_FINGERPRINTS).to_arrow_table()
            file_ss = numpy_ints(table.column("search_seq")).astype(np.int64)
            file_hash = _uints(table.column("hash"))
            order = np.argsort(file_ss, kind="stable")
            file_ss, file_hash = file_ss[order], file_hash[order]
            self.build_pending()
            known = [self.buffer.search_seq(np.flatnonzero(self.buffer.table.postings.alive.values))]
            for part in self.memory:
                docs = np.arange(part.segment.n_docs) if part.live is None else np.flatnonzero(part.live)
                known.append(part.segment.doc_search_seq[docs])
            for entry in self.persisted:
                seg, part = entry.part.segment, entry.part
                at = np.minimum(np.searchsorted(file_ss, seg.doc_search_seq), max(len(file_ss) - 1, 0))
                same = (file_ss[at] == seg.doc_search_seq) & (file_hash[at] == seg.doc_hash) if len(file_ss) \
                    else np.zeros(seg.n_docs, dtype=np.bool_)
                alive = np.ones(seg.n_docs, dtype=np.bool_) if part.live is None else part.live
                if part.kill_where(alive & ~same):
                    entry.changed = self.changed = True
                known.append(seg.doc_search_seq[alive & same])
            covered = np.unique(np.concatenate(known)) if known else np.zeros(0, dtype=np.int64)
            missing = file_ss[~np.isin(file_ss, covered)]
            if len(missing):
                self._read_rows(cursor, np.unique(missing))
        finally:
            cursor.close()
        self.exact = True
        release_freed_memory()

    def _read_rows(self, cursor: Any, missing: np.ndarray) -> None:
        """Index the rows with these search seqs (sorted), read from the file in batches."""
        for lo in range(0, len(missing), _READ_BATCH):
            wanted = missing[lo:lo + _READ_BATCH]
            params = [int(wanted[0]), int(wanted[-1])]
            table = cursor.sql(messages_table.INDEX_ROWS_BETWEEN, params=params).to_arrow_table()
            found = numpy_ints(table.column("search_seq"))
            keep = np.isin(found, wanted)
            if not keep.all():
                table = table.filter(_bool_array(keep))
            if table.num_rows:
                self.memory.append(SegmentPart(build_segment(table, self.lexicon, _uints(table.column("hash")))))
                self.changed = True
                self.maybe_flush()

    # -- changes -------------------------------------------------------------------------------

    def add_one(self, doc_id: str, group: str, seq: int, search_seq: int, tokens: list[str], replaces: bool,
                content: str | None = None) -> None:
        self.open()
        if replaces:
            self.kill_seqs(np.array([seq], dtype=np.int64), buffer=False)
        self.buffer.add(doc_id, group, seq, search_seq, tokens, content)
        self.changed = True
        self.maybe_flush()

    def add_table(self, table: Any) -> None:
        self.open()
        self.pending.append(table)
        self.changed = True
        if sum(t.num_rows for t in self.pending) >= BUILD_DOCS:
            import pyarrow as pa

            batch = pa.concat_tables(self.pending)
            self.pending = []
            # Built on the builder thread, so that the caller's next batch is tokenized and written meanwhile.
            self.building.append(_Build(_start_build(batch, self.lexicon), batch.num_rows,
                                        int(numpy_ints(batch.column("length")).sum()), os.getpid()))
        self.maybe_flush()

    def kill_seqs(self, seqs: np.ndarray, *, buffer: bool = True, ids: Collection[str] = ()) -> None:
        self.open()
        self.build_pending()
        for entry in self.persisted:
            if entry.part.kill_where(np.isin(entry.part.segment.doc_seq, seqs)):
                entry.changed = self.changed = True
        for part in self.memory:
            if part.kill_where(np.isin(part.segment.doc_seq, seqs)):
                self.changed = True
        if buffer:
            self.buffer.kill(ids)

    def kill_group(self, group: str) -> None:
        self.open()
        self.build_pending()
        for entry in self.persisted:
            code = entry.part.segment.group_code.get(group)
            if code is not None and entry.part.kill_where(entry.part.segment.doc_group == code):
                entry.changed = self.changed = True
        for part in self.memory:
            code = part.segment.group_code.get(group)
            if code is not None:
                part.kill_where(part.segment.doc_group == code)
        self.buffer.table.clear_group(group)
        self.changed = True

    # -- writing segments ----------------------------------------------------------------------

    def _writable(self) -> bool:
        return self.files is not None and not self.store.read_only and not self.write_failed

    def in_memory_docs(self) -> tuple[int, int]:
        docs = sum(p.n_live for p in self.memory) + self.buffer.n_live + sum(t.num_rows for t in self.pending) + \
            sum(b.docs for b in self.building)
        tokens = sum(p.live_length for p in self.memory) + self.buffer.live_length + \
            sum(int(numpy_ints(t.column("length")).sum()) for t in self.pending) + sum(b.tokens for b in self.building)
        return docs, tokens

    def maybe_flush(self) -> None:
        docs, tokens = self.in_memory_docs()
        if self._writable() and (docs >= FLUSH_DOCS or tokens >= FLUSH_TOKENS):
            try:
                self.flush()
                self.commit(None)
            except OSError as exc:  # a full disk must not fail the write that committed: stay in memory
                self.write_failed = True
                warnings.warn(f"The search index of {self.store.path} could not be written ({exc}); it stays in "
                              "memory for this session and is rebuilt from the file when next opened.",
                              SearchIndexWarning, stacklevel=2)

    def _buffer_segment(self) -> SegmentPart | None:
        rows = self.buffer.live_rows()
        if not rows:
            return None
        if any(r[5] is None for r in rows):  # written without its content: read them (a rare path)
            rows = self._with_contents(rows)
        import pyarrow as pa

        joined = [" ".join(r[4]) for r in rows]
        table = pa.table({
            "doc_id": arrow_strings([r[0] for r in rows]), "grp": arrow_strings([r[1] for r in rows]),
            "seq": arrow_ints(np.array([r[2] for r in rows], dtype=np.int64)),
            "search_seq": arrow_ints(np.array([r[3] for r in rows], dtype=np.int64)),
            "length": arrow_ints(np.array([len(r[4]) for r in rows], dtype=np.int64)),
            "tokens": arrow_strings(joined),
            "content": arrow_strings([r[5] or "" for r in rows]),
        })
        return SegmentPart(build_segment(table, self.lexicon))

    def _with_contents(self, rows: list[Any]) -> list[Any]:
        seqs = [r[2] for r in rows]
        cursor = self.store.conn.cursor()
        try:
            found = messages_table.contents(cursor, seqs)
        finally:
            cursor.close()
        return [(*r[:5], r[5] if r[5] is not None else found.get(r[2], "")) for r in rows]

    def flush(self) -> None:
        """Write the in-memory documents as one persisted segment (not yet committed to ``meta.json``)."""
        assert self.files is not None
        # The in-memory parts are let go only once their segment is on disk: a failed write loses nothing.
        self._settle()
        if self.pending and not self.memory and not self.buffer.rows:  # one bulk batch: one build, no merge
            import pyarrow as pa

            merged = build_segment(pa.concat_tables(self.pending), self.lexicon)
        elif len(self.memory) == 1 and self.memory[0].live is None and not self.pending and not self.buffer.rows:
            merged = self.memory[0].segment  # built from one batch and nothing deleted since: written as it is
        else:
            self.build_pending()
            inputs = [(p.segment, p.live) for p in self.memory if p.n_live]
            buffered = self._buffer_segment()
            if buffered is not None:
                inputs.append((buffered.segment, None))
            if not inputs:
                self.memory, self.buffer = [], BufferPart()
                return
            merged = merge_segments(inputs, len(self.lexicon))
        arrays = merged.arrays()
        arrays["doc_hash"] = self._hashes(merged)
        name = self.files.write("seg", merged.meta(), arrays)
        self.pending, self.memory, self.buffer = [], [], BufferPart()
        self.persisted.append(_Persisted(name, SegmentPart(Segment(self.files.open(name))), None))
        self.changed = True
        self._merge_if_needed()
        release_freed_memory()  # a segment's build or merge allocates several times its size for a moment

    def _hashes(self, segment: Segment) -> np.ndarray:
        """DuckDB's hash of each document's row, by search_seq (zero for a row that is gone)."""
        ss = segment.doc_search_seq
        if not len(ss):
            return np.zeros(0, dtype=np.uint64)
        cursor = self.store.conn.cursor()
        try:
            table = cursor.sql(messages_table.INDEX_HASHES, params=[int(ss.min()), int(ss.max())]).to_arrow_table()
        finally:
            cursor.close()
        found, hashes = numpy_ints(table.column("search_seq")).astype(np.int64), _uints(table.column("hash"))
        order = np.argsort(found)
        found, hashes = found[order], hashes[order]
        at = np.minimum(np.searchsorted(found, ss), max(len(found) - 1, 0))
        if not len(found):
            return np.zeros(len(ss), dtype=np.uint64)
        return np.where(found[at] == ss, hashes[at], 0).astype(np.uint64)

    def _merge_if_needed(self) -> None:
        assert self.files is not None
        while True:
            heavy = [i for i, e in enumerate(self.persisted) if e.part.n_deleted * 2 > e.part.segment.n_docs]
            if len(self.persisted) <= MAX_SEGMENTS and not heavy:
                return
            by_size = sorted(range(len(self.persisted)), key=lambda i: self.persisted[i].part.n_live)
            chosen = sorted(set(heavy) | set(by_size[:MERGE_AT_ONCE if len(self.persisted) > MAX_SEGMENTS else 0]))
            if len(chosen) == 1 and not self.persisted[chosen[0]].part.n_deleted:
                return
            entries = [self.persisted[i] for i in chosen]
            merged = merge_segments([(e.part.segment, e.part.live) for e in entries], len(self.lexicon))
            keep = [e for i, e in enumerate(self.persisted) if i not in set(chosen)]
            if merged.n_docs:
                name = self.files.write("seg", merged.meta(), merged.arrays())
                keep.insert(min(chosen), _Persisted(name, SegmentPart(Segment(self.files.open(name))), None))
            self.persisted = keep
            self.changed = True

    def commit(self, stamp: str | None) -> None:
        """Write the lexicon and changed deletions if needed, then ``meta.json`` naming the persisted parts."""
        assert self.files is not None
        if self.lexicon.dirty or self.lexicon_name is None:
            self.lexicon_name = self.files.write("lex", {}, self.lexicon.arrays())
            self.lexicon.saved(self.files.open(self.lexicon_name))
        for entry in self.persisted:
            if entry.changed:
                live = entry.part.live
                dead = np.flatnonzero(~live).astype(np.int64) if live is not None else np.zeros(0, np.int64)
                entry.deletes = self.files.write("del", {}, {"deleted": dead}) if len(dead) else None
                entry.changed = False
        meta = {"lexicon": self.lexicon_name, "stamp": stamp,
                "segments": [{"file": e.name, "deletes": e.deletes} for e in self.persisted]}
        self.files.commit(meta)
        self.saved_stamp = stamp
        self.files.collect_garbage(meta)

    # -- closing -------------------------------------------------------------------------------

    def before_close(self) -> None:
        """Flush and stamp the index while the store still holds the file (see the module docstring)."""
        self._closing_stamp: str | None = None
        self.guarded(self._save_at_close)

    def _save_at_close(self) -> None:
        if not self.opened or not self._writable():
            return
        store = self.store
        live = sum(e.part.n_live for e in self.persisted) + self.in_memory_docs()[0]
        if not self.persisted and self.files is not None and not self.files.folder.exists() \
                and live < PERSIST_MIN_DOCS:
            return
        if not self.changed and self.saved_stamp is not None and self.saved_stamp == store.opened_stamp and \
                self.exact and store.stamp() == self.saved_stamp:
            return  # nothing happened to the file or the index since it was saved
        # DuckDB's checkpoint first: it releases the GIL, so a segment still being built on the builder thread
        # is finished meanwhile. The flush only reads the file, so the stamp taken after it still holds.
        checkpointed = store.checkpoint()
        self.flush()
        stamp = store.stamp() if self.exact and checkpointed else None
        self.commit(stamp)
        self._closing_stamp = stamp

    def after_close(self) -> None:
        stamp = getattr(self, "_closing_stamp", None)
        store = self._store()
        if stamp is not None and store is not None and file_stamp(store.path) != stamp:
            self.commit(None)  # the file changed after the stamp was taken: the index is not exact any more


def _bool_array(mask: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(np.packbits(mask, bitorder="little"))])
