"""The one setting of the memory designs chosen on data: their question-time retrieval, on LoCoMo's development
conversations only (conv-26, -30, -41, -42; ``designs_bench.DEV``).

Run: .venv/bin/python benchmarks/designs_tuning.py [--data PATH] [--embeddings PATH]

Replays the development conversations under ``none`` and the compaction-plus-retrieval design with each candidate
retrieval (``agentlab.experiments.with_retrieval``), and prints, per candidate, mean prompt
tokens relative to ``none`` and the share of evidence reachable. The rule fixed before looking: the candidate with
the highest reachable share whose prompt stays within 15% of ``none``'s, for compaction plus retrieval.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from designs_bench import DEFAULT_DATA, DEV

CANDIDATES = (("hybrid", 10, 1), ("hybrid", 20, 0), ("hybrid", 20, 1), ("hybrid", 30, 0))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--embeddings", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import agentlab.experiments as ex
    from agentlab.eval import load_locomo

    policies: list = ["none"]
    for method, k, neighbours in CANDIDATES:
        policies.append(ex.with_retrieval("compact-retrieve", ex.Retrieval(method, k=k, neighbours=neighbours)))
    started = time.perf_counter()
    results = ex.replay(load_locomo(args.data), policies, conversations=list(DEV), progress=False,
                        embeddings=args.embeddings if args.embeddings else None)
    print(f"{len(policies)} policies x {len(DEV)} development conversations in {time.perf_counter() - started:.0f} s")
    frontier = results.frontier("reachable").set_index("policy")
    none = frontier.loc["none", "prompt_tokens"]
    print("\n| policy | prompt tokens vs none | reachable [95% CI] |")
    print("|---|---|---|")
    for name, row in frontier.iterrows():
        print(f"| {name} | {row['prompt_tokens'] / none:.3f} | {row['kept']:.3f} [{row['kept_low']:.3f}, "
              f"{row['kept_high']:.3f}] |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
