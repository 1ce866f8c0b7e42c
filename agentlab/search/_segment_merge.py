"""Merging segments: their live documents, in order, as one new segment.

Because every segment of an index numbers terms with the same :class:`~agentlab.search._lexicon.Lexicon`, a merge
never compares strings: each input's postings are already sorted by term id, so the output position of every
posting is the term's start in the output, plus the postings of that term in earlier inputs, plus its rank
inside its own input. All of it is computed with numpy over whole arrays, in time proportional to the postings
merged. Deleted documents are dropped and the rest renumbered densely, in input order.
"""

from __future__ import annotations

import numpy as np

from agentlab.search._segment import DOC_COLUMNS, Segment, gather_bytes

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

    # Postings, in two passes so that one input's temporaries at a time are alive: first how many kept pairs and
    # occurrences each input has per term (which fixes every term's place in the output), then each input's
    # kept postings written to their places.
    def sections(seg: Segment) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        get = seg.file.verified if seg.file is not None else seg._arrays.__getitem__
        return get("post_doc"), get("post_tf"), get("positions")

    def pairs_of(seg: Segment, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        docs = sections(seg)[0]
        starts = seg._checked("term_start")
        dtype = _index_dtype(max(len(docs), seg.n_terms))
        return np.repeat(np.arange(seg.n_terms, dtype=dtype), np.diff(starts).astype(dtype)), keep[docs]

    pair_counts, occ_counts = [], []
    for (seg, _), keep in zip(parts, kept_masks):
        tf = sections(seg)[1]
        pair_tid, live_pair = pairs_of(seg, keep)
        pair_counts.append(np.bincount(pair_tid[live_pair], minlength=n_terms))
        occ = np.zeros(n_terms, dtype=np.int64)
        if len(pair_tid):
            occ[:seg.n_terms] = np.bincount(pair_tid[live_pair], weights=tf[live_pair], minlength=seg.n_terms)
        if seg.n_terms and int(seg._checked("term_pos_start")[-1]) != int(tf.sum(dtype=np.int64)):
            raise ValueError("segment positions do not add up to its counts")
        occ_counts.append(occ)
    total_pairs = sum(int(c.sum()) for c in pair_counts)
    total_occ = sum(int(c.sum()) for c in occ_counts)
    term_start = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.sum(pair_counts, axis=0) if pair_counts else np.zeros(n_terms, np.int64), out=term_start[1:])
    term_pos_start = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.sum(occ_counts, axis=0) if occ_counts else np.zeros(n_terms, np.int64), out=term_pos_start[1:])
    tf_dtype = np.result_type(*(sections(seg)[1].dtype for seg, _ in parts)) if parts else np.dtype(np.uint16)
    pos_dtype = np.result_type(*(sections(seg)[2].dtype for seg, _ in parts)) if parts else np.dtype(np.uint16)
    post_doc = np.empty(total_pairs, dtype=np.uint32)
    post_tf = np.empty(total_pairs, dtype=tf_dtype)
    positions = np.empty(total_occ, dtype=pos_dtype)
    pair_prefix = np.zeros(n_terms, dtype=np.int64)
    occ_prefix = np.zeros(n_terms, dtype=np.int64)
    for (seg, _), keep, mapping, counts, occ in zip(parts, kept_masks, mappings, pair_counts, occ_counts):
        docs, tf, pos = sections(seg)
        _, live_pair = pairs_of(seg, keep)
        local = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(counts, out=local[1:])
        where = np.repeat(term_start[:-1] + pair_prefix - local[:-1], counts)
        where += np.arange(len(where))
        post_doc[where] = mapping[docs[live_pair]]
        post_tf[where] = tf[live_pair]
        del where
        local_occ = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(occ, out=local_occ[1:])
        where = np.repeat(term_pos_start[:-1] + occ_prefix - local_occ[:-1], occ)
        where += np.arange(len(where))
        positions[where] = pos[np.repeat(live_pair, tf)]
        del where
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
        "doc_id_bytes": np.frombuffer(b"".join(id_chunks), dtype=np.uint8),
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
        arrays["doc_content_bytes"] = np.frombuffer(b"".join(content_chunks), dtype=np.uint8)
    return Segment(arrays, {"groups": list(groups), "n_terms": n_terms,
                            "total_length": int(arrays["doc_len"].sum(dtype=np.int64))})
