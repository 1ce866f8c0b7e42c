"""Plots for notebooks: matplotlib figures of evaluation results (and, later, session statistics).

Every function imports matplotlib when called, so ``import agentlab`` stays fast, and returns the
``matplotlib.figure.Figure`` it drew without calling ``plt.show()``: a notebook displays it, a
script saves it with ``fig.savefig(path)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from agentlab.eval.runner import Results

__all__ = ["recall_curves", "tokens"]


def recall_curves(
    results: Results,
    *,
    metric: str = "recall",
    by_category: bool = True,
    strategies: Sequence[str] | None = None,
    ax: Any = None,
) -> Figure:
    """Compare strategies: one line per strategy of ``metric@k`` against k, with 95% intervals
    (:meth:`agentlab.eval.Results.plot`, which takes the same options)."""
    return results.plot(metric=metric, by_category=by_category, strategies=strategies, ax=ax)


# --- session statistics -------------------------------------------------------------


def tokens(session: Any, *, threshold: int | None = None, prompt_tokens: int | None = None, ax: Any = None) -> Figure:
    """The compaction saw-tooth: a session's token estimate after every append, with compaction markers.

    One line of :func:`agentlab.frames.tokens` (the session's ``tokens_df()``): the estimate climbs with each
    append and drops at each compaction (a triangle marks it); the dashed line is the threshold that triggers
    automatic compaction.

    Args:
        session: A :class:`~agentlab.session.Session`.
        threshold: Threshold to draw (default: the session's ``token_threshold``; none is drawn if unset).
        prompt_tokens: System-prompt tokens added to every point (default: the current prompt's estimate).
        ax: Draw into this Axes instead of a new figure.

    Returns:
        The figure.
    """
    import matplotlib.pyplot as plt

    from agentlab.session import tokens_frame as tokens_table

    df = tokens_table(session, threshold=threshold, prompt_tokens=prompt_tokens).to_pandas()
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 3.6))
    else:
        fig = ax.figure
    ax.plot(df["appends"], df["tokens"], lw=1.3, color="C0", label="estimated tokens")
    drops = df[df["kind"] == "compaction"]
    if len(drops):
        ax.scatter(drops["appends"], drops["tokens"], marker="v", s=36, color="C3", zorder=3,
                   label=f"compaction ({len(drops)})")
    limit = df["threshold"].dropna()
    if len(limit):
        ax.axhline(float(limit.iloc[0]), ls="--", lw=1, color="0.4", label=f"threshold ({limit.iloc[0]:g})")
    ax.set_xlabel("messages appended")
    ax.set_ylabel("estimated tokens")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if len(df):
        ax.legend(fontsize=8, loc="upper left")
    else:
        ax.set_title("no messages yet", fontsize=10)
    fig.tight_layout()
    return fig


__all__ += ["tokens"]


# --- memory policies (agentlab/experiments) -----------------------------------------------------------


def policy_frontier(results: Any, *, kept: str = "kept", relative: bool = False, ax: Any = None) -> Figure:
    """Evidence kept against prompt size: one point per memory policy (compaction settings and memory designs
    alike), with 95% intervals on both axes.

    Args:
        results: What :func:`agentlab.experiments.replay` returned (anything with a ``frontier(kept)`` method), or
            the frame that method returns.
        kept: Which share goes on the y axis: ``"kept"`` (verbatim or in a summary), ``"verbatim"``,
            ``"in_summary"``, ``"in_block"``, ``"retrieved"`` (put in the prompt by a design's own retrieval),
            ``"in_prompt"`` (any of those), ``"searchable"`` or ``"reachable"`` (in the prompt or found by search).
        relative: Prompt tokens as a share of the policy that never compacts (``none``), if there is one.
        ax: Draw into this Axes instead of a new figure.

    Returns:
        The figure.
    """
    import matplotlib.pyplot as plt

    frame = results.frontier(kept) if hasattr(results, "frontier") else results
    x, low, high = (frame[c].astype(float) for c in ("prompt_tokens", "tokens_low", "tokens_high"))
    label = "mean prompt tokens at question time"
    base = frame.loc[frame["policy"] == "none", "prompt_tokens"]
    if relative and len(base):
        x, low, high = x / float(base.iloc[0]), low / float(base.iloc[0]), high / float(base.iloc[0])
        label = "prompt tokens relative to none"
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
    else:
        fig = ax.figure
    y = frame["kept"].astype(float)
    for i, name in enumerate(frame["policy"]):
        ax.errorbar([x.iloc[i]], [y.iloc[i]], xerr=[[x.iloc[i] - low.iloc[i]], [high.iloc[i] - x.iloc[i]]],
                    yerr=[[y.iloc[i] - frame["kept_low"].iloc[i]], [frame["kept_high"].iloc[i] - y.iloc[i]]],
                    fmt="o", capsize=3, color=f"C{i}", label=f"{name} (n={int(frame['n'].iloc[i])})")
        ax.annotate(name, (x.iloc[i], y.iloc[i]), textcoords="offset points", xytext=(6, 6), fontsize=8)
    if len(frame) > 1 and float(x.min()) > 0:
        ax.set_xscale("log")
    ax.set_xlabel(label)
    ax.set_ylabel(f"share of evidence {kept.replace('_', ' ')}")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


__all__ += ["policy_frontier"]
