"""Benchmark of agentlab.search._fulltext at 100,000 documents, with sqlite3 FTS5 as the anchor.

Corpus: 12-word texts drawn from a 20,000-word vocabulary with Zipf weights (1/rank), seeded.
Prints per-document index latency inside a transaction that also inserts one message-like row,
bulk indexing throughput, cold view build, and search latency per mode, next to the same queries
on an FTS5 table (``porter unicode61``, ``ORDER BY rank LIMIT 10``).

Run: ``.venv/bin/python benchmarks/fulltext_bench.py [--docs 100000] [--path /tmp/fts_bench.duckdb]``
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import string
import tempfile
import time
from pathlib import Path

import numpy as np

from agentlab.search._fulltext import FullTextIndex
from agentlab.store._database import Store


def vocabulary(n: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))))
    return sorted(words)


def texts(n: int, vocab: list[str], seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    picks = rng.choice(len(vocab), size=(n, 12), p=weights / weights.sum())
    return [" ".join(vocab[i] for i in row) for row in picks]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def line(name: str, values_ms: list[float], anchor: list[float] | None = None) -> None:
    p50, p95 = pct(values_ms, 0.5), pct(values_ms, 0.95)
    extra = ""
    if anchor:
        extra = f"   fts5 p50 {pct(anchor, 0.5):7.3f}  p95 {pct(anchor, 0.95):7.3f}  ratio(p50) {p50 / pct(anchor, 0.5):5.2f}"
    print(f"  {name:<34} p50 {p50:7.3f} ms  p95 {p95:7.3f} ms{extra}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--path", default=os.path.join(tempfile.gettempdir(), "agentlab_fts_bench.duckdb"))
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    for suffix in ("", ".wal"):
        Path(args.path + suffix).unlink(missing_ok=True)

    rng = random.Random(42)
    vocab = vocabulary(20_000, rng)
    corpus = texts(args.docs, vocab, seed=1)
    extra = texts(args.appends * 3, vocab, seed=2)
    print(f"corpus: {args.docs:,} docs x 12 words, Zipf over {len(vocab):,} words; file {args.path}")

    store = Store(args.path)
    store.execute("CREATE TABLE bench_messages (id VARCHAR, session_id VARCHAR, parent_id VARCHAR, "
                  "role VARCHAR, content VARCHAR)")
    fts = FullTextIndex(store, "messages")

    import pyarrow  # noqa: F401 - a one-time import (about 0.3-0.8 s), not part of the throughput

    t0, c0 = time.perf_counter(), time.process_time()
    fts.index_many((f"m{i}", text, f"s{i % 100}") for i, text in enumerate(corpus))
    bulk, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"\nbulk index_many: {bulk:.2f} s = {args.docs / bulk:,.0f} docs/s wall, {args.docs / cpu:,.0f} docs/s "
          "per CPU second (tokenize + DuckDB insert + Arrow, one transaction)")

    fts._ns.loaded = None
    t0, c0 = time.perf_counter(), time.process_time()
    fts.search("warmup")
    print(f"cold view build from DuckDB: {time.perf_counter() - t0:.2f} s wall, {time.process_time() - c0:.2f} s CPU "
          "(first search or first index() of a process)")

    # -- appends: message row + index row in one transaction, the view already built ---------------
    insert_message = "INSERT INTO bench_messages VALUES (?, ?, ?, ?, ?)"
    with_index, message_only, index_part = [], [], []
    for i in range(args.appends):
        text = extra[i]
        t0 = time.perf_counter()
        with store.transaction():
            store.execute(insert_message, [f"b{i}", "s1", None, "user", text])
        message_only.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        with store.transaction():
            store.execute(insert_message, [f"n{i}", "s1", None, "user", text])
            t1 = time.perf_counter()
            fts.index(f"n{i}", text, group="s1")
            index_part.append((time.perf_counter() - t1) * 1000)
        with_index.append((time.perf_counter() - t0) * 1000)
    print(f"\nappend ({args.appends} transactions, file-backed, view already built; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):")
    line("message row only", message_only)
    line("message row + index row", with_index)
    line("index() call inside it", index_part)

    # -- queries ---------------------------------------------------------------------------------
    qrng = np.random.default_rng(3)
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    picks = qrng.choice(len(vocab), size=(args.queries, 2), p=weights / weights.sum())
    word_queries = [f"{vocab[a]} {vocab[b]}" for a, b in picks]
    phrase_queries = []
    for i in qrng.integers(0, args.docs, size=args.queries):
        words = corpus[i].split()
        j = int(qrng.integers(0, 11))
        phrase_queries.append(f"{words[j]} {words[j + 1]}")

    oracle = sqlite3.connect(":memory:")
    oracle.execute("CREATE VIRTUAL TABLE t USING fts5(content, tokenize='porter unicode61')")
    t0 = time.perf_counter()
    with oracle:
        oracle.executemany("INSERT INTO t(rowid, content) VALUES (?, ?)", enumerate(corpus, start=1))
    print(f"\nsqlite3 FTS5 bulk insert (anchor): {args.docs / (time.perf_counter() - t0):,.0f} docs/s")

    def fts5_query(query: str, mode: str) -> str:
        quoted = ['"' + w + '"' for w in query.split()]
        return '"' + query + '"' if mode == "phrase" else (" OR " if mode == "any" else " ").join(quoted)

    print(f"\nsearch top-10 at {args.docs:,} docs ({args.queries} queries each; 2 Zipf-drawn words, "
          "phrases = adjacent pairs from documents):")
    for mode, queries in [("any", word_queries), ("all", word_queries), ("phrase", phrase_queries)]:
        ours, theirs, agree = [], [], 0
        for query in queries:
            t0 = time.perf_counter()
            hits = fts.search(query, mode=mode, limit=10)
            ours.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            rows = oracle.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT 10",
                                  [fts5_query(query, mode)]).fetchall()
            theirs.append((time.perf_counter() - t0) * 1000)
            agree += len(hits) == len(rows)
        line(mode, ours, theirs)
        print(f"  {'':<34} same hit count as FTS5 on {agree}/{len(queries)} queries")

    after = []
    for i in range(args.appends, min(2 * args.appends, len(extra))):
        with store.transaction():
            store.execute(insert_message, [f"x{i}", "s1", None, "user", extra[i]])
            fts.index(f"x{i}", extra[i], group="s1")
        t0 = time.perf_counter()
        fts.search(word_queries[i % len(word_queries)], mode="any", limit=10)
        after.append((time.perf_counter() - t0) * 1000)
    line("any, right after each append", after)
    print(f"\ndocs in index: {fts.count():,};  mean of per-append index() share: "
          f"{statistics.mean(index_part) / statistics.mean(with_index):.0%}")
    store.close()


if __name__ == "__main__":
    main()
