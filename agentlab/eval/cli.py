"""``agentlab eval``: evaluate retrieval strategies on any dataset, or show saved results.

    agentlab eval locomo --data locomo10.json                 # the default strategy, categories 1-4
    agentlab eval records turns.jsonl --questions qs.csv --strategies default,bm25,dense
    agentlab eval bundled --categories multi-hop,temporal --limit 10
    agentlab eval show results.parquet --plot recall.png

Invariants: every report prints means with 95% intervals, category names, paired tests against the first
strategy and the methodology card; a bad request (an unknown category, an empty selection, a missing file) raises
a typed error, which the ``agentlab`` command prints as one line with exit status 1 (``--debug`` shows the
traceback instead).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

__all__ = ["DATASETS", "add_command"]

DATASETS = ("locomo", "longmemeval", "bundled", "records", "show")


def add_command(commands: Any) -> None:
    """Register ``agentlab eval`` on the CLI's subparsers (called by :mod:`agentlab.cli`)."""
    parser = commands.add_parser(
        "eval", help="evaluate retrieval strategies on a dataset (recall@k per category), or show saved results",
        description="Rank each question's conversation with each strategy and print recall@k per category, with "
                    "95%% intervals, paired tests and the methodology card. 'records TURNS [--questions FILE]' "
                    "reads your own turns and questions (.jsonl, .json or .csv); 'show RESULTS.parquet' reloads "
                    "saved results.",
    )
    parser.add_argument("dataset", choices=DATASETS,
                        help="which loader to use ('bundled' needs no file), or 'show' for saved results")
    parser.add_argument("path", nargs="?", help="the file: TURNS for records, RESULTS.parquet for show, or the "
                                                "dataset file (same as --data)")
    parser.add_argument("--data", help="the dataset file (locomo10.json, a LongMemEval JSON file)")
    parser.add_argument("--questions", help="records: the questions file (.jsonl, .json or .csv)")
    parser.add_argument("--strategies", default="default",
                        help="comma-separated names (default: default): default, bm25, bm25-reference, bm25-rm3, "
                             "dense, hybrid, multihop, phrase, recency")
    parser.add_argument("--k", default="1,5,10", help="comma-separated cut-offs (default 1,5,10)")
    parser.add_argument("--categories", help="comma-separated ids or names, e.g. 1,temporal (LoCoMo default: 1,2,3,4)")
    parser.add_argument("--question-ids", help="comma-separated question ids to score (default all)")
    parser.add_argument("--limit", type=int, help="score at most this many questions (the first, in dataset order)")
    parser.add_argument("--folds", type=int, help="cross-fit strategies that learn (such as default) with this many "
                                                  "conversation folds (default: 5, or fewer conversations)")
    parser.add_argument("--unit", choices=("turn", "window", "session"), help="override every strategy's unit")
    parser.add_argument("--key", help="override every strategy's key, e.g. speaker or speaker+date")
    parser.add_argument("--window", type=int, default=1, help="neighbours per side for --unit window")
    parser.add_argument("--query-rewrite", help="override every strategy's query rewrite: strip-question, "
                                                "drop-speakers, both joined by +, or none")
    parser.add_argument("--cache", default="default",
                        help="embedding cache file; 'none' keeps it in memory (default $AGENTLAB_HOME/cache)")
    parser.add_argument("--out", help="write the per-question results to this Parquet file")
    parser.add_argument("--plot", help="show: draw recall@k curves into this image file (.png, .svg, .pdf)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=_evaluate)


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


def _dataset(args: argparse.Namespace) -> tuple[Any, list[Any] | None]:
    from agentlab.errors import EvaluationError
    from agentlab.eval import datasets
    from agentlab.eval.records import load_records

    path = args.path or args.data
    if args.dataset == "bundled":
        return datasets.load_bundled(), None
    if not path:
        what = "TURNS (and --questions FILE)" if args.dataset == "records" else "the file with --data PATH"
        raise EvaluationError(f"agentlab eval {args.dataset} needs {what}.")
    if args.dataset == "records":
        if not args.questions:
            raise EvaluationError("agentlab eval records needs --questions FILE: questions with evidence turn ids "
                                  "are what gets scored.")
        return load_records(path, args.questions, name=_stem(path)), None
    if args.dataset == "locomo":
        return datasets.load_locomo(path), [1, 2, 3, 4]
    return datasets.load_longmemeval(path), None


def _stem(path: str) -> str:
    from pathlib import Path

    return Path(path).stem


def _strategies(args: argparse.Namespace) -> list[Any]:
    from agentlab.eval.strategies import make_strategy

    options: dict[str, Any] = {}
    if args.unit:
        options.update(unit=args.unit, window=args.window)
    if args.key:
        options["key"] = args.key
    if args.query_rewrite:
        options["query_rewrite"] = None if args.query_rewrite == "none" else args.query_rewrite
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    return [make_strategy(name, **options) for name in names]


def _show(args: argparse.Namespace) -> int:
    from agentlab.errors import EvaluationError
    from agentlab.eval.results import Results

    if not args.path:
        raise EvaluationError("agentlab eval show needs the results file: agentlab eval show results.parquet.")
    results = Results.load(args.path)
    print(results.report())
    if args.plot:
        figure = results.plot()
        figure.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from agentlab.eval.runner import run

    if args.dataset == "show":
        return _show(args)
    dataset, default_categories = _dataset(args)
    categories = _ints_or_strs(args.categories) if args.categories else default_categories
    question_ids = [q.strip() for q in args.question_ids.split(",") if q.strip()] if args.question_ids else None
    strategies = _strategies(args)
    ks = _cutoffs(args.k)
    started = time.perf_counter()
    folds = "auto" if args.folds is None else args.folds
    results = run(dataset, strategies, ks, categories=categories, question_ids=question_ids, limit=args.limit,
                  folds=folds, cache=None if args.cache == "none" else args.cache, progress=not args.no_progress,
                  executor=getattr(args, "executor", "local"))
    elapsed = time.perf_counter() - started
    print(results.report())
    timing = ", ".join(f"{name} {sec:.1f} s" for name, sec in results.seconds.items())
    print(f"\n{len(results.per_question)} rows in {elapsed:.1f} s ({timing})")
    if args.out:
        print(f"wrote {results.to_parquet(args.out)}")
    return 0
