"""Memory designs side by side on LoCoMo, offline: evidence reachable at question time against prompt tokens.

Run: .venv/bin/python benchmarks/designs_bench.py [--data PATH] [--embeddings PATH] [--plot PNG]

One replay (``agentlab.experiments.replay``, what ``agentlab experiment locomo --policies ...`` runs) of the 10
conversations under ``none``, the compaction ladder (aggressive, moderate, gentle) and every offline memory design
(``agentlab.experiments.DESIGNS``), timed beside its anchor measured in the same run (reading the file and appending
every turn once into a bare session). Then, per policy: mean prompt tokens at question time (and relative to
``none``) and the shares of evidence verbatim, in a summary, in a block, retrieved by the design's own retrieval,
in the prompt and reachable, with 95% bootstrap intervals over questions, overall and by category; first on the
6 held-out conversations, then on all 10. Last, the goal: the best design's reachable share at least 0.90 of
``none``'s with at most 15% of its prompt tokens, on the held-out conversations.

No setting of the designs was chosen on LoCoMo (their retrieval, hybrid with k 10 and one neighbour, is chosen
from principles). The 4 development conversations (:data:`DEV`) are the ones ``designs_tuning.py`` may compare
other retrievals on, so the goal is judged on the other six, and all 10 are shown after them. The embeddings are
cached in ``--embeddings`` (default: a fresh file, so the run is cold; give a kept file to time a warm run).

LoCoMo is CC BY-NC 4.0 and not shipped: by default the file is read from ../shared/datasets/locomo.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "datasets" / "locomo" / "locomo10.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DEV = ("conv-26", "conv-30", "conv-41", "conv-42")
"""Development conversations: settings of the designs were compared on these only."""
LADDER = ("none", "aggressive", "moderate", "gentle")
SHOWN = ("verbatim", "in_summary", "in_block", "retrieved", "in_prompt", "reachable")


def anchor(data: Path) -> tuple[float, int]:
    """Read the dataset and append every turn once into a bare in-memory session: seconds, turns."""
    from agentlab import Session, Store
    from agentlab.eval import load_locomo

    started = time.perf_counter()
    dataset = load_locomo(data)
    turns = 0
    for conversation in dataset.conversations:
        store = Store()
        session = Session(store, conversation.id)
        for t in conversation.turns:
            session.append_message({"id": f"{conversation.id}/{t.id}", "role": "user",
                                    "parts": [{"type": "text", "text": t.text}]})
            turns += 1
        store.close()
    return time.perf_counter() - started, turns


def interval(row, metric: str, digits: int = 3) -> str:
    mean, low, high = (row[(metric, part)] for part in ("mean", "ci_low", "ci_high"))
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def tables(results, title: str) -> None:
    summary = results.summary("category")
    wide = summary.pivot_table(index=["policy", "category"], columns="metric", values=["mean", "ci_low", "ci_high"],
                               sort=False).swaplevel(0, 1, axis=1)
    print(f"\n### {title}\n")
    print("| policy | category | n | prompt tokens | vs none | " + " | ".join(SHOWN) + " |")
    print("|---|---|---|---|---|" + "---|" * len(SHOWN))
    counts = summary[summary["metric"] == "reachable"].set_index(["policy", "category"])["n"]
    order = {name: i for i, name in enumerate(p.name for p in results.policies)}
    for (policy, category), row in sorted(wide.iterrows(), key=lambda kv: (order[kv[0][0]], kv[0][1] != "overall",
                                                                            kv[0][1])):
        name = "overall" if category == "overall" else f"{category} {CATEGORIES.get(int(category), '')}"
        shares = " | ".join(interval(row, m) if m in ("reachable", "in_prompt") else f"{row[(m, 'mean')]:.3f}"
                            for m in SHOWN)
        print(f"| {policy} | {name} | {int(counts[(policy, category)])} | {row[('prompt_tokens', 'mean')]:,.0f} | "
              f"{row[('prompt_tokens', 'mean')] / wide.loc[('none', category), ('prompt_tokens', 'mean')]:.3f} | "
              f"{shares} |")


def goal(results, designs) -> None:
    frontier = results.frontier("reachable").set_index("policy")
    none = frontier.loc["none"]
    print("\nGoal (held-out conversations): reachable >= 0.90 of none's at <= 15% of its prompt tokens\n")
    print("| design | prompt tokens vs none | reachable vs none | met |")
    print("|---|---|---|---|")
    best = None
    for name in designs:
        row = frontier.loc[name]
        tokens, share = row["prompt_tokens"] / none["prompt_tokens"], row["kept"] / none["kept"]
        met = tokens <= 0.15 and share >= 0.90
        print(f"| {name} | {tokens:.3f} | {share:.3f} [{row['kept_low'] / none['kept']:.3f}, "
              f"{row['kept_high'] / none['kept']:.3f}] | {'yes' if met else 'no'} |")
        if tokens <= 0.15 and (best is None or share > best[1]):
            best = (name, share, tokens)
    if best is None:
        print("\nno design within 15% of none's prompt tokens")
    else:
        verdict = "MET" if best[1] >= 0.90 else "NOT MET"
        print(f"\nbest design within the token budget: {best[0]} (reachable {best[1]:.3f} of none's at "
              f"{best[2]:.3f} of its tokens): goal {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--embeddings", type=Path, help="embedding cache file (default: a fresh one, a cold run)")
    parser.add_argument("--plot", type=Path, help="write the frontier plot (held-out conversations) to this PNG")
    parser.add_argument("--policies", help="comma-separated policies (default: the ladder and every design)")
    args = parser.parse_args()
    if not args.data.is_file():
        print(f"LoCoMo not found at {args.data}; pass --data PATH (it is CC BY-NC and not shipped).")
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.path.insert(0, str(Path(__file__).parent))
    from _timing import machine_check

    import agentlab.experiments as ex
    from agentlab.eval import load_locomo

    policies = args.policies.split(",") if args.policies else [*LADDER, *ex.DESIGNS]
    designs = [p for p in policies if p in ex.POLICIES and ex.POLICIES[p].design is not None]
    folder = None
    if args.embeddings is None:
        folder = tempfile.TemporaryDirectory()
        args.embeddings = Path(folder.name) / "embeddings.duckdb"
    print(f"machine check before: {machine_check():.0f} ms (fast ~120, slow ~200); load average "
          f"{os.getloadavg()[0]:.1f} (2 cores); embeddings cache {args.embeddings} "
          f"({'kept' if args.embeddings.exists() else 'new: a cold run'})")
    anchor_seconds, turns = anchor(args.data)
    started, cpu = time.perf_counter(), time.process_time()
    dataset = load_locomo(args.data)
    results = ex.replay(dataset, policies, embeddings=args.embeddings, progress=False)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    anchor_after, _ = anchor(args.data)
    per_policy = ", ".join(f"{k} {v:.0f}" for k, v in results.seconds.items())
    print(f"\nfull comparison ({len(policies)} policies x 10 conversations, {turns:,} turns each): {seconds:.0f} s "
          f"= {seconds / 60:.1f} min (goal <= 10 min), CPU {cpu:.0f} s (all threads of this process); per policy: "
          f"{per_policy} s")
    print(f"anchor (read + append every turn once into a bare session): {anchor_seconds:.1f} s before, "
          f"{anchor_after:.1f} s after; replay / anchor {seconds / max(anchor_seconds, anchor_after):.0f}-"
          f"{seconds / min(anchor_seconds, anchor_after):.0f}x")
    print(f"machine check after: {machine_check():.0f} ms; load average {os.getloadavg()[0]:.1f}")
    held_out = results.only([c.id for c in dataset.conversations if c.id not in DEV])
    tables(held_out, f"Held-out conversations ({held_out.per_question['conversation_id'].nunique()}, "
                     "not used for any choice)")
    tables(results, "All 10 conversations")
    if "none" in policies and designs:
        goal(held_out, designs)
    if args.plot:
        from agentlab import plot

        figure = plot.policy_frontier(held_out, kept="reachable", relative=True)
        figure.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")
    if folder is not None:
        folder.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
