"""``agentlab serve MODULE:CLASS [...]``: serve agent classes over HTTP and WebSocket until interrupted.

Invariant: every failure the user can fix (a class that does not import, a root another server holds, a
port in use, the ``serve`` extra missing) is one line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from agentlab.errors import AgentlabError, ServeConfigError


def add_parser(commands: Any) -> None:
    """Add the ``serve`` subcommand to the ``agentlab`` parser."""
    parser = commands.add_parser(
        "serve",
        help="serve agent classes to WebSocket and HTTP clients (upstream's protocol)",
        description="Serve agents at /agents/<kebab-class>/<name>. Binds 127.0.0.1 by default: put authentication "
        "in an on_before_connect/on_before_request hook (agentlab.serve.app) before binding anything else.",
    )
    parser.add_argument("classes", nargs="+", metavar="MODULE:CLASS",
                        help="agent classes to serve, e.g. myagents:Counter or path/to/agents.py:Counter")
    parser.add_argument("--root", help="folder of the agents' files (default: $AGENTLAB_HOME or ./agentlab-data)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8787, help="port to bind (default: 8787; 0 picks a free one)")
    parser.add_argument("--idle-timeout", type=float, default=300.0, metavar="SECONDS",
                        help="close an agent nobody used for this long (default: 300)")
    parser.add_argument("--hibernate-after", type=float, default=10.0, metavar="SECONDS",
                        help="hibernate an agent whose clients were all idle this long: its database is released and "
                        "its sockets stay open until a frame wakes it (default: 10; 0 never hibernates)")
    parser.add_argument("--compression", action="store_true",
                        help="accept clients' permessage-deflate (off by default: about 46 KB of zlib state per "
                        "connection, and every broadcast compressed once per client)")
    parser.add_argument("--cors", action="store_true", help="answer CORS preflights and send permissive CORS headers")
    parser.add_argument("--log-level", default="info", help="uvicorn's log level (default: info)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``agentlab serve``; returns the exit status."""
    try:
        classes = [load_class(spec) for spec in args.classes]
        try:
            from .background import run as serve
        except ImportError as exc:
            raise ServeConfigError(
                f"agentlab serve needs the serve extra ({exc.name} is missing): pip install 'agentlab[serve]'."
            ) from None

        if args.host not in ("127.0.0.1", "localhost", "::1"):
            print(f"agentlab serve: warning: {args.host} is reachable from other machines and this command has no "
                  "authentication; anyone who reaches it can read and change every agent in the root. Serve "
                  "agentlab.serve.app(..., on_before_connect=..., on_before_request=...) instead.", file=sys.stderr)

        def announce(url: str, server: Any) -> None:
            names = ", ".join(sorted(server.classes))
            print(f"agentlab: serving {names} from {server.root} at {url}/{'/'.join(server.prefix)}/<class>/<name>",
                  flush=True)

        serve(classes, host=args.host, port=args.port, root=args.root, idle_timeout=args.idle_timeout,
              hibernate_after=args.hibernate_after or None, compression=bool(args.compression),
              cors=bool(args.cors), log_level=args.log_level, announce=announce)
    except AgentlabError as exc:
        print(f"agentlab serve: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


def load_class(spec: str) -> type:
    """The class named by ``module:Class`` or ``path/to/file.py:Class`` (the working folder is importable).

    Raises:
        ServeConfigError: The spec has no ``:``, the module does not import, or it has no such class.
    """
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ServeConfigError(f"{spec!r} is not MODULE:CLASS (for example myagents:Counter).")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise ServeConfigError(f"{spec!r}: there is no file {path}.")
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            assert module_spec is not None and module_spec.loader is not None
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ServeConfigError:
        raise
    except Exception as exc:  # whatever the user's module raised while importing
        raise ServeConfigError(f"{spec!r}: importing {module_name} failed: {type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ServeConfigError(f"{spec!r}: {module_name} has no attribute {attr!r}.")
    if not isinstance(obj, type):
        raise ServeConfigError(f"{spec!r} is not a class but {type(obj).__name__}.")
    return obj
