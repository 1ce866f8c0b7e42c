"""Retrieval evaluation figures: cold and warm run times, the default's targets, leave-one-dataset-out, ideas.

Run: .venv/bin/python benchmarks/eval_bench.py [--data PATH] [--only timing,targets,lodo,ideas] [--cache FILE]

1. timing: the CLI command below, in fresh processes on one new embedding cache file: cold (every turn and
   question embedded with MiniLM), then warm (every vector read from the cache), ``--repeats`` times each, with
   the machine check and the load average beside them.

       agentlab eval locomo --data PATH --strategies bm25,dense,hybrid --k 1,5,10 --cache FILE --out FILE

2. targets: ``default`` on LoCoMo categories 1-4: the full set (its weights cross-validated inside the run), the 6
   conversations its fixed parameters were not chosen on, and a fully cross-validated figure (prior and penalty
   chosen per fold by ``agentlab.eval.tune``, 5 folds by conversation).
3. lodo: leave one dataset out between LoCoMo (categories 1-4), the bundled set and LongMemEval-format data built
   by ``benchmarks/lme_synthetic.py`` (not the real LongMemEval): on each, ``default`` (weights learnt inside the
   run), ``default`` with fixed equal weights, ``default`` with the weights learnt on the two other datasets, and
   its two parts alone; the margin over the best part at R@5 with a 95% paired bootstrap interval.
4. ideas: one row per strategy idea on LoCoMo categories 1-4 (R@5, R@10, multi-hop R@10, MRR), each over all
   1,536 questions and over the 954 of the 6 conversations nothing was chosen on.

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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "datasets" / "locomo" / "locomo10.json"
DEVELOPMENT = {"conv-26", "conv-30", "conv-41", "conv-42"}
sys.path.insert(0, str(Path(__file__).parent))


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def timing(data: Path, folder: Path, repeats: int) -> None:
    from _timing import machine_check

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    print(f"machine check before: {machine_check():.0f} ms (fast ~120, slow ~200); {_load()}")
    for attempt in range(repeats):
        cache, out = folder / f"embeddings-{attempt}.duckdb", folder / "results.parquet"
        command = [sys.executable, "-m", "agentlab.cli", "eval", "locomo", "--data", str(data),
                   "--strategies", "bm25,dense,hybrid", "--k", "1,5,10", "--cache", str(cache), "--out", str(out),
                   "--no-progress"]
        for label in ("cold", "warm"):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
            elapsed = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            print(f"run {attempt + 1} {label}: {elapsed:.1f} s wall, {cpu:.1f} s CPU; machine check "
                  f"{machine_check():.0f} ms; {_load()}", flush=True)
            if label == "warm" and attempt == repeats - 1:
                print(done.stdout)


def _locomo(data: Path) -> Any:
    from agentlab.eval.datasets import load_locomo

    return load_locomo(data)


def _overall(results: Any, name: str, metric: str, conversations: set[str] | None = None,
             category: Any = None) -> float:
    rows = results.per_question[results.per_question["strategy"] == name]
    if conversations is not None:
        rows = rows[rows["conversation_id"].isin(conversations)]
    if category is not None:
        rows = rows[rows["category"] == category]
    return float(rows[metric].mean())


def targets(data: Path, cache: Any) -> None:
    from agentlab.eval import Grid, run, tune
    from agentlab.eval.strategies import Default

    dataset = _locomo(data)
    held = {c.id for c in dataset.conversations} - DEVELOPMENT
    results = run(dataset, {"default": Default()}, (1, 5, 10), categories=[1, 2, 3, 4], cache=cache, progress=False)
    print(results.report())
    print(f"chosen weights per fold: {[entry['chosen'] for entry in results.tuning_log]}")
    for label, conversations in (("all 10 conversations", None), ("6 held-out conversations", held)):
        values = [_overall(results, "default", m, conversations) for m in ("recall@5", "recall@10")]
        multi = _overall(results, "default", "recall@10", conversations, 1)
        print(f"default, {label}: R@5 {values[0]:.3f}, R@10 {values[1]:.3f}, multi-hop R@10 {multi:.3f}")
    grid = Grid(lambda prior, penalty: Default(prior=prior, penalty=penalty, weights=(1.0, 1.0)),
                prior=[0.0, 0.25, 0.5], penalty=[0.0, 0.2])
    tuned = tune(dataset, grid, metric="recall@10", folds=5, categories=[1, 2, 3, 4], cache=cache, progress=False)
    cv = tuned.results.per_question
    cv = cv[cv["tuning"] == "cross-validated"]
    print(f"fully cross-validated (prior, penalty per fold, 5 folds by conversation): R@5 {cv['recall@5'].mean():.3f}, "
          f"R@10 {cv['recall@10'].mean():.3f}, multi-hop R@10 {cv[cv['category'] == 1]['recall@10'].mean():.3f}")
    print(tuned.chosen.to_string(index=False))


def _parts() -> dict[str, Any]:
    from agentlab.eval.strategies import BM25, STOP_WORDS, Dense

    return {"bm25 part": BM25(stopwords=STOP_WORDS, unit="window", window=2, key="date",
                              query_rewrite="drop-speakers"),
            "dense part": Dense(key="speaker", query_rewrite="drop-speakers")}


def lodo(data: Path, cache: Any, folder: Path) -> None:
    from lme_synthetic import write

    from agentlab.eval import run
    from agentlab.eval.datasets import load_bundled, load_longmemeval
    from agentlab.eval.significance import paired_bootstrap
    from agentlab.eval.strategies import Default

    datasets = {"locomo": (_locomo(data), [1, 2, 3, 4]), "bundled": (load_bundled(), None),
                "lme-format": (load_longmemeval(write(folder / "lme.json")), None)}
    learnt: dict[str, list[float]] = {}
    for name, (dataset, categories) in datasets.items():  # the weights each dataset alone would choose
        probe = Default()
        run(dataset, {"probe": probe}, (5, 10), categories=categories, cache=cache, progress=False, folds=None)
        learnt[name] = probe.inner.inner.weights
        print(f"{name}: weights learnt on all its questions {learnt[name]}", flush=True)
    print(f"weights (bm25, dense) each dataset would choose on all its questions: {learnt}")
    print(f"{'held out':<12} {'strategy':<34} {'R@5':>6} {'R@10':>6}")
    for name, (dataset, categories) in datasets.items():
        others = [n for n in datasets if n != name]
        probe = Default()
        probe.use_cache(cache)
        started = time.perf_counter()
        probe.inner.inner.learn([(c, qs) for n in others
                                 for c, qs in _selection(*datasets[n]).values()])
        print(f"{name:<12} weights learnt on {'+'.join(others)}: {probe.inner.inner.weights} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
        strategies = {"default (learnt in the run)": Default(),
                      "default (equal weights)": Default(weights=(1.0, 1.0)),
                      f"default (weights of {'+'.join(others)})": Default(weights=probe.inner.inner.weights),
                      **_parts()}
        results = run(dataset, strategies, (5, 10), categories=categories, cache=cache, progress=False)
        for strategy in strategies:
            print(f"{name:<12} {strategy:<34} {_overall(results, strategy, 'recall@5'):6.3f} "
                  f"{_overall(results, strategy, 'recall@10'):6.3f}")
        wide = results.per_question.pivot_table(index="question_id", columns="strategy", values="recall@5")
        best = max(_parts(), key=lambda p: wide[p].mean())
        for strategy in list(strategies)[:3]:
            low, high = paired_bootstrap(wide[strategy].to_numpy(), wide[best].to_numpy())
            margin = wide[strategy].mean() - wide[best].mean()
            print(f"{name:<12} {strategy} - {best}: R@5 {margin:+.3f} [{low:+.3f}, {high:+.3f}] (n {len(wide)})")


def _selection(dataset: Any, categories: Any) -> Any:
    from agentlab.eval.runner import select_questions

    return select_questions(dataset, categories=categories)


def ideas(data: Path, cache: Any) -> None:
    from agentlab.eval import run
    from agentlab.eval.strategies import (
        BM25,
        MMR,
        STOP_WORDS,
        Default,
        Dense,
        Diversify,
        Hybrid,
        Neighbours,
        SessionPrior,
        SpeakerPrior,
        TimeAware,
        strip_question,
    )

    stop: dict[str, Any] = {"stopwords": STOP_WORDS}
    names: dict[str, Any] = {"query_rewrite": "drop-speakers"}

    def parts() -> list[Any]:
        return [BM25(unit="window", window=2, key="date", **stop, **names), Dense(key="speaker", **names)]

    def fused(method: str = "minmax") -> Any:
        return Hybrid(parts(), method=method, k=60)

    configurations = {
        "bm25 reference (simple tokens, Okapi)": lambda: BM25("simple", k1=1.5, idf="okapi"),
        "bm25 (FTS5 porter, upstream)": lambda: BM25(),
        "bm25 + stop words": lambda: BM25(**stop),
        "bm25 + stop words, window 2, key date": lambda: BM25(unit="window", window=2, key="date", **stop),
        "  + names dropped from the query": lambda: parts()[0],
        "  + RM3 (10 docs, 10 terms, 0.5)": lambda: BM25(unit="window", window=2, key="date", rm3=True, **stop, **names),
        "dense, key text": lambda: Dense(key="text"),
        "dense, key text, names dropped": lambda: Dense(key="text", **names),
        "dense, key speaker": lambda: Dense(key="speaker"),
        "dense, key speaker, question stripped": lambda: Dense(key="speaker", query_rewrite=strip_question),
        "dense, key speaker, names dropped": lambda: parts()[1],
        "hybrid shipped before (rrf k10 2:1, window1/date + speaker)": lambda: Hybrid(),
        "same parts as the default: rrf k60": lambda: fused("rrf"),
        "same parts: z-score fusion": lambda: fused("zscore"),
        "same parts: min-max fusion": lambda: fused("minmax"),
        "  + speaker prior 0.25": lambda: SpeakerPrior(fused(), weight=0.25),
        "  + speaker prior + time-aware 0.1": lambda: TimeAware(SpeakerPrior(fused(), weight=0.25), weight=0.1),
        "  + speaker prior + session prior 0.25 (two-stage)": lambda: SessionPrior(SpeakerPrior(fused(), weight=0.25)),
        "  + speaker prior + neighbours 0.2": lambda: Neighbours(SpeakerPrior(fused(), weight=0.25)),
        "  + speaker prior + MMR 0.3 (list questions)": lambda: MMR(SpeakerPrior(fused(), weight=0.25), when="list"),
        "  + speaker prior + session diversity 0.2, every question": lambda: Diversify(
            SpeakerPrior(fused(), weight=0.25), penalty=0.2, when="always"),
        "default, equal weights (= + session diversity 0.2, list questions)": lambda: Default(weights=(1.0, 1.0)),
        "default (weights learnt by 5-fold CV in the run)": lambda: Default(),
    }
    dataset = _locomo(data)
    held = {c.id for c in dataset.conversations} - DEVELOPMENT
    print(f"{'configuration':<70} {'R@5':>6} {'R@10':>6} {'mh@10':>6} {'MRR':>6} | held-out R@5 R@10 mh@10 | s")
    for name, build in configurations.items():
        started = time.perf_counter()
        results = run(dataset, {name: build()}, (5, 10), categories=[1, 2, 3, 4], cache=cache, progress=False,
                      n_boot=10)
        row = [_overall(results, name, m) for m in ("recall@5", "recall@10")]
        multi = _overall(results, name, "recall@10", category=1)
        mrr = _overall(results, name, "mrr")
        out = [_overall(results, name, m, held) for m in ("recall@5", "recall@10")]
        out_multi = _overall(results, name, "recall@10", held, 1)
        print(f"{name:<70} {row[0]:6.3f} {row[1]:6.3f} {multi:6.3f} {mrr:6.3f} | {out[0]:.3f} {out[1]:.3f} "
              f"{out_multi:.3f} | {time.perf_counter() - started:.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--only", default="timing,targets,lodo,ideas", help="which parts, comma-separated")
    parser.add_argument("--repeats", type=int, default=2, help="cold/warm pairs in the timing part")
    parser.add_argument("--cache", type=Path, help="embedding cache for parts 2-4 (default: a new file in /tmp)")
    args = parser.parse_args()
    if not args.data.is_file():
        sys.exit(f"No LoCoMo file at {args.data}; pass --data PATH (it is not shipped: CC BY-NC 4.0).")
    parts = {p.strip() for p in args.only.split(",")}
    from agentlab.eval.embedcache import EmbeddingCache

    with tempfile.TemporaryDirectory(prefix="agentlab-eval-bench-") as tmp:
        folder = Path(tmp)
        if "timing" in parts:
            timing(args.data, folder, args.repeats)
        cache = EmbeddingCache(args.cache or folder / "embeddings-0.duckdb")
        if "targets" in parts:
            targets(args.data, cache)
        if "lodo" in parts:
            lodo(args.data, cache, folder)
        if "ideas" in parts:
            ideas(args.data, cache)


if __name__ == "__main__":
    main()
