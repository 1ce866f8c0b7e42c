"""Merging segments: their live documents, in order, as one new segment.

Because every segment of an index numbers terms with the same :class:`~agentlab.search.lexicon.Lexicon`, a merge
never compares strings: each input's postings are already sorted by term id, so the output position of every
posting is the term's start in the output, plus the postings of that term in earlier inputs, plus its rank
inside its own input. All of it is computed with numpy over whole arrays, in time proportional to the postings
merged. Deleted documents are dropped and the rest renumbered densely, in input order.
"""

from __future__ import annotations

import numpy as np

from agentlab.search.segment import DOC_COLUMNS, Segment, gather_bytes

__all__ = ["merge_segments"]


def _index_dtype(n: int) -> type[np.signedinteger]:
    return np.int32 if n < 2**31 - 1 else np.int64


def merge_segments(parts: list[tuple[Segment, np.ndarray | None]], n_terms: int) -> Segment:
    """One segment holding the live documents of ``parts`` (segment, live mask or None), in order.

    Args:
        parts: The inputs, oldest first; a mask marks the documents still alive (None: all).
        n_terms: The lexicon's size now (at least every input's ``n_terms``).
    """
    groups: dict[str, int] = {}
    columns: dict[str, list[np.ndarray]] = {c: [] for c in DOC_COLUMNS}
    id_chunks: list[bytes] = []
    id_sizes: list[np.ndarray] = []
    with_content = all(seg.has_content for seg, _ in parts)
    content_chunks: list[bytes] = []
    content_sizes: list[np.ndarray] = []
    kept_masks, mappings = [], []
    base = 0
    for seg, live in parts:
        keep = np.ones(seg.n_docs, dtype=np.bool_) if live is None else live[:seg.n_docs]
        mapping = np.full(seg.n_docs, -1, dtype=np.int64)
        count = int(keep.sum())
        mapping[keep] = np.arange(base, base + count)
        base += count
        kept_masks.append(keep)
        mappings.append(mapping)
        codes = np.array([groups.setdefault(g, len(groups)) for g in seg.groups], dtype=np.int32)
        for name in DOC_COLUMNS:
            values = getattr(seg, name)[keep]
            columns[name].append(codes[values] if name == "doc_group" and len(values) else values)
        offsets, raw = gather_bytes(seg._checked("doc_id_offsets"), seg._checked("doc_id_bytes"), keep)
        id_chunks.append(raw)
        id_sizes.append(np.diff(offsets))
        if with_content:
            offsets, raw = gather_bytes(seg._checked("doc_content_offsets"), seg._checked("doc_content_bytes"), keep)
            content_chunks.append(raw)
            content_sizes.append(np.diff(offsets))
    sizes = np.concatenate(id_sizes) if id_sizes else np.zeros(0, dtype=np.int64)
    id_offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=id_offsets[1:])

    # Postings: per input, the kept pairs (term, docnum, tf) and occurrences, counted per term.
    pair_counts, occ_counts, kept = [], [], []
    for (seg, _), keep, mapping in zip(parts, kept_masks, mappings):
        starts = seg._checked("term_start")
        pos_starts = seg._checked("term_pos_start")
        docs = seg.file.verified("post_doc") if seg.file is not None else seg._arrays["post_doc"]
        tf = seg.file.verified("post_tf") if seg.file is not None else seg._arrays["post_tf"]
        positions = seg.file.verified("positions") if seg.file is not None else seg._arrays["positions"]
        dtype = _index_dtype(max(len(docs), seg.n_terms))
        pair_tid = np.repeat(np.arange(seg.n_terms, dtype=dtype), np.diff(starts).astype(dtype))
        live_pair = keep[docs]
        counts = np.bincount(pair_tid[live_pair], minlength=n_terms)
        occ = np.zeros(n_terms, dtype=np.int64)
        occ[:seg.n_terms] = np.bincount(pair_tid[live_pair], weights=tf[live_pair], minlength=seg.n_terms) \
            .astype(np.int64) if len(pair_tid) else 0
        if seg.n_terms and int(pos_starts[-1]) != int(tf.sum(dtype=np.int64)):
            raise ValueError("segment positions do not add up to its counts")
        pair_counts.append(counts)
        occ_counts.append(occ)
        live_occ = np.repeat(live_pair, tf)
        kept.append((mapping[docs[live_pair]], tf[live_pair], positions[live_occ]))
    total_pairs = sum(int(c.sum()) for c in pair_counts)
    total_occ = sum(int(c.sum()) for c in occ_counts)
    term_start = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.sum(pair_counts, axis=0) if pair_counts else np.zeros(n_terms, np.int64), out=term_start[1:])
    term_pos_start = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.sum(occ_counts, axis=0) if occ_counts else np.zeros(n_terms, np.int64), out=term_pos_start[1:])
    tf_dtype = np.result_type(*(k[1].dtype for k in kept)) if kept else np.dtype(np.uint16)
    pos_dtype = np.result_type(*(k[2].dtype for k in kept)) if kept else np.dtype(np.uint16)
    post_doc = np.empty(total_pairs, dtype=np.uint32)
    post_tf = np.empty(total_pairs, dtype=tf_dtype)
    positions = np.empty(total_occ, dtype=pos_dtype)
    pair_prefix = np.zeros(n_terms, dtype=np.int64)
    occ_prefix = np.zeros(n_terms, dtype=np.int64)
    for counts, occ, (docs, tf, pos) in zip(pair_counts, occ_counts, kept):
        local = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(counts, out=local[1:])
        shift = term_start[:-1] + pair_prefix - local[:-1]
        post_doc[np.repeat(shift, counts) + np.arange(len(docs))] = docs
        post_tf[np.repeat(shift, counts) + np.arange(len(docs))] = tf
        local_occ = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(occ, out=local_occ[1:])
        shift_occ = term_pos_start[:-1] + occ_prefix - local_occ[:-1]
        positions[np.repeat(shift_occ, occ) + np.arange(len(pos))] = pos
        pair_prefix += counts
        occ_prefix += occ
    arrays = {name: (np.concatenate(chunks) if chunks else np.zeros(0)) for name, chunks in columns.items()}
    arrays["doc_len"] = arrays["doc_len"].astype(np.int32)
    arrays["doc_group"] = arrays["doc_group"].astype(np.int32)
    arrays["doc_seq"] = arrays["doc_seq"].astype(np.int64)
    arrays["doc_search_seq"] = arrays["doc_search_seq"].astype(np.int64)
    arrays["doc_hash"] = arrays["doc_hash"].astype(np.uint64)
    arrays.update({
        "doc_id_offsets": id_offsets,
        "doc_id_bytes": np.frombuffer(b"".join(id_chunks), dtype=np.uint8).copy(),
        "term_start": term_start,
        "term_pos_start": term_pos_start,
        "post_doc": post_doc,
        "post_tf": post_tf,
        "positions": positions,
    })
    if with_content:
        sizes = np.concatenate(content_sizes) if content_sizes else np.zeros(0, dtype=np.int64)
        arrays["doc_content_offsets"] = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=arrays["doc_content_offsets"][1:])
        arrays["doc_content_bytes"] = np.frombuffer(b"".join(content_chunks), dtype=np.uint8).copy()
    return Segment(arrays, {"groups": list(groups), "n_terms": n_terms,
                            "total_length": int(arrays["doc_len"].sum(dtype=np.int64))})
