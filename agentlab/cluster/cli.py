"""Command-line parts that run on Ray: ``agentlab eval ... --ray [ADDRESS]`` and ``agentlab simulate``.

:func:`add_commands` is called by :mod:`agentlab.cli` after the ``eval`` command exists: it adds ``--ray`` and
``--workers`` to ``eval`` and registers ``simulate``. Errors print one line on stderr and exit with status 2.
A Ray that a command started is shut down when the command ends.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_commands"]

_DATASETS = ("locomo", "longmemeval", "bundled")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _shutdown_if(started: bool) -> None:
    if started:
        import ray

        ray.shutdown()


def _ray_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help=f"{what} on Ray: a local Ray when no ADDRESS (or $RAY_ADDRESS), else the cluster at "
                             "ADDRESS ('auto', 'HOST:6379', 'ray://HOST:10001')")
    parser.add_argument("--workers", type=int, help="Ray worker actors (default: the cluster's CPUs)")


def _extend_eval(commands: Any) -> None:
    parser = commands.choices["eval"]
    _ray_argument(parser, "shard the conversations over workers")
    local = parser.get_default("func")

    def run(args: argparse.Namespace) -> int:
        if args.ray is None:
            if args.workers is not None:
                print("agentlab eval: --workers needs --ray.", file=sys.stderr)
                return 2
            return local(args)
        from agentlab.cluster._evaluation import RayExecutor
        from agentlab.errors import AgentlabError

        try:
            executor = RayExecutor(address=args.ray or None, workers=args.workers)
        except ValueError as exc:
            print(f"agentlab eval: {_first_line(exc)}", file=sys.stderr)
            return 2
        args.executor = executor
        try:
            return local(args)
        except AgentlabError as exc:
            print(f"agentlab eval: {_first_line(exc)}", file=sys.stderr)
            return 2
        finally:
            _shutdown_if(executor.started_ray)

    parser.set_defaults(func=run)


def _add_simulate(commands: Any) -> None:
    parser = commands.add_parser(
        "simulate", help="replay a dataset's conversations as N users, one agent each (here or on Ray)",
        description="Append each user's turns one at a time, as a live chat would, compacting with the extractive "
                    "summarizer; then gather every agent's messages into one table.",
    )
    parser.add_argument("dataset", choices=_DATASETS, help="which loader to use ('bundled' needs no --data)")
    parser.add_argument("--data", help="the dataset file (locomo10.json, a LongMemEval JSON file)")
    parser.add_argument("--users", type=int, required=True, help="how many users (user i replays conversation i mod n)")
    parser.add_argument("--turns", type=int, help="replay only each conversation's first TURNS turns")
    parser.add_argument("--root", help="where the agents go (default $AGENTLAB_HOME, else ./agentlab-data)")
    _ray_argument(parser, "replay the users")
    parser.add_argument("--compact-after", default="1200",
                        help="compact when a session's estimate passes this many tokens ('none': never)")
    parser.add_argument("--tail-tokens", type=int, default=400, help="recent tokens compaction keeps verbatim")
    parser.add_argument("--out", help="write every agent's messages to this Parquet file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=_simulate)


def _load(kind: str, data: str | None) -> Any:
    from agentlab.eval import datasets

    if kind == "bundled":
        return datasets.load_bundled()
    if not data:
        raise ValueError("give the file with --data PATH.")
    return (datasets.load_locomo if kind == "locomo" else datasets.load_longmemeval)(data)


def _tokens(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--compact-after takes a number of tokens or 'none', not {text!r}.") from None


def _simulate(args: argparse.Namespace) -> int:
    from agentlab.cluster._simulation import CompactionPolicy, simulate
    from agentlab.errors import AgentlabError

    started_ray = False
    try:
        if args.workers is not None and args.ray is None:
            raise ValueError("--workers needs --ray.")
        after = None if args.compact_after.strip().lower() == "none" else _tokens(args.compact_after)
        policy = CompactionPolicy(after_tokens=after, tail_token_budget=args.tail_tokens)
        dataset = _load(args.dataset, args.data)
        if args.ray is not None:
            from ._remote import ensure_ray

            started_ray = ensure_ray(args.ray or None)
        result = simulate(dataset, args.users, turns=args.turns, root=args.root, policy=policy,
                          executor="local" if args.ray is None else "ray", workers=args.workers,
                          progress=not args.no_progress)
    except (AgentlabError, ValueError, OSError) as exc:
        print(f"agentlab simulate: {_first_line(exc)}", file=sys.stderr)
        return 2
    finally:
        _shutdown_if(started_ray)
    print(f"{result.users} users, {result.messages} messages, {result.compactions} compactions in "
          f"{result.seconds:.1f} s ({result.messages_per_second:,.0f} messages/s) under {result.root}")
    if args.out:
        from pathlib import Path

        import pyarrow as pa
        import pyarrow.parquet as pq

        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        # Without pandas' metadata: pandas cannot read back the Arrow list dtypes it would record there.
        table = pa.Table.from_pandas(result.frames, preserve_index=False)
        pq.write_table(table.replace_schema_metadata(None), out)
        print(f"wrote {out} ({len(result.frames)} rows)")
    return 0


def add_commands(commands: Any) -> None:
    """Add ``--ray``/``--workers`` to ``agentlab eval`` and register ``agentlab simulate``."""
    _extend_eval(commands)
    _add_simulate(commands)
