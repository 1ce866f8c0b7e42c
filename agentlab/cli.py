"""The ``agentlab`` command line: ``demo`` tours the toolkit offline, ``chat``, ``eval``, ``serve`` agents.

Invariants: the demo needs no API key and no network, and writes only under its data folder. Whatever a command
raises, :func:`main` prints one line on stderr (``agentlab <command>: what was wrong; what to do``) and returns 1
(2 for a usage mistake, 130 for Ctrl-C); ``--debug`` shows the traceback instead. Commands need no error
handling of their own for that.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from agentlab.errors import AgentlabError


def _demo(args: argparse.Namespace) -> int:
    from agentlab import _demo as demo

    if args.data:
        root = Path(args.data)
        return demo.run(root, out=sys.stdout)
    with tempfile.TemporaryDirectory(prefix="agentlab-demo-") as tmp:
        return demo.run(Path(tmp), out=sys.stdout)


def _chat(args: argparse.Namespace) -> int:
    from agentlab.chat import cli as chat_cli

    return chat_cli.run(args)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line too (subcommands' parsers are of this class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from agentlab import __version__

    parser = _Parser(
        prog="agentlab",
        description="Research agent memory: named agents on DuckDB files, branching sessions, context memory.",
    )
    parser.add_argument("--version", action="version", version=f"agentlab {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback when a command fails")
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
    for command in commands.choices.values():  # --debug after the command works too
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show the full traceback when the command fails")
    return parser


def _one_line(exc: BaseException) -> str:
    """What went wrong, in one line: the error's own first line, or a hint to rerun with --debug."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.strerror}: {exc.filename}. Check the path."
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    if isinstance(exc, (AgentlabError, ValueError, OSError, ImportError)):
        return text
    return f"{type(exc).__name__}: {text} (unexpected; run again with --debug for the traceback)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"agentlab {args.command}: interrupted.", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(f"agentlab {args.command}: {_one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
