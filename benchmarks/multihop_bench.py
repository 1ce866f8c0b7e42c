"""Multi-hop retrieval on LoCoMo: the ``multihop`` strategy beside its anchor, ``default``, in the same run.

Run: .venv/bin/python benchmarks/multihop_bench.py [--data PATH] [--cache FILE]

Both strategies rank every question of LoCoMo categories 1-4 (1,536 with evidence) in one ``agentlab.eval.run``
over one embedding cache. Printed, per strategy and category: recall@5, recall@10 and MRR with 95% bootstrap
intervals over questions, for three selections:

- ``held-out``: the 6 conversations nothing in either strategy was chosen on (954 questions; the figure to quote);
- ``development``: conv-26, -30, -41, -42, where both strategies' parameters were chosen (582, in-sample);
- ``all``: the 10 conversations (mixed).

Then the paired difference ``multihop - default`` per category on the held-out conversations (bootstrap interval
of the mean difference and a paired randomisation test), so a gain on multi-hop that costs another category shows.
``default`` uses fixed equal fusion weights here (the weights its in-run cross-validation keeps on LoCoMo: the
same figures, without the 30 s of learning). Quality figures are deterministic; the seconds are not.

LoCoMo is CC BY-NC 4.0 and not shipped: by default the file is read from ../shared/datasets/locomo.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "datasets" / "locomo" / "locomo10.json"
DEVELOPMENT = {"conv-26", "conv-30", "conv-41", "conv-42"}
METRICS = ("recall@5", "recall@10", "mrr")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--cache", type=Path, help="embedding cache file (default: a new file in /tmp)")
    parser.add_argument("--boot", type=int, default=2000, help="bootstrap resamples")
    args = parser.parse_args()
    if not args.data.is_file():
        sys.exit(f"No LoCoMo file at {args.data}; pass --data PATH (it is not shipped: CC BY-NC 4.0).")

    import numpy as np

    from agentlab.eval import load_locomo, run
    from agentlab.eval.embedcache import EmbeddingCache
    from agentlab.eval.significance import paired_bootstrap, randomization_test
    from agentlab.eval.strategies import Default, MultiHop

    dataset = load_locomo(args.data)
    with tempfile.TemporaryDirectory(prefix="agentlab-multihop-bench-") as tmp:
        cache = EmbeddingCache(args.cache or Path(tmp) / "embeddings.duckdb")
        started = time.perf_counter()
        results = run(dataset, {"default": Default(weights=(1.0, 1.0)), "multihop": MultiHop()}, (5, 10),
                      categories=[1, 2, 3, 4], cache=cache, progress=False, n_boot=10)
        print(f"run: {time.perf_counter() - started:.0f} s; seconds per strategy {dict(results.seconds)}")
    rows = results.per_question
    names = dataset.category_names
    rng = np.random.default_rng(0)

    def interval(values: np.ndarray) -> str:
        draws = rng.integers(0, len(values), size=(args.boot, len(values)))
        low, high = np.percentile(values[draws].mean(axis=1), [2.5, 97.5])
        return f"{values.mean():.3f} [{low:.3f}, {high:.3f}]"

    held = ~rows["conversation_id"].isin(DEVELOPMENT)
    selections = {"held-out": held, "development": ~held, "all": held | ~held}
    for label, mask in selections.items():
        print(f"\n{label} ({rows[mask & (rows['strategy'] == 'default')].shape[0]} questions)")
        print(f"{'strategy':<9} {'category':<12} {'n':>4}  " + "  ".join(f"{m:<22}" for m in METRICS))
        for strategy in ("default", "multihop"):
            chosen = rows[mask & (rows["strategy"] == strategy)]
            groups = [(f"{c} {names.get(c, c)}", chosen[chosen["category"] == c])
                      for c in sorted(chosen["category"].unique())]
            for category, part in [*groups, ("overall", chosen)]:
                cells = "  ".join(f"{interval(part[m].to_numpy(dtype=float)):<22}" for m in METRICS)
                print(f"{strategy:<9} {category:<12} {len(part):>4}  {cells}")

    print("\nheld-out, multihop - default (paired; 95% bootstrap interval of the mean difference; randomisation p)")
    wide = rows[held].pivot_table(index=["conversation_id", "question_id", "category"], columns="strategy",
                                  values="recall@10").reset_index()
    for category in [*sorted(wide["category"].unique()), "overall"]:
        part = wide if category == "overall" else wide[wide["category"] == category]
        a, b = part["multihop"].to_numpy(dtype=float), part["default"].to_numpy(dtype=float)
        low, high = paired_bootstrap(a, b)
        label = category if category == "overall" else f"{category} {names.get(category, category)}"
        print(f"  R@10 {label:<14} n {len(part):>4}: {a.mean() - b.mean():+.3f} [{low:+.3f}, {high:+.3f}], "
              f"p {randomization_test(a, b, n_resamples=5000, seed=0):.3f}")


if __name__ == "__main__":
    main()
