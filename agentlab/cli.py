"""The ``agentlab`` command line: ``demo`` tours the toolkit offline, ``chat``, ``eval``, ``serve`` agents.

Invariant: the demo needs no API key and no network, and writes only under its data folder.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path


def _demo(args: argparse.Namespace) -> int:
    from agentlab import demo

    if args.data:
        root = Path(args.data)
        return demo.run(root, out=sys.stdout)
    with tempfile.TemporaryDirectory(prefix="agentlab-demo-") as tmp:
        return demo.run(Path(tmp), out=sys.stdout)


def _chat(args: argparse.Namespace) -> int:
    from agentlab.chat import cli as chat_cli

    return chat_cli.run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentlab",
        description="Research agent memory: named agents on DuckDB files, branching sessions, context memory.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser("demo", help="tour the toolkit on embedded defaults (no API key, no network)")
    demo.add_argument("--data", help="keep the demo's agents in this folder (default: a temporary folder)")
    demo.set_defaults(func=_demo)
    from agentlab.chat.cli import add_parser as add_chat_parser

    add_chat_parser(commands, _chat)
    from agentlab.eval.cli import add_command as add_eval_command

    add_eval_command(commands)
    from agentlab.serve.cli import add_parser as add_serve_parser

    add_serve_parser(commands)

    from agentlab.experiments.cli import add_command as add_experiment_command

    add_experiment_command(commands)

    from agentlab.cluster.cli import add_commands as add_cluster_commands

    add_cluster_commands(commands)  # eval --ray, simulate
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
