"""The evaluation runner: every strategy on every question of a dataset, scored and summarised.

:func:`run` fits each strategy on each conversation (one index per conversation, as in the LoCoMo retrieval
baseline), ranks that conversation's questions, and scores the rankings with :mod:`agentlab.eval.metrics`. It
returns :class:`~agentlab.eval.results.Results`.

Invariants:

* Each question is ranked against its own conversation only, over the full ranking (so MRR sees evidence below
  the largest k).
* Evidence is scored at the strategy's unit level: turn and window units are turns; for session units an evidence
  turn counts as found when its session is retrieved (``level`` says which).
* Every row says how its strategy's parameters relate to its question (``tuning``): ``"fixed"`` (chosen on other
  data, or from principle), ``"in-sample"`` (chosen on these questions: the strategy's ``tuned_on`` names this
  dataset and conversation, or it learnt on the questions it is scored on) or ``"cross-validated"`` (learnt on
  other conversations' questions, with ``folds``).
* Embeddings go through one :class:`~agentlab.eval.embedcache.EmbeddingCache` shared by all strategies of the
  run, so a warm run never loads the model.
* Results depend only on the dataset, the selection, the strategies, ``folds`` and ``seed``; timings are the only
  machine-dependent numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from agentlab.errors import EmptySelectionError, UnknownCategoryError
from agentlab.eval.metrics import question_metrics
from agentlab.eval.results import Results

if TYPE_CHECKING:
    from agentlab.eval.datasets import Conversation, Dataset, Question
    from agentlab.eval.embedcache import EmbeddingCache

__all__ = ["Results", "conversation_folds", "register_executor", "run", "select_questions"]

# Executors by name for ``run(..., executor=name)``: ``name -> factory()`` of an object whose ``evaluate(strategies,
# questions, queries, *, prepare, score, cache, progress)`` returns ``(rows, seconds)`` as the in-process loop
# would. Higher layers register themselves (agentlab.cluster registers "ray"); this module never imports them.
_EXECUTORS: dict[str, Callable[[], Any]] = {}

Selection = dict[str, tuple["Conversation", list["Question"]]]


def register_executor(name: str, factory: Callable[[], Any]) -> None:
    """Make ``run(..., executor=name)`` hand the per-conversation work to ``factory()``."""
    _EXECUTORS[name] = factory


# --- choosing the questions ----------------------------------------------------------------------------------


def _resolve_categories(dataset: Dataset, wanted: Iterable[int | str]) -> list[Any]:
    """Category ids from ids or names (``"multi-hop"``, ``"1"``); unknown ones raise, listing the known ones."""
    known = sorted({q.category for c in dataset.conversations for q in c.questions}, key=lambda c: (str(type(c)), c))
    by_name = {str(name).lower(): category for category, name in dataset.category_names.items()}
    by_text = {str(category).lower(): category for category in known}
    out = []
    for item in wanted:
        text = str(item).strip().lower()
        category = item if item in known else by_text.get(text, by_name.get(text))
        if category is None or category not in known:
            listed = ", ".join(dataset.category_label(c) for c in known)
            raise UnknownCategoryError(f"No category {item!r} in {dataset.name}; its categories are: {listed}. "
                                       "Give ids or names, e.g. --categories 1,temporal.")
        out.append(category)
    return out


def select_questions(dataset: Dataset, *, categories: Iterable[int | str] | None = None,
                     question_ids: Iterable[str] | None = None, limit: int | None = None,
                     with_evidence: bool = True) -> Selection:
    """The questions a run scores, grouped by conversation: ``{conversation id: (conversation, questions)}``.

    Args:
        categories: ids or names (``[1, "temporal"]``); ``None`` for all.
        question_ids: only these questions (in dataset order).
        limit: at most this many questions, the first ones in dataset order after the other filters.
        with_evidence: skip questions without evidence.

    Raises:
        UnknownCategoryError: a category the dataset does not have.
        EmptySelectionError: nothing is left to score (the message says what was asked).
    """
    wanted = _resolve_categories(dataset, categories) if categories is not None else None
    ids = None if question_ids is None else list(dict.fromkeys(str(q) for q in question_ids))
    if ids is not None:
        present = {q.id for c in dataset.conversations for q in c.questions}
        missing = [q for q in ids if q not in present]
        if missing:
            raise EmptySelectionError(f"No question {missing[0]!r} in {dataset.name} "
                                      f"({len(missing)} of {len(ids)} ids unknown); ids look like "
                                      f"{next(iter(sorted(present)), '?')!r}.")
    if limit is not None and limit < 1:
        raise EmptySelectionError(f"limit must be 1 or more, not {limit!r}.")
    chosen: Selection = {}
    count = 0
    keep = None if ids is None else set(ids)
    for conversation, question in dataset.iter_questions(wanted, with_evidence=with_evidence):
        if keep is not None and question.id not in keep:
            continue
        if limit is not None and count >= limit:
            break
        chosen.setdefault(conversation.id, (conversation, []))[1].append(question)
        count += 1
    if not count:
        asked = [f"categories {', '.join(map(str, categories))}" if categories is not None else "",
                 f"{len(ids)} question ids" if ids is not None else ""]
        what = " and ".join(a for a in asked if a) or "all questions"
        raise EmptySelectionError(f"No question with evidence to score in {dataset.name} for {what}; "
                                  "choose other categories or ids (questions without evidence are skipped).")
    return chosen


def conversation_folds(conversation_ids: Sequence[str], folds: int, *, seed: int = 0) -> list[list[str]]:
    """Split conversations into ``folds`` groups of near-equal size (shuffled with ``seed``); no id in two."""
    import numpy as np

    if folds < 2:
        raise ValueError(f"folds must be 2 or more, not {folds!r}.")
    ids = list(conversation_ids)
    if len(ids) < folds:
        raise EmptySelectionError(f"{folds} folds need at least {folds} conversations; the selection has {len(ids)}.")
    order = np.random.default_rng(seed).permutation(len(ids))
    return [[ids[i] for i in sorted(order[f::folds])] for f in range(folds)]


# --- running -------------------------------------------------------------------------------------------------


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
        raise ValueError("Give at least one strategy, e.g. strategies=['default', 'bm25', 'dense'].")
    return out


def _cache(cache: Any) -> EmbeddingCache:
    from agentlab.eval.embedcache import EmbeddingCache

    if isinstance(cache, EmbeddingCache):
        return cache
    return EmbeddingCache(cache)


def _fit(strategy: Any, conversation: Any) -> list[Any]:
    if hasattr(strategy, "fit"):
        return strategy.fit(conversation)
    from agentlab.eval.units import UnitSpec

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


def _tuning(strategy: Any, dataset_name: str, conversation_id: str) -> str:
    tuned = getattr(strategy, "tuned_on", None) or {}
    if dataset_name in tuned and (tuned[dataset_name] is None or conversation_id in tuned[dataset_name]):
        return "in-sample"
    return "fixed"


def _score(strategy: Any, questions: Selection, ks: tuple[int, ...], empty_evidence: str, bar: Any,
           dataset_name: str = "", tuning: str | None = None) -> list[dict[str, Any]]:
    """Fit one strategy per conversation, rank its questions and score them: the result rows."""
    rows = []
    for cid, (conversation, asked) in questions.items():
        if bar is not None:
            bar.set_postfix_str(f"{strategy.name}: {cid}")
        units = _fit(strategy, conversation)
        if hasattr(strategy, "prepare_conversation"):
            strategy.prepare_conversation(conversation, [q.question for q in asked])
        level, described = _describe(strategy, units)
        marked = _tuning(strategy, dataset_name, cid)  # chosen on this conversation's questions: in-sample
        if tuning is not None and marked != "in-sample":
            marked = tuning
        owner = {t: u.id for u in units for t in getattr(u, "turn_ids", (u.id,))}
        for question in asked:
            ranking = list(strategy.rank(question.question, len(units)))
            evidence = list(dict.fromkeys(owner[t] for t in question.evidence if t in owner))
            scores = question_metrics(ranking, evidence, ks, empty_evidence=empty_evidence)
            if scores is not None:
                rows.append({"strategy": strategy.name, "level": level, "units": described, "tuning": marked,
                             "conversation_id": cid, "question_id": question.id,
                             "category": question.category, "n_evidence": len(evidence), **scores,
                             "top": ranking[: max(ks)]})
            if bar is not None:
                bar.update(1)
    return rows


def _evaluate_here(chosen: list[Any], questions: Selection, queries: list[str], ks: tuple[int, ...],
                   empty_evidence: str, shared: EmbeddingCache, bar: Any, dataset_name: str,
                   tuning: str | None) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Every strategy over every conversation in this process: the result rows and seconds per strategy."""
    rows: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}
    with shared.hold():  # one open cache file for the whole run, not one per conversation
        for strategy in chosen:
            started = time.perf_counter()
            if bar is not None:
                bar.set_postfix_str(f"{strategy.name}: embedding the questions")
            _prepare(strategy, shared, queries)
            rows += _score(strategy, questions, ks, empty_evidence, bar, dataset_name, tuning)
            seconds[strategy.name] = time.perf_counter() - started
    return rows, seconds


def _cross_fit(strategy: Any, questions: Selection, folds: list[list[str]], evaluate: Callable[..., Any],
               log: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    """Learn on the other folds, score each fold: the rows (marked cross-validated) and the seconds spent."""
    rows: list[dict[str, Any]] = []
    seconds = 0.0
    for number, fold in enumerate(folds):
        started = time.perf_counter()
        training = [questions[cid] for other in folds if other is not fold for cid in other if cid in questions]
        learnt = strategy.learn(training)
        seconds += time.perf_counter() - started
        part = {cid: questions[cid] for cid in fold if cid in questions}
        fold_rows, fold_seconds = evaluate([strategy], part, "cross-validated")
        for row in fold_rows:
            row["fold"] = number
        rows += fold_rows
        seconds += fold_seconds.get(strategy.name, 0.0)
        log.append({"strategy": strategy.name, "fold": number, "conversations": list(fold),
                    "chosen": None if learnt is None else list(learnt) if isinstance(learnt, (list, tuple))
                    else learnt})
    return rows, seconds


def run(
    dataset: Dataset,
    strategies: Any,
    ks: Iterable[int] = (1, 5, 10),
    *,
    categories: Iterable[int | str] | None = None,
    question_ids: Iterable[str] | None = None,
    limit: int | None = None,
    folds: int | str | None = "auto",
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
        strategies: strategy objects, names (``"default"``, ``"bm25"``, ``"dense"``, ...), a comma-separated string
            of names, or a ``{name: strategy}`` mapping.
        ks: the cut-offs for ``recall@k``, ``hit@k``, ``all@k`` and ``ndcg@k``.
        categories: score only these categories, by id or name (LoCoMo's reference uses ``(1, 2, 3, 4)``).
        question_ids: score only these questions.
        limit: score at most this many questions (the first, in dataset order, after the other filters).
        folds: how strategies that learn (``Hybrid(weights="learn")``, the ``default`` strategy) are cross-fitted:
            their parameters for each fold's conversations are learnt on the other folds' questions. ``"auto"``:
            5 folds, or one per conversation when there are fewer (with one conversation nothing is learnt);
            a number: that many folds; ``None``: they learn on every scored question, and their rows are marked
            in-sample.
        cache: where embeddings are cached: ``"default"`` (``$AGENTLAB_HOME/cache/embeddings.duckdb``),
            a file path, an :class:`~agentlab.eval.embedcache.EmbeddingCache`, or ``None`` (memory only).
        progress: show a ``tqdm.auto`` progress bar over questions x strategies (it names the strategy and
            conversation at work; embeddings of many texts draw a bar of their own).
        empty_evidence: ``"drop"`` skips questions without evidence; ``"perfect"`` scores them 1, as LoCoMo's own
            code does.
        n_boot, seed: bootstrap settings of :func:`agentlab.eval.metrics.summarize`; ``seed`` also shuffles folds.
        executor: ``"local"`` (this process), ``"ray"`` (conversations sharded over Ray workers, see
            :class:`agentlab.cluster.RayExecutor`; the results are the same), or an executor object.

    Returns:
        :class:`~agentlab.eval.results.Results`.

    Raises:
        ValueError: no strategy, two strategies with one name, or an unknown strategy name.
        UnknownCategoryError: a category the dataset does not have.
        EmptySelectionError: the selection leaves no question to score.
    """
    ks = tuple(sorted(set(ks)))
    chosen = _strategies(strategies)
    shared = _cache(cache)
    questions = select_questions(dataset, categories=categories, question_ids=question_ids, limit=limit,
                                 with_evidence=empty_evidence == "drop")
    queries = [q.question for _, asked in questions.values() for q in asked]
    bar = None
    if progress and executor == "local":
        from tqdm.auto import tqdm

        bar = tqdm(total=len(queries) * len(chosen), desc="Evaluating", unit="question")
        shared.progress = True

    remote = None if executor == "local" else _executor(executor)  # one executor (and its workers) per run

    def evaluate(batch: list[Any], part: Selection, tuning: str | None) -> tuple[list[dict[str, Any]], Any]:
        part_queries = [q.question for _, asked in part.values() for q in asked]
        if remote is None:
            return _evaluate_here(batch, part, part_queries, ks, empty_evidence, shared, bar, dataset.name, tuning)
        score = partial(_score, ks=ks, empty_evidence=empty_evidence, bar=None, dataset_name=dataset.name,
                        tuning=tuning)
        return remote.evaluate(batch, part, part_queries, prepare=_prepare, score=score, cache=shared,
                               progress=progress)

    by_strategy: dict[str, list[dict[str, Any]]] = {}
    seconds: dict[str, float] = {}
    log: list[dict[str, Any]] = []
    if folds == "auto":
        folds = min(5, len(questions)) if len(questions) >= 2 else 0
    keep_fixed = folds == 0  # one conversation: learning strategies keep their initial weights
    learners = [s for s in chosen if getattr(s, "learnable", False) and not keep_fixed]
    fixed = [s for s in chosen if s not in learners]
    fold_ids = conversation_folds(list(questions), int(folds), seed=seed) if folds and learners else None
    try:
        if fixed:  # in one batch, as the executors expect (one set of workers for all of them)
            fixed_rows, fixed_seconds = evaluate(fixed, questions, None)
            for row in fixed_rows:
                by_strategy.setdefault(row["strategy"], []).append(row)
            seconds.update(fixed_seconds)
        for strategy in learners:
            _prepare(strategy, shared, queries)
            if fold_ids is None:
                started = time.perf_counter()
                learnt = strategy.learn(list(questions.values()))
                log.append({"strategy": strategy.name, "fold": None, "conversations": list(questions),
                            "chosen": list(learnt) if isinstance(learnt, (list, tuple)) else learnt})
                part_rows, part_seconds = evaluate([strategy], questions, "in-sample")
                by_strategy[strategy.name] = part_rows
                seconds[strategy.name] = part_seconds[strategy.name] + time.perf_counter() - started
            else:
                by_strategy[strategy.name], seconds[strategy.name] = _cross_fit(strategy, questions, fold_ids,
                                                                                evaluate, log)
    finally:
        shared.progress = False
        if bar is not None:
            bar.close()
    rows = [row for strategy in chosen for row in by_strategy.get(strategy.name, [])]
    seconds = {s.name: seconds[s.name] for s in chosen if s.name in seconds}
    return Results.from_rows(rows, ks, seconds=seconds, n_boot=n_boot, seed=seed, dataset=dataset.name,
                             category_names=dict(dataset.category_names), tuning_log=log,
                             methodology=_methodology(chosen))


def _methodology(strategies: list[Any]) -> dict[str, str]:
    """What each strategy says about how its parameters were chosen (its ``methodology``), by name."""
    out = {}
    for strategy in strategies:
        text = getattr(strategy, "methodology", None)
        if text:
            out[strategy.name] = str(text)
        elif getattr(strategy, "learnable", False):
            out[strategy.name] = "weights learnt on training questions (cross-fitted with folds, else in-sample)"
        elif getattr(strategy, "tuned_on", None):
            out[strategy.name] = "parameters chosen on " + ", ".join(
                f"{name} ({'all conversations' if ids is None else ', '.join(sorted(ids))})"
                for name, ids in strategy.tuned_on.items())
    return out

