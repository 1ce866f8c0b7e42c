"""What an evaluation returns: per-question rows, summaries with intervals, paired tests, and a printed report.

:class:`Results` holds one row per question and strategy (with its ``units`` and ``tuning`` mark), a summary per
category with bootstrap intervals, and what the run knew about its strategies (the methodology card). It saves to
Parquet and loads back (:meth:`Results.load`), so saved runs can be tabulated, tested and plotted later.

Invariants: the summary is recomputed from the rows (so a loaded run equals the saved one); every table says how
each strategy's parameters relate to the questions it is scored on (``tuning``); a comparison pairs the same
questions only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.errors import EvaluationError
from agentlab.eval.metrics import summarize
from agentlab.eval.reporting import TUNING_MARKS, render_report

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ID_COLUMNS", "TUNING_MARKS", "Results"]

ID_COLUMNS = ["strategy", "level", "units", "tuning", "conversation_id", "question_id", "category", "n_evidence"]
SUMMARY_COLUMNS = ["strategy", "category", "metric", "n", "mean", "ci_low", "ci_high"]

_META_KEY = b"agentlab.eval"


def _mark(values: Any) -> str:
    counts = values.value_counts()
    if len(counts) == 1:
        return str(counts.index[0])
    parts = [f"{mark} {count}" for mark, count in counts.items()]
    return "mixed: " + ", ".join(parts)


@dataclass
class Results:
    """What :func:`agentlab.eval.run` returns.

    Attributes:
        per_question: one row per question x strategy: ``strategy``, ``level`` (``"turn"`` or ``"session"``: what the
            metrics count), ``units`` (unit and key, e.g. ``"window1/date"``; a hybrid joins its parts' with
            ``" + "``), ``tuning`` (``fixed``, ``in-sample`` or ``cross-validated``, see :data:`TUNING_MARKS`),
            ``conversation_id``, ``question_id``, ``category``, ``n_evidence``, then ``recall@k``, ``hit@k``,
            ``all@k``, ``ndcg@k`` per k and ``mrr``, ``top`` (the first ``max(ks)`` ids retrieved), and ``fold``
            for cross-fitted rows.
        summary: ``strategy``, ``category`` (with an ``"overall"`` row), ``metric``, ``n``, ``mean``, ``ci_low``,
            ``ci_high`` (95% percentile bootstrap over questions).
        seconds: wall time per strategy (fitting, embedding, learning and ranking).
        ks: the cut-offs used.
        dataset: the dataset's name.
        category_names: category id -> name, where the dataset names them.
        tuning_log: what each learning strategy chose, per fold.
        methodology: per strategy, how its parameters were chosen.
    """

    per_question: pd.DataFrame
    summary: pd.DataFrame
    seconds: dict[str, float] = field(default_factory=dict)
    ks: tuple[int, ...] = (1, 5, 10)
    dataset: str = ""
    category_names: dict[Any, str] = field(default_factory=dict)
    tuning_log: list[dict[str, Any]] = field(default_factory=list)
    methodology: dict[str, str] = field(default_factory=dict)
    n_boot: int = 1000
    seed: int = 0

    def plot(
        self,
        *,
        metric: str = "recall",
        by_category: bool = True,
        strategies: Sequence[str] | None = None,
        ax: Any = None,
    ) -> Any:
        """Compare strategies: one line per strategy of ``metric@k`` against k, with 95% intervals.

        Args:
            metric: ``"recall"``, ``"hit"``, ``"all"`` or ``"ndcg"``.
            by_category: one panel per category plus ``"overall"``; otherwise the overall panel only.
            strategies: which strategies to draw, in this order (default all, in run order).
            ax: draw the overall panel into this Axes instead of a new figure (forces ``by_category=False``).

        Returns:
            The figure.

        Raises:
            ValueError: the results hold no ``metric@k`` column.
        """
        import matplotlib.pyplot as plt

        summary = self.summary
        prefix = f"{metric}@"
        rows = summary[summary["metric"].astype(str).str.startswith(prefix)]
        if rows.empty:
            raise ValueError(f"No {prefix}k metric in these results; use one of recall, hit, all, ndcg.")
        names = list(strategies) if strategies is not None else list(dict.fromkeys(rows["strategy"]))
        groups = list(dict.fromkeys(rows["category"])) if by_category and ax is None else ["overall"]
        if ax is None:
            fig, grid = plt.subplots(1, len(groups), figsize=(3.2 * len(groups) + 0.8, 3.4), sharey=True,
                                     squeeze=False)
            axes = list(grid[0])
        else:
            fig, axes = ax.figure, [ax]
        for panel, group in zip(axes, groups):
            part = rows[rows["category"] == group]
            for name in names:
                line = part[part["strategy"] == name].copy()
                if line.empty:
                    continue
                line["k"] = line["metric"].str.slice(len(prefix)).astype(int)
                line = line.sort_values("k")
                drawn = panel.plot(line["k"], line["mean"], marker="o", label=name)
                panel.fill_between(line["k"], line["ci_low"], line["ci_high"], alpha=0.15, color=drawn[0].get_color())
            n = int(part["n"].iloc[0]) if len(part) else 0
            panel.set_title(f"{group} (n={n})" if group == "overall" else f"category {group} (n={n})", fontsize=10)
            panel.set_xlabel("k")
            panel.set_ylim(0, 1)
            panel.grid(alpha=0.3)
        axes[0].set_ylabel(f"{metric}@k")
        axes[-1].legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        return fig

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]], ks: Sequence[int], *, n_boot: int = 1000, seed: int = 0,
                  **fields: Any) -> Results:
        """Build results (and their summary) from per-question rows."""
        import pandas as pd

        frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=[*ID_COLUMNS, "top"])
        return cls(frame, _summarize(frame, n_boot, seed), ks=tuple(ks), n_boot=n_boot, seed=seed, **fields)

    @property
    def strategies(self) -> list[str]:
        """Strategy names in run order."""
        return list(dict.fromkeys(self.per_question["strategy"])) if len(self.per_question) else []

    def label(self, category: Any) -> str:
        """``"1 multi-hop"`` where the category has a name, else the category as written."""
        name = self.category_names.get(category)
        if name is None and isinstance(category, str) and category.isdigit():
            name = self.category_names.get(int(category))
        return f"{category} {name}" if name else str(category)

    def table(self, metrics: str | Sequence[str] | None = None, *, ci: bool = False,
              names: bool = False) -> pd.DataFrame:
        """Means as a wide table: one row per (strategy, category), one column per metric.

        Args:
            metrics: which metrics (default ``recall@k`` for every k, then ``mrr``).
            ci: add ``"<metric> low"`` and ``"<metric> high"`` columns (95% bootstrap interval).
            names: categories as ``"1 multi-hop"`` instead of their ids.

        Returns:
            Index ``(strategy, category)``; columns ``units``, ``tuning``, ``n``, then the metrics.

        Raises:
            EvaluationError: a metric the results do not hold.
        """
        import pandas as pd

        if metrics is None:
            metrics = [f"recall@{k}" for k in self.ks] + ["mrr"]
        elif isinstance(metrics, str):
            metrics = [metrics]
        metrics = list(metrics)
        known = set(self.summary["metric"]) if len(self.summary) else set()
        missing = [m for m in metrics if m not in known]
        if missing and len(self.summary):
            raise EvaluationError(f"No metric {missing[0]!r} in these results; they hold {sorted(known)}.")
        columns = ["units", "tuning", "n", *metrics]
        if ci:
            columns += [f"{m} {end}" for m in metrics for end in ("low", "high")]
        if not len(self.summary):
            return pd.DataFrame(columns=columns, index=pd.MultiIndex.from_tuples([], names=["strategy", "category"]))
        frame = self.summary[self.summary["metric"].isin(metrics)]
        wide = frame.pivot_table(index=["strategy", "category"], columns="metric", values="mean", sort=False)
        out = wide[metrics].copy()
        out.insert(0, "n", frame.groupby(["strategy", "category"], sort=False)["n"].first())
        described = self.per_question.groupby("strategy", sort=False)["units"].first()
        out.insert(0, "tuning", [self._tuning(s, c) for s, c in out.index])
        out.insert(0, "units", [described.get(s, "") for s, _ in out.index])
        if ci:
            for end, column in (("low", "ci_low"), ("high", "ci_high")):
                bounds = frame.pivot_table(index=["strategy", "category"], columns="metric", values=column, sort=False)
                for m in metrics:
                    out[f"{m} {end}"] = bounds[m]
        if names:
            out.index = pd.MultiIndex.from_tuples([(s, c if c == "overall" else self.label(c)) for s, c in out.index],
                                                  names=["strategy", "category"])
        return out[columns]

    def _tuning(self, strategy: str, category: Any) -> str:
        rows = self.per_question[self.per_question["strategy"] == strategy]
        if category != "overall":
            rows = rows[rows["category"].astype(str) == str(category)]
        return _mark(rows["tuning"]) if "tuning" in rows and len(rows) else ""

    def compare(self, baseline: str | None = None, metric: str | None = None, *, n_resamples: int = 10_000,
                seed: int = 0, categories: Sequence[Any] | None = None) -> pd.DataFrame:
        """Paired tests of every strategy against ``baseline`` on the questions both scored.

        Args:
            baseline: the strategy the others are compared with (default the first strategy run).
            metric: default ``recall@10`` (or the largest ``recall@k``).
            n_resamples: resamples for the randomisation test and the bootstrap.
            seed: their seed.
            categories: compare on these categories only.

        Returns:
            One row per other strategy: ``strategy``, ``baseline``, ``metric``, ``n``, ``mean``, ``baseline_mean``,
            ``difference``, ``ci_low``, ``ci_high`` (95% paired bootstrap of the difference), ``p`` (two-sided
            paired randomisation test) and ``p_holm`` (Holm-adjusted over the rows; see
            :mod:`agentlab.eval.significance`).
        """
        import pandas as pd

        from agentlab.eval.significance import holm, paired_bootstrap, randomization_test

        names = self.strategies
        if not names:
            raise EvaluationError("These results hold no rows to compare.")
        baseline = baseline or names[0]
        if baseline not in names:
            raise EvaluationError(f"No strategy {baseline!r} in these results; they hold {names}.")
        metric = metric or (f"recall@{10 if 10 in self.ks else max(self.ks)}")
        if metric not in self.per_question.columns:
            raise EvaluationError(f"No metric {metric!r} in these results.")
        frame = self.per_question
        if categories is not None:
            frame = frame[frame["category"].astype(str).isin([str(c) for c in categories])]
        wide = frame.pivot_table(index="question_id", columns="strategy", values=metric, sort=False)
        rows = []
        for name in names:
            if name == baseline:
                continue
            pair = wide[[name, baseline]].dropna()
            if not len(pair):
                continue
            a, b = pair[name].to_numpy(), pair[baseline].to_numpy()
            low, high = paired_bootstrap(a, b, n_resamples=n_resamples, seed=seed)
            rows.append({"strategy": name, "baseline": baseline, "metric": metric, "n": len(pair),
                         "mean": float(a.mean()), "baseline_mean": float(b.mean()),
                         "difference": float((a - b).mean()), "ci_low": low, "ci_high": high,
                         "p": randomization_test(a, b, n_resamples=n_resamples, seed=seed)})
        out = pd.DataFrame(rows, columns=["strategy", "baseline", "metric", "n", "mean", "baseline_mean",
                                          "difference", "ci_low", "ci_high", "p"])
        out["p_holm"] = holm(out["p"].tolist()) if len(out) else []
        return out

    def report(self, metrics: Sequence[str] | None = None, *, baseline: str | None = None,
               categories: bool = True) -> str:
        """The printed report: means with 95% intervals per category, paired tests, and the methodology card."""
        return render_report(self, metrics, baseline=baseline, categories=categories)

    # --- saving and loading ----------------------------------------------------------------------------------

    def to_parquet(self, path: str | os.PathLike[str]) -> Path:
        """Write :attr:`per_question` to a Parquet file, with the run's settings in its metadata; returns the path."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        frame = self.per_question.copy()
        frame["category"] = frame["category"].astype(str)  # mixed int/str categories upset Arrow
        table = pa.Table.from_pandas(frame, preserve_index=False)
        meta = {"ks": list(self.ks), "seconds": self.seconds, "dataset": self.dataset,
                "category_names": {str(k): v for k, v in self.category_names.items()},
                "category_types": {str(c): type(c).__name__ for c in self.per_question.get("category", [])},
                "tuning_log": self.tuning_log, "methodology": self.methodology, "n_boot": self.n_boot,
                "seed": self.seed}
        schema = table.schema.with_metadata({**(table.schema.metadata or {}),
                                             _META_KEY: json.dumps(meta, default=str).encode()})
        pq.write_table(table.cast(schema), path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Results:
        """Results saved by :meth:`to_parquet` (or by ``agentlab eval --out``), with their summary recomputed.

        Raises:
            EvaluationError: the file is missing or is not a saved evaluation.
        """
        import pyarrow.parquet as pq

        path = Path(path)
        if not path.is_file():
            raise EvaluationError(f"No results file at {path}; write one with agentlab eval ... --out {path.name}.")
        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
            raise EvaluationError(f"{path} is not a Parquet file ({type(exc).__name__}: {exc}).") from None
        frame = table.to_pandas()
        missing = [c for c in ("strategy", "question_id", "category") if c not in frame.columns]
        if missing:
            raise EvaluationError(f"{path} is not a saved evaluation: it has no {missing[0]!r} column.")
        raw = (table.schema.metadata or {}).get(_META_KEY)
        meta = json.loads(raw) if raw else {}
        types = meta.get("category_types", {})
        frame["category"] = [int(c) if types.get(c) == "int" else c for c in frame["category"]]
        if "tuning" not in frame.columns:
            frame.insert(3, "tuning", "fixed")
        ks = tuple(meta.get("ks") or sorted({int(c.split("@")[1]) for c in frame.columns if c.startswith("recall@")}))
        names = {int(k) if k.isdigit() else k: v for k, v in meta.get("category_names", {}).items()}
        n_boot, seed = int(meta.get("n_boot", 1000)), int(meta.get("seed", 0))
        return cls(frame, _summarize(frame, n_boot, seed), seconds=meta.get("seconds", {}), ks=ks,
                   dataset=meta.get("dataset", ""), category_names=names, tuning_log=meta.get("tuning_log", []),
                   methodology=meta.get("methodology", {}), n_boot=n_boot, seed=seed)

    def __repr__(self) -> str:
        return f"Results(strategies={self.strategies}, rows={len(self.per_question)}, ks={self.ks})"


def _summarize(frame: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    import pandas as pd

    summaries = []
    for name in dict.fromkeys(frame["strategy"]) if len(frame) else []:
        part = frame[frame["strategy"] == name]
        drop = [c for c in ("top", "fold") if c in part.columns]
        summary = summarize(part.drop(columns=drop), by="category", n_boot=n_boot, seed=seed)
        summary.insert(0, "strategy", name)
        summaries.append(summary)
    return pd.concat(summaries, ignore_index=True) if summaries else pd.DataFrame(columns=SUMMARY_COLUMNS)
