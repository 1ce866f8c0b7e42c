"""Serving agents to remote clients over upstream's WebSocket and HTTP protocol (``agentlab serve``).

This module only re-exports. The decorator and stream (:mod:`.rpc`) need nothing beyond agentlab; the
server (Starlette, uvicorn) and the client (websockets) load on first use, from the ``serve`` extra.
"""

from __future__ import annotations

from typing import Any

from .rpc import Stream, rpc

_LAZY = {
    "AgentClient": "client",
    "AgentServer": "server",
    "HttpRequest": "http",
    "Route": "http",
    "SLOW_CLIENT_CODE": "sockets",
    "ServerHandle": "background",
    "app": "server",
    "run": "background",
    "start": "background",
}

__all__ = [
    "SLOW_CLIENT_CODE", "AgentClient", "AgentServer", "HttpRequest", "Route", "ServerHandle", "Stream", "app", "rpc",
    "run", "start",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentlab.serve' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)
