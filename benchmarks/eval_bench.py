"""Retrieval evaluation figures on LoCoMo: recall per category, cold and warm run times, and the ideas table.

Run: .venv/bin/python benchmarks/eval_bench.py [--data PATH] [--skip-timing] [--skip-ideas]

1. Timing: the CLI command below, in a fresh process, twice on one new embedding cache file: cold (every
   turn and question embedded with MiniLM) then warm (every vector read from the cache). It prints the
   per-category table of the warm run.

       agentlab eval locomo --data PATH --strategies bm25,dense,hybrid --k 1,5,10 --cache FILE --out FILE

2. Ideas: each configuration below, in this process, on categories 1-4 (1,536 questions), from the plain
   strategies of datasets.md §5.6 to the fixes; overall recall@1/5/10 and MRR, then recall@5 per category.
   It reuses the cache of part 1, so only keys not embedded there (windows, stripped questions) cost time.

LoCoMo is CC BY-NC 4.0 and not shipped: by default the file is read from ../shared/datasets/locomo.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "datasets" / "locomo" / "locomo10.json"


def timing(data: Path, folder: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from _timing import machine_check

    print(f"machine check before: {machine_check():.0f} ms (fast ~120, slow ~200)")
    cache, out = folder / "embeddings.duckdb", folder / "results.parquet"
    command = [sys.executable, "-m", "agentlab.cli", "eval", "locomo", "--data", str(data),
               "--strategies", "bm25,dense,hybrid", "--k", "1,5,10", "--cache", str(cache), "--out", str(out),
               "--no-progress"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for label in ("cold", "warm"):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        # CPU seconds say what the run costs whatever else the machine is doing; on 2 idle cores
        # the wall time is between cpu / 2 (both cores busy, as during embedding) and cpu.
        print(f"{label}: {elapsed:.1f} s wall, {cpu:.1f} s CPU for the whole command "
              "(process start, load, embed, rank, score)")
        if label == "warm":
            print(done.stdout)
    print(f"load average after the runs: {os.getloadavg()[0]:.1f} (2 cores; above 2 means contention); "
          f"machine check after: {machine_check():.0f} ms")


def ideas(data: Path, cache_path: Path | None) -> None:
    from agentlab.eval.datasets import load_locomo
    from agentlab.eval.embedcache import EmbeddingCache
    from agentlab.eval.runner import run
    from agentlab.eval.strategies import BM25, STOP_WORDS, Dense, Hybrid, strip_question

    stop = {"stopwords": STOP_WORDS}
    configurations = {
        "bm25 reference (simple tokens, Okapi)": lambda: BM25("simple", k1=1.5, idf="okapi"),
        "bm25 (FTS5 porter, upstream)": lambda: BM25(),
        "bm25 + stop words": lambda: BM25(**stop),
        "bm25 + stop words, key speaker": lambda: BM25(key="speaker", **stop),
        "bm25 + stop words, key speaker+date": lambda: BM25(key="speaker+date", **stop),
        "bm25 + stop words, window 1": lambda: BM25(unit="window", **stop),
        "bm25 + stop words, window 1, key date": lambda: BM25(unit="window", key="date", **stop),
        "dense, key text (plain)": lambda: Dense(key="text"),
        "dense, key speaker": lambda: Dense(key="speaker"),
        "dense, key speaker, question stripped": lambda: Dense(key="speaker", query_rewrite=strip_question),
        "dense, window 1, key speaker": lambda: Dense(unit="window", key="speaker"),
        "rrf k60, bm25+stop / dense text (plain)": lambda: Hybrid([BM25(**stop), Dense(key="text")], k=60),
        "rrf k60, both key speaker": lambda: Hybrid([BM25(key="speaker", **stop), Dense(key="speaker")],
                                                    method="rrf", k=60),
        "rrf k10 w2:1, bm25 window / dense speaker": lambda: Hybrid(
            [BM25(unit="window", **stop), Dense(key="speaker")], method="rrf", k=10, weights=[2, 1]),
        "score, both key speaker": lambda: Hybrid([BM25(key="speaker", **stop), Dense(key="speaker")],
                                                  method="score"),
        "score, bm25 window / dense speaker": lambda: Hybrid([BM25(unit="window", **stop), Dense(key="speaker")],
                                                             method="score"),
        "score, bm25 window date / dense speaker": lambda: Hybrid(
            [BM25(unit="window", key="date", **stop), Dense(key="speaker")], method="score"),
        "hybrid default (rrf k10 w2:1, bm25 window date / dense speaker)": lambda: Hybrid(),
    }
    dataset = load_locomo(data)
    cache = EmbeddingCache(cache_path)
    print(f"{'configuration':<58} {'R@1':>6} {'R@5':>6} {'R@10':>6} {'MRR':>6} | R@5 c4 c1 c2 c3 | s")
    for name, build in configurations.items():
        started = time.perf_counter()
        results = run(dataset, {name: build()}, (1, 5, 10), categories=[1, 2, 3, 4], cache=cache,
                      progress=False, n_boot=100)
        table = results.table()
        row = table.loc[(name, "overall")]
        per = " ".join(f"{table.loc[(name, c), 'recall@5']:.3f}" for c in (4, 1, 2, 3))
        print(f"{name:<58} {row['recall@1']:6.3f} {row['recall@5']:6.3f} {row['recall@10']:6.3f} "
              f"{row['mrr']:6.3f} | {per} | {time.perf_counter() - started:.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--skip-ideas", action="store_true")
    parser.add_argument("--cache", type=Path, help="embedding cache for the ideas (default: the timing run's)")
    args = parser.parse_args()
    if not args.data.is_file():
        sys.exit(f"No LoCoMo file at {args.data}; pass --data PATH (it is not shipped: CC BY-NC 4.0).")
    with tempfile.TemporaryDirectory(prefix="agentlab-eval-bench-") as tmp:
        folder = Path(tmp)
        if not args.skip_timing:
            timing(args.data, folder)
        if not args.skip_ideas:
            cache = args.cache or (folder / "embeddings.duckdb" if not args.skip_timing else None)
            ideas(args.data, cache)


if __name__ == "__main__":
    main()
