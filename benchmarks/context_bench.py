"""Context-memory figures: knowledge ingestion with MiniLM, search_context latency, reopen time.

Run: ``.venv/bin/python benchmarks/context_bench.py [--entries 100000] [--skip-minilm]``

(a) Adding 10,000 knowledge entries through ``VectorSearchProvider`` with the real MiniLM model, against calling
    the embedder's own ``encode`` (the model alone, no storage) on the same texts in the same run
    (target: ours >= 85% of direct).
(b) ``session.run_tool("search_context", ...)`` over 100,000 entries embedded with ``HashEmbedder(384)``: p50 for
    a vector block (target <= 25 ms) and a hybrid block (target <= 40 ms). The whole tool path is timed: input
    checking, the provider's search, reading the hits' texts and formatting the result.
(c) Closing the agent, reopening it, building the session again and answering the first vector search
    (target <= 2 s).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).parent))
from _timing import percentiles, row
from vectors_bench import sentences

from agentlab import Agent, get_agent
from agentlab.context._search_providers import HybridSearchProvider, VectorSearchProvider
from agentlab.search._embedders import HashEmbedder, MiniLMEmbedder
from agentlab.search._faiss_index import vector_indexes
from agentlab.session._session import Session


def bench_ingest(root: Path, n: int, chunk: int) -> dict[str, float]:
    texts = sentences(n, seed=11)
    embedder = MiniLMEmbedder()
    started = time.perf_counter()
    embedder.encode(["warm up"] * 64)
    print(f"(a) model import + load + warm-up: {time.perf_counter() - started:.1f} s; {n} texts in chunks of {chunk}")
    agent = get_agent(Agent, "ingest", root=root)  # a fresh file: nothing embedded yet
    provider = VectorSearchProvider(agent, embedder, label="knowledge")
    direct = ours = 0.0

    def run_direct(part: list[str]) -> float:
        t = time.perf_counter()
        embedder.encode(part)
        return time.perf_counter() - t

    def run_ours(start: int, part: list[str]) -> float:
        t = time.perf_counter()
        provider.set_many([(f"note-{start + j}", text) for j, text in enumerate(part)])
        return time.perf_counter() - t

    # The two sides alternate chunk by chunk (ABBA), so the load of other processes on this shared machine,
    # which drifts over minutes, falls on both alike.
    for i, start in enumerate(range(0, n, chunk)):
        part = texts[start : start + chunk]
        if i % 2 == 0:
            direct += run_direct(part)
            ours += run_ours(start, part)
        else:
            ours += run_ours(start, part)
            direct += run_direct(part)
    assert provider.count() == n
    agent.close()
    d_rate, o_rate = n / direct, n / ours
    print(f"    MiniLMEmbedder.encode:      {direct:.1f} s ({d_rate:.0f} texts/s)")
    print(f"    VectorSearchProvider:       {ours:.1f} s ({o_rate:.0f} texts/s)")
    print(f"    ours / direct = {o_rate / d_rate:.1%} (target >= 85%)")
    return {"direct_per_s": d_rate, "ours_per_s": o_rate, "ratio": o_rate / d_rate}


def build_session(agent: Agent) -> Session:
    embedder = HashEmbedder(384)
    return (
        Session.create(agent)
        .with_context("knowledge", VectorSearchProvider(agent, embedder))
        .with_context("hybrid", HybridSearchProvider(agent, embedder))
    )


def block_provider(session: Session, label: str) -> Any:
    """The provider behind a context block of ``session`` (the blocks are loaded)."""
    config = session.context.config(label)
    assert config is not None, label
    return config.provider


def bench_search(root: Path, n: int, queries: int) -> dict[str, float]:
    import faiss

    texts = sentences(n, seed=12, numbered=True)
    agent = get_agent(Agent, "search", root=root)
    session = build_session(agent)
    items = [(f"note-{i}", text) for i, text in enumerate(texts)]
    session.tools()  # loads the blocks, which gives each provider its label
    t = time.perf_counter()
    block_provider(session, "knowledge").set_many(items)
    print(f"(b) {n} entries into the vector block: {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    block_provider(session, "hybrid").set_many(items)  # vectors reused by content hash; words indexed
    print(f"    the same entries into the hybrid block: {time.perf_counter() - t:.1f} s")
    asks = sentences(queries, seed=13)
    labels = {"knowledge": "vector", "hybrid": "hybrid"}
    samples: dict[str, list[float]] = {label: [] for label in labels}
    for label in labels:
        session.run_tool("search_context", {"label": label, "query": "warm up"})  # builds the caches
    # Anchors, timed on the same queries in the same loop: the FAISS flat search alone (the floor of a vector
    # search), and the BM25 search alone; what search_context adds on top is this layer's overhead.
    vectors = block_provider(session, "knowledge").vectors
    index = vector_indexes(agent.store)[vectors.namespace].index
    words = block_provider(session, "hybrid").index
    samples["faiss"], samples["bm25"] = [], []
    for query in asks:  # every measurement per query, so load on the shared machine hits them alike
        for label in labels:
            t = time.perf_counter()
            out = session.run_tool("search_context", {"label": label, "query": query})
            samples[label].append((time.perf_counter() - t) * 1e3)
            assert out.startswith("[note-"), out[:200]
        vector = vectors.embedder.encode([query])
        faiss.omp_set_num_threads(1)  # as VectorStore searches
        t = time.perf_counter()
        index.search(vector, 10)
        samples["faiss"].append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        words.search(query, mode="any", limit=50)
        samples["bm25"].append((time.perf_counter() - t) * 1e3)
    figures = {}
    for label, kind in labels.items():
        stats = percentiles(samples[label])
        target = 25 if kind == "vector" else 40
        print("    " + row(f"search_context ({kind}), {queries} queries", stats, extra=f"(target p50 <= {target} ms)"))
        figures[label] = stats["p50"]
    for label, what in (("faiss", "anchor: FAISS flat top-10 alone"), ("bm25", "anchor: BM25 any-mode top-50 alone")):
        print("    " + row(what, percentiles(samples[label])))
    agent.close()

    t0 = time.perf_counter()
    agent = get_agent(Agent, "search", root=root)
    session = build_session(agent)
    t1 = time.perf_counter()
    out = session.run_tool("search_context", {"label": "knowledge", "query": asks[0]})
    elapsed = time.perf_counter() - t0
    assert out.startswith("[note-")
    print(f"(c) reopen the agent + first vector search at {n}: {elapsed:.2f} s (target <= 2 s; open and build the "
          f"session {t1 - t0:.2f} s, first search incl. the FAISS rebuild {elapsed - (t1 - t0):.2f} s)")
    agent.close()
    figures["reopen_s"] = elapsed
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minilm-entries", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=1000, help="texts per alternating direct/ours step in (a)")
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--skip-minilm", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentlab-context-bench-") as folder:
        if not args.skip_minilm:
            bench_ingest(Path(folder), args.minilm_entries, args.chunk)
        bench_search(Path(folder), args.entries, args.queries)


if __name__ == "__main__":
    main()
