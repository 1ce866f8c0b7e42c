"""The printed evaluation report: means with intervals, category names, paired tests and the methodology card.

:func:`render_report` is what ``agentlab eval`` and ``agentlab eval show`` print and what
:meth:`~agentlab.eval.results.Results.report` returns. Invariant: every report ends with the methodology card,
which says for each strategy how its parameters were chosen and what each ``tuning`` mark means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["TUNING_MARKS", "render_report"]

#: What each ``tuning`` mark means (printed under every report).
TUNING_MARKS = {
    "fixed": "parameters not chosen on these questions (principle or other data)",
    "in-sample": "parameters chosen on these very questions: optimistic, not a held-out figure",
    "cross-validated": "parameters learnt on other conversations' questions (folds by conversation)",
}


def _cell(mean: float, low: float, high: float) -> str:
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def render_report(results: Any, metrics: Sequence[str] | None = None, *, baseline: str | None = None,
                  categories: bool = True) -> str:
    """The report as text (see the module docstring)."""
    import pandas as pd

    metrics = list(metrics) if metrics is not None else [f"recall@{k}" for k in results.ks] + ["mrr"]
    table = results.table(metrics, ci=True, names=True)
    if not categories:
        table = table[[c == "overall" for _, c in table.index]]
    shown = pd.DataFrame(index=table.index)
    shown["n"] = table["n"].astype(int)
    for m in metrics:
        shown[m] = [_cell(a, b, c) for a, b, c in zip(table[m], table[f"{m} low"], table[f"{m} high"])]
    lines = [f"{results.dataset or 'dataset'}: means with 95% bootstrap intervals over questions", ""]
    with pd.option_context("display.width", 200, "display.max_rows", 500, "display.max_colwidth", 80):
        lines.append(shown.to_string())
    lines += ["", "strategy units (unit/key of each part; q: the query rewrite), tuning, seconds:"]
    for name in results.strategies:
        units = table.loc[name, "units"].iloc[0] if name in table.index.get_level_values(0) else ""
        tuning = table.loc[(name, "overall"), "tuning"] if (name, "overall") in table.index else ""
        seconds = results.seconds.get(name)
        timing = f", {seconds:.1f} s" if seconds is not None else ""
        lines.append(f"  {name}: {units}; {tuning}{timing}")
    if len(results.strategies) > 1:
        compared = results.compare(baseline)
        if len(compared):
            metric, base = compared["metric"].iloc[0], compared["baseline"].iloc[0]
            lines += ["", f"paired tests against {base} on {metric} (difference, 95% paired bootstrap interval, "
                          f"randomisation p, Holm-adjusted over {len(compared)} comparisons):"]
            for row in compared.itertuples():
                lines.append(f"  {row.strategy}: {row.difference:+.3f} [{row.ci_low:+.3f}, {row.ci_high:+.3f}], "
                             f"p {row.p:.4f}, p_holm {row.p_holm:.4f} (n {row.n})")
    lines += ["", "methodology:"]
    for name in results.strategies:
        text = results.methodology.get(name)
        if text:
            lines.append(f"  {name}: {text}")
    used = set(results.per_question["tuning"]) if "tuning" in results.per_question else set()
    for mark, meaning in TUNING_MARKS.items():
        if mark in used:
            lines.append(f"  {mark}: {meaning}")
    lines.append("  recall@k: share of a question's evidence turns in the top k; mrr: 1 / rank of the first.")
    return "\n".join(lines)
