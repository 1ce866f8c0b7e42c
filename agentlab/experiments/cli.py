"""``agentlab experiment DATASET``: replay a dataset under memory policies, print what each kept, optionally ask
Claude.

DATASET is ``locomo`` or ``longmemeval`` (with ``--data FILE``), ``bundled`` (no file), or ``records`` (``--data
TURNS`` and ``--questions QUESTIONS``: JSONL, JSON or CSV files as :func:`agentlab.eval.records.load_records` reads).

Invariant: every failure the user can fix prints one line on stderr (``agentlab experiment: ...``) and exits
with status 2, or 3 when the budget stopped the run; arguments and output paths are checked before the replay, so
a mistake never costs a run; nothing is sent to Claude without ``--qa``.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any

__all__ = ["add_command", "load_dataset"]

DATASETS = ("locomo", "longmemeval", "bundled", "records")


def add_command(commands: Any) -> None:
    """Register ``agentlab experiment`` on the CLI's subparsers (called by :mod:`agentlab.cli`)."""
    parser = commands.add_parser(
        "experiment", help="replay a dataset under memory policies: prompt size and evidence kept per policy",
        description="Replay each conversation turn by turn under each memory policy and report, per policy, the "
                    "prompt size at question time and how much of each question's evidence is still verbatim, "
                    "inside a summary, or reachable by search.",
    )
    parser.add_argument("dataset", choices=DATASETS, help="which loader ('bundled' needs no --data)")
    parser.add_argument("--data", help="the dataset file (locomo10.json, a LongMemEval file, or the turns file)")
    parser.add_argument("--questions", help="for 'records': the questions file")
    parser.add_argument("--policies", help="comma-separated policy names (default none,aggressive,moderate,gentle); "
                        "memory designs: search-tool, compact-retrieve, facts, dated-facts, core-archival, and their "
                        "-claude variants (except search-tool)")
    parser.add_argument("--categories", help="comma-separated question categories (default all)")
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument("--match", default="auto", help="summary match method: auto, exact, fuzzy, fuzzy>=0.5")
    parser.add_argument("--root", help="keep each (policy, conversation) agent as a DuckDB file in this folder")
    parser.add_argument("--out", help="write the per-question rows to this Parquet file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    qa = parser.add_argument_group("answer accuracy with Claude (needs ANTHROPIC_API_KEY)")
    qa.add_argument("--qa", action="store_true", help="answer every question from each policy's prompt and judge it")
    qa.add_argument("--runs", type=int, default=3, help="answers per question (default 3)")
    qa.add_argument("--model", help="answering model (default: AGENTLAB_MODEL or the default model)")
    qa.add_argument("--judge-model", help="judging model (default: the answering model)")
    qa.add_argument("--budget", type=float, help="most USD to spend; the run stops before going over")
    qa.add_argument("--direct", action="store_true", help="one messages.create per request instead of batches")
    qa.add_argument("--dry-run", action="store_true", help="print the cost estimate and send nothing")
    qa.add_argument("--price", help="USD per million input,output tokens for a model without a known price")
    qa.add_argument("--qa-cache", default="default",
                    help="request cache file ('none': in memory; default $AGENTLAB_HOME/cache)")
    qa.add_argument("--qa-out", help="write the answers and labels to this Parquet file")
    parser.set_defaults(func=_command)


def load_dataset(kind: str, data: str | None = None, questions: str | None = None) -> Any:
    """The dataset a CLI invocation names.

    Raises:
        ExperimentError: A file argument is missing.
        DatasetError: The file is missing or not in the format (from the loaders).
    """
    from agentlab.errors import ExperimentError
    from agentlab.eval import datasets

    if kind == "bundled":
        return datasets.load_bundled()
    if not data:
        raise ExperimentError(f"give the {kind} file with --data PATH.")
    if kind == "locomo":
        return datasets.load_locomo(data)
    if kind == "longmemeval":
        return datasets.load_longmemeval(data)
    if not questions:
        raise ExperimentError("records needs the turns (--data TURNS) and the questions (--questions FILE).")
    from agentlab.eval.records import load_records

    return load_records(data, questions, name=os.path.basename(data))


def _categories(text: str | None) -> list[int | str] | None:
    if not text:
        return None
    return [int(p) if p.strip().isdigit() else p.strip() for p in text.split(",") if p.strip()]


def _command(args: Any) -> int:
    from agentlab.errors import AgentlabError, BudgetExceededError

    try:
        return _run(args)
    except BudgetExceededError as exc:
        print(f"agentlab experiment: {exc}", file=sys.stderr)
        return 3
    except AgentlabError as exc:
        print(f"agentlab experiment: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a --root that cannot be a folder, a file that cannot be written
        where = f": {exc.filename}" if exc.filename else ""
        print(f"agentlab experiment: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


def _check_output(path: str | None, flag: str) -> None:
    """Make sure ``path``'s folder exists (creating it), so a bad path fails before the work, not after it."""
    from pathlib import Path

    from agentlab.errors import ExperimentError

    if not path:
        return
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir():
            raise IsADirectoryError(21, "Is a directory")
    except OSError as exc:
        raise ExperimentError(f"cannot write {flag} {path} ({exc.strerror}); choose another file.") from None


def _run(args: Any) -> int:
    import pandas as pd

    from agentlab.chat import NO_KEY_HELP
    from agentlab.errors import ExperimentError, NoApiKeyError

    from .policies import resolve_policies
    from .replaying import replay

    policies = resolve_policies(args.policies)
    if args.qa and not args.dry_run and not os.environ.get("ANTHROPIC_API_KEY"):
        raise NoApiKeyError("--qa sends requests to Claude and needs ANTHROPIC_API_KEY (add --dry-run to see the "
                            "cost estimate without a key). " + NO_KEY_HELP.split(". ")[0] + ".")
    if args.runs < 1:
        raise ExperimentError(f"--runs must be 1 or more, not {args.runs}.")
    if args.budget is not None and not (math.isfinite(args.budget) and args.budget >= 0):
        raise ExperimentError(f"--budget must be a number of dollars of 0 or more, not {args.budget}.")
    _check_output(args.out, "--out")
    _check_output(args.qa_out, "--qa-out")
    prices = None
    if args.price:
        prices = _price(args.price, args.model, args.judge_model)
    cache = None if args.qa_cache == "none" else args.qa_cache
    dataset = load_dataset(args.dataset, args.data, args.questions)
    started = time.perf_counter()
    results = replay(dataset, policies, categories=_categories(args.categories), conversations=args.conversations,
                     match=args.match, root=args.root, keep_prompts=args.qa, progress=not args.no_progress,
                     cache=cache)
    elapsed = time.perf_counter() - started
    with pd.option_context("display.width", 160, "display.max_rows", 200, "display.max_columns", 20,
                           "display.float_format", "{:.3f}".format):
        print(results.table(None).reset_index(level=1, drop=True))
        print()
        print(results.table("category"))
    conversations = results.per_question["conversation_id"].nunique()
    print(f"{len(results.per_question):,} rows ({conversations} conversations x {len(policies)} policies) in "
          f"{elapsed:.1f} s; {len(results.compactions):,} compactions")
    if args.out:
        print(f"wrote {results.to_parquet(args.out)}")
    if not args.qa:
        return 0
    from .qa import answer

    qa = answer(results, runs=args.runs, model=args.model, judge_model=args.judge_model, cache=cache,
                mode="direct" if args.direct else "batch", budget=args.budget, prices=prices, dry_run=args.dry_run)
    if args.dry_run:
        return 0
    with pd.option_context("display.width", 160, "display.float_format", "{:.3f}".format):
        print(qa.accuracy())
    if args.qa_out:
        qa.answers.to_parquet(args.qa_out, index=False)
        print(f"wrote {args.qa_out}")
    return 0


def _price(text: str, model: str | None, judge_model: str | None) -> dict[str, Any]:
    from agentlab.chat import resolve_settings
    from agentlab.errors import ExperimentError

    from .pricing import Price

    try:
        rate_in, rate_out = (float(p) for p in text.split(","))
    except ValueError:
        raise ExperimentError(f"--price takes two numbers, USD per million input and output tokens, e.g. "
                              f"--price 1,5; not {text!r}.") from None
    price = Price(rate_in, rate_out)
    default = str(resolve_settings().model)
    return {model or default: price, judge_model or model or default: price}
