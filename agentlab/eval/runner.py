"""The evaluation runner: every strategy on every question of a dataset, scored and summarised.

:func:`run` fits each strategy on each conversation (one index per conversation, as in
the LoCoMo retrieval baseline), ranks that conversation's questions, and scores the rankings with
:mod:`agentlab.eval.metrics`. It returns :class:`Results`: a tidy frame with one row per question and
strategy, and a summary with bootstrap confidence intervals per category.

Invariants:

* Each question is ranked against its own conversation only, over the full ranking (so MRR sees
  evidence below the largest k).
* Evidence is scored at the strategy's unit level: turn and window units are turns; for session
  units an evidence turn counts as found when its session is retrieved (``level`` says which).
* Embeddings go through one :class:`~agentlab.eval.embedcache.EmbeddingCache` shared by all
  strategies of the run, so a warm run never loads the model.
* Results depend only on the dataset, the strategies and ``seed``; timings are the only
  machine-dependent numbers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.eval.metrics import question_metrics, summarize

if TYPE_CHECKING:
    import pandas as pd

    from agentlab.eval.datasets import Dataset
    from agentlab.eval.embedcache import EmbeddingCache

__all__ = ["Results", "register_executor", "run"]

# Executors by name for ``run(..., executor=name)``: ``name -> factory()`` of an object whose ``evaluate(strategies,
# questions, queries, *, prepare, score, cache, progress)`` returns ``(rows, seconds)`` as the in-process loop
# would. Higher layers register themselves (agentlab.cluster registers "ray"); this module never imports them.
_EXECUTORS: dict[str, Callable[[], Any]] = {}


def register_executor(name: str, factory: Callable[[], Any]) -> None:
    """Make ``run(..., executor=name)`` hand the per-conversation work to ``factory()``."""
    _EXECUTORS[name] = factory

_ID_COLUMNS = ["strategy", "level", "units", "conversation_id", "question_id", "category", "n_evidence"]


@dataclass
class Results:
    """What :func:`run` returns.

    Attributes:
        per_question: one row per question x strategy: ``strategy``, ``level`` (``"turn"`` or
            ``"session"``: what the metrics count), ``units`` (unit and key, e.g. ``"window1/date"``;
            a hybrid joins its parts' with ``" + "``), ``conversation_id``, ``question_id``,
            ``category``, ``n_evidence``, then ``recall@k``, ``hit@k``, ``all@k``, ``ndcg@k`` per k
            and ``mrr``, and ``top`` (the first ``max(ks)`` ids retrieved).
        summary: ``strategy``, ``category`` (with an ``"overall"`` row), ``metric``, ``n``,
            ``mean``, ``ci_low``, ``ci_high`` (95% percentile bootstrap).
        seconds: wall time per strategy (fitting, embedding and ranking).
        ks: the cut-offs used.
    """

    per_question: pd.DataFrame
    summary: pd.DataFrame
    seconds: dict[str, float] = field(default_factory=dict)
    ks: tuple[int, ...] = (1, 5, 10)

    def table(self, metrics: str | Sequence[str] | None = None) -> pd.DataFrame:
        """Means as a wide table: one row per (strategy, category), one column per metric.

        Args:
            metrics: which metrics (default ``recall@k`` for every k, then ``mrr``).
        """
        if metrics is None:
            metrics = [f"recall@{k}" for k in self.ks] + ["mrr"]
        elif isinstance(metrics, str):
            metrics = [metrics]
        frame = self.summary[self.summary["metric"].isin(list(metrics))]
        wide = frame.pivot_table(index=["strategy", "category"], columns="metric", values="mean", sort=False)
        counts = frame.groupby(["strategy", "category"], sort=False)["n"].first()
        wide.insert(0, "n", counts)
        return wide[["n", *metrics]]

    def to_parquet(self, path: str | os.PathLike[str]) -> Path:
        """Write :attr:`per_question` to a Parquet file; returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        frame = self.per_question.copy()
        frame["category"] = frame["category"].astype(str)  # mixed int/str categories upset Arrow
        frame.to_parquet(path, index=False)
        return path

    def __repr__(self) -> str:
        strategies = list(dict.fromkeys(self.per_question.get("strategy", [])))
        return f"Results(strategies={strategies}, rows={len(self.per_question)}, ks={self.ks})"


def _strategies(strategies: Any) -> list[Any]:
    from agentlab.eval.strategies import make_strategy

    if isinstance(strategies, str):
        strategies = [s.strip() for s in strategies.split(",") if s.strip()]
    if isinstance(strategies, Mapping):
        items = []
        for name, strategy in strategies.items():
            strategy = make_strategy(strategy) if isinstance(strategy, str) else strategy
            strategy.name = name
            items.append(strategy)
        strategies = items
    out = [make_strategy(s) if isinstance(s, str) else s for s in strategies]
    names = [s.name for s in out]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ValueError(f"Two strategies are named {duplicate!r}; give each a distinct name= so rows stay apart.")
    if not out:
        raise ValueError("Give at least one strategy, e.g. strategies=['bm25', 'dense', 'hybrid'].")
    return out


def _cache(cache: Any) -> EmbeddingCache:
    from agentlab.eval.embedcache import EmbeddingCache

    if isinstance(cache, EmbeddingCache):
        return cache
    return EmbeddingCache(cache)


def _fit(strategy: Any, conversation: Any) -> list[Any]:
    if hasattr(strategy, "fit"):
        return strategy.fit(conversation)
    from agentlab.eval.strategies import UnitSpec

    units = UnitSpec().units(conversation)
    strategy.index(units)
    return units


def _describe(strategy: Any, units: list[Any]) -> tuple[str, str]:
    """``(level, units)`` for the result rows: what is scored, and how the strategy cuts and keys."""
    describe = getattr(strategy, "describe", None)
    text = describe() if callable(describe) else "turn/text"
    grouped = any(tuple(getattr(u, "turn_ids", (u.id,))) != (u.id,) for u in units)
    return ("session" if grouped else "turn"), text


def _prepare(strategy: Any, cache: EmbeddingCache, queries: list[str]) -> None:
    """Give a strategy the run's embedding cache and every question, before it fits any conversation."""
    if hasattr(strategy, "use_cache"):
        strategy.use_cache(cache)
    if hasattr(strategy, "prepare"):
        strategy.prepare(queries)


def _executor(executor: Any) -> Any:
    if not isinstance(executor, str):
        return executor
    factory = _EXECUTORS.get(executor)
    if factory is None:
        known = ", ".join(repr(e) for e in ["local", *sorted(_EXECUTORS)])
        raise ValueError(f"Unknown executor {executor!r}; use one of {known}, or an executor object.")
    return factory()


def _score(strategy: Any, questions: dict[str, tuple[Any, list[Any]]], ks: tuple[int, ...],
           empty_evidence: str, bar: Any) -> list[dict[str, Any]]:
    """Fit one strategy per conversation, rank its questions and score them: the result rows."""
    rows = []
    for cid, (conversation, asked) in questions.items():
        units = _fit(strategy, conversation)
        level, described = _describe(strategy, units)
        owner = {t: u.id for u in units for t in getattr(u, "turn_ids", (u.id,))}
        for question in asked:
            ranking = list(strategy.rank(question.question, len(units)))
            evidence = list(dict.fromkeys(owner[t] for t in question.evidence if t in owner))
            scores = question_metrics(ranking, evidence, ks, empty_evidence=empty_evidence)
            if scores is not None:
                rows.append({"strategy": strategy.name, "level": level, "units": described,
                             "conversation_id": cid, "question_id": question.id,
                             "category": question.category, "n_evidence": len(evidence), **scores,
                             "top": ranking[: max(ks)]})
            if bar is not None:
                bar.update(1)
    return rows


def _evaluate_here(chosen: list[Any], questions: dict[str, tuple[Any, list[Any]]], queries: list[str],
                   ks: tuple[int, ...], empty_evidence: str, shared: EmbeddingCache,
                   progress: bool) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Every strategy over every conversation in this process: the result rows and seconds per strategy."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(queries) * len(chosen), desc="Evaluating", unit="question")
    rows: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}
    try:
        with shared.hold():  # one open cache file for the whole run, not one per conversation
            for strategy in chosen:
                started = time.perf_counter()
                if bar is not None:
                    bar.set_postfix_str(strategy.name)
                _prepare(strategy, shared, queries)
                rows += _score(strategy, questions, ks, empty_evidence, bar)
                seconds[strategy.name] = time.perf_counter() - started
    finally:
        if bar is not None:
            bar.close()
    return rows, seconds


def run(
    dataset: Dataset,
    strategies: Any,
    ks: Iterable[int] = (1, 5, 10),
    *,
    categories: Iterable[int | str] | None = None,
    cache: Any = "default",
    progress: bool = True,
    empty_evidence: str = "drop",
    n_boot: int = 1000,
    seed: int = 0,
    executor: Any = "local",
) -> Results:
    """Evaluate retrieval strategies on a dataset.

    Args:
        dataset: conversations and questions (e.g. ``load_locomo(path)`` or ``load_bundled()``).
        strategies: strategy objects, names (``"bm25"``, ``"dense"``, ``"hybrid"``, ...), a
            comma-separated string of names, or a ``{name: strategy}`` mapping.
        ks: the cut-offs for ``recall@k``, ``hit@k``, ``all@k`` and ``ndcg@k``.
        categories: score only these question categories (LoCoMo's reference uses ``(1, 2, 3, 4)``).
        cache: where embeddings are cached: ``"default"`` (``$AGENTLAB_HOME/cache/embeddings.duckdb``),
            a file path, an :class:`~agentlab.eval.embedcache.EmbeddingCache`, or ``None`` (memory only).
        progress: show a ``tqdm.auto`` progress bar over questions x strategies.
        empty_evidence: ``"drop"`` skips questions without evidence; ``"perfect"``
            scores them 1, as LoCoMo's own code does.
        n_boot, seed: bootstrap settings of :func:`agentlab.eval.metrics.summarize`.
        executor: ``"local"`` (this process), ``"ray"`` (conversations sharded over Ray workers, see
            :class:`agentlab.cluster.RayExecutor`; the results are the same), or an executor object.

    Returns:
        :class:`Results`.

    Raises:
        ValueError: no strategy, two strategies with one name, or an unknown strategy name.
    """
    import pandas as pd

    ks = tuple(sorted(set(ks)))
    chosen = _strategies(strategies)
    shared = _cache(cache)
    wanted = list(categories) if categories is not None else None
    pairs = list(dataset.iter_questions(wanted, with_evidence=empty_evidence == "drop"))
    questions: dict[str, tuple[Any, list[Any]]] = {}
    for conversation, question in pairs:
        questions.setdefault(conversation.id, (conversation, []))[1].append(question)

    queries = [q.question for _, q in pairs]
    if executor == "local":
        rows, seconds = _evaluate_here(chosen, questions, queries, ks, empty_evidence, shared, progress)
    else:  # the same per-conversation work, somewhere else
        rows, seconds = _executor(executor).evaluate(
            chosen, questions, queries, prepare=_prepare,
            score=partial(_score, ks=ks, empty_evidence=empty_evidence, bar=None), cache=shared, progress=progress)

    per_question = pd.DataFrame(rows) if rows else pd.DataFrame(columns=_ID_COLUMNS)
    summaries = []
    for name in seconds:
        part = per_question[per_question["strategy"] == name]
        if len(part):
            summary = summarize(part.drop(columns=["top"]), by="category", n_boot=n_boot, seed=seed)
            summary.insert(0, "strategy", name)
            summaries.append(summary)
    columns = ["strategy", "category", "metric", "n", "mean", "ci_low", "ci_high"]
    summary = pd.concat(summaries, ignore_index=True) if summaries else pd.DataFrame(columns=columns)
    return Results(per_question, summary, seconds, ks)


# --- command line: `agentlab eval` -------------------------------------------------------------

_DATASETS = ("locomo", "longmemeval", "bundled")


def add_command(commands: Any) -> None:
    """Register ``agentlab eval`` on the CLI's subparsers (called by :mod:`agentlab.cli`)."""
    parser = commands.add_parser(
        "eval", help="evaluate retrieval strategies on a dataset (recall@k per category)",
        description="Rank each question's conversation with each strategy and print recall@k per category.",
    )
    parser.add_argument("dataset", choices=_DATASETS, help="which loader to use ('bundled' needs no --data)")
    parser.add_argument("--data", help="the dataset file (locomo10.json, a LongMemEval JSON file)")
    parser.add_argument("--strategies", default="bm25,dense,hybrid",
                        help="comma-separated names: bm25, bm25-reference, dense, hybrid, phrase, recency")
    parser.add_argument("--k", default="1,5,10", help="comma-separated cut-offs (default 1,5,10)")
    parser.add_argument("--categories", help="comma-separated categories (LoCoMo default: 1,2,3,4)")
    parser.add_argument("--unit", choices=("turn", "window", "session"), help="override every strategy's unit")
    parser.add_argument("--key", help="override every strategy's key, e.g. speaker or speaker+date")
    parser.add_argument("--window", type=int, default=1, help="neighbours per side for --unit window")
    parser.add_argument("--cache", default="default",
                        help="embedding cache file; 'none' keeps it in memory (default $AGENTLAB_HOME/cache)")
    parser.add_argument("--out", help="write the per-question results to this Parquet file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=_command)


def _cutoffs(text: str) -> list[int]:
    from agentlab.errors import InvalidArgumentError

    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        ks = []
    if not ks or min(ks) < 1:
        raise InvalidArgumentError(f"--k takes comma-separated cut-offs of 1 or more, such as 1,5,10; not {text!r}.")
    return ks


def _ints_or_strs(text: str) -> list[int | str]:
    return [int(p) if p.strip().lstrip("-").isdigit() else p.strip() for p in text.split(",") if p.strip()]


def _command(args: Any) -> int:
    import sys

    from agentlab.eval import datasets
    from agentlab.eval.strategies import make_strategy

    if args.dataset == "bundled":
        dataset = datasets.load_bundled()
    elif not args.data:
        print(f"agentlab eval {args.dataset}: give the file with --data PATH.", file=sys.stderr)
        return 2
    else:
        loader = datasets.load_locomo if args.dataset == "locomo" else datasets.load_longmemeval
        dataset = loader(args.data)
    categories = _ints_or_strs(args.categories) if args.categories else (
        [1, 2, 3, 4] if args.dataset == "locomo" else None)
    options: dict[str, Any] = {}
    if args.unit:
        options.update(unit=args.unit, window=args.window)
    if args.key:
        options["key"] = args.key
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    strategies = [make_strategy(name, **options) for name in names]
    ks = _cutoffs(args.k)
    started = time.perf_counter()
    results = run(dataset, strategies, ks, categories=categories,
                  cache=None if args.cache == "none" else args.cache, progress=not args.no_progress,
                  executor=getattr(args, "executor", "local"))
    elapsed = time.perf_counter() - started
    import pandas as pd

    with pd.option_context("display.width", 160, "display.max_rows", 200, "display.float_format", "{:.3f}".format):
        print(results.table())
    timing = ", ".join(f"{name} {sec:.1f} s" for name, sec in results.seconds.items())
    print(f"{len(results.per_question)} rows in {elapsed:.1f} s ({timing})")
    if args.out:
        print(f"wrote {results.to_parquet(args.out)}")
    return 0
