"""Memory-policy experiment on LoCoMo: how long the offline replay takes, and what each default policy keeps.

Run: .venv/bin/python benchmarks/experiments_bench.py [--data PATH] [--repeats N]

1. Timing, alternating ``--repeats`` times in this process: the anchor (reading locomo10.json, then appending
   its 5,882 turns one by one into a fresh in-memory session per conversation, with no policy: what one pass of
   appends costs), a search pass (every question through ``session.search(mode="any", limit=10)`` on those
   sessions), and the full replay of the 10 conversations under the 4 default policies
   (``agentlab.experiments.replay``, the same as ``agentlab experiment locomo``). The replay appends every turn
   4 times and searches every question 4 times, so ``replay - 4 x (appends + search)`` is what compaction
   (the extractive summaries) and the measuring cost.
2. Figures of the last replay: per default policy, mean prompt tokens at question time (and relative to
   ``none``), and the share of evidence kept verbatim, inside a summary, searchable, kept (verbatim or summary)
   and reachable (kept or searchable), overall and per category; then the compaction log.

LoCoMo is CC BY-NC 4.0 and not shipped: by default the file is read from ../shared/datasets/locomo.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "datasets" / "locomo" / "locomo10.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def anchor(data: Path) -> tuple[float, float, float, int, int]:
    """Read the dataset, append every turn into a bare session, search every question: seconds of each."""
    from agentlab.eval.datasets import load_locomo
    from agentlab.eval.importing import turn_message
    from agentlab.session._session import Session
    from agentlab.store._database import Store

    started = time.perf_counter()
    dataset = load_locomo(data)
    read = time.perf_counter() - started
    appends = searches = 0.0
    turns = questions = 0
    for conversation in dataset.conversations:
        roles = {s: ("user" if i == 0 else "assistant") for i, s in enumerate(conversation.speakers)}
        messages = [turn_message(conversation, t, role=roles[t.speaker], offset=t.index) for t in conversation.turns]
        store = Store()
        session = Session(store, conversation.id)
        started = time.perf_counter()
        for message in messages:
            session.append_message(message)
        appends += time.perf_counter() - started
        started = time.perf_counter()
        for q in conversation.questions:
            session.search(q.question, mode="any", limit=10)
        searches += time.perf_counter() - started
        turns += len(messages)
        questions += len(conversation.questions)
        store.close()
    return read, appends, searches, turns, questions


def replay(data: Path):
    import agentlab.experiments as ex
    from agentlab.eval.datasets import load_locomo

    started = time.perf_counter()
    results = ex.replay(load_locomo(data), progress=False)
    return time.perf_counter() - started, results


def figures(results) -> None:
    import pandas as pd

    table = results.table("category")
    print("\nPer default policy (means over questions with evidence; kept = verbatim or in a summary; "
          "reachable = kept or searchable at rank <= 10):\n")
    print("| policy | category | n | prompt tokens | vs none | verbatim | in summary | searchable | kept | reachable |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (policy, category), row in table.iterrows():
        name = "overall" if category == "overall" else f"{category} {CATEGORIES.get(int(category), '')}"
        print(f"| {policy} | {name} | {int(row['n'])} | {row['prompt_tokens']:,.0f} | {row['tokens_vs_none']:.3f} | "
              f"{row['verbatim']:.3f} | {row['in_summary']:.3f} | {row['searchable']:.3f} | {row['kept']:.3f} | "
              f"{row['reachable']:.3f} |")
    frontier = results.frontier()
    print("\nFrontier (95% bootstrap intervals over questions):")
    with pd.option_context("display.width", 160, "display.float_format", "{:.3f}".format):
        print(frontier.to_string(index=False))
    log = results.compactions.groupby("policy", sort=False).agg(
        compactions=("compaction", "size"), hidden=("evidence_hidden", "sum"),
        kept_in_summary=("evidence_kept_in_summary", "sum"), lost=("evidence_lost", "sum"),
        dropped_from_summary=("evidence_dropped_from_summary", "sum"))
    print("\nCompactions (evidence turns, counted once per compaction that changed them):")
    print(log.to_string())
    match = sorted(set(results.per_question["summary_match"]))
    print(f"summary match method: {', '.join(match)}; search: any, k 10")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if not args.data.is_file():
        print(f"LoCoMo not found at {args.data}; pass --data PATH (it is CC BY-NC and not shipped).")
        return 2
    sys.path.insert(0, str(Path(__file__).parent))
    from _timing import machine_check

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"machine check before: {machine_check():.0f} ms (fast ~120, slow ~200)")
    anchors, replays = [], []
    results = None
    for i in range(args.repeats):
        read, appends, searches, turns, questions = anchor(args.data)
        anchors.append((read, appends, searches))
        seconds, results = replay(args.data)
        replays.append(seconds)
        rest = seconds - 4 * (appends + searches) - read
        per_policy = ", ".join(f"{k} {v:.1f}" for k, v in results.seconds.items())
        print(f"run {i + 1}: read {read:.2f} s; bare appends {appends:.1f} s ({turns:,} turns, "
              f"{appends / turns * 1000:.2f} ms each); search {searches:.1f} s ({questions:,} questions); "
              f"replay {seconds:.1f} s ({per_policy}); replay - 4 x (appends + search) - read = {rest:.1f} s")
    print(f"replay of 10 conversations x 4 policies: {min(replays):.1f}-{max(replays):.1f} s "
          f"(median {statistics.median(replays):.1f}, {len(replays)} runs; target <= 120 s); "
          f"anchor appends {min(a[1] for a in anchors):.1f}-{max(a[1] for a in anchors):.1f} s per pass")
    print(f"load average: {os.getloadavg()[0]:.1f} (2 cores); machine check after: {machine_check():.0f} ms")
    figures(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
