"""Where else an agent can live: ``get_agent(cls, name, backend=...)`` with a backend other than ``"local"`` hands
off to the opener registered under that name. Higher layers register themselves (``agentlab.cluster`` registers
``"ray"``); the agent layer never imports them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["backend_names", "backend_opener", "register_backend"]

_backends: dict[str, Callable[..., Any]] = {}


def register_backend(name: str, opener: Callable[..., Any]) -> None:
    """Make ``get_agent(cls, name, backend=name, **options)`` return ``opener(cls, name, root=..., read_only=...,
    **options)`` (a handle to an agent that lives elsewhere, e.g. in a Ray actor)."""
    _backends[name] = opener


def backend_opener(name: str) -> Callable[..., Any] | None:
    """The opener registered as ``name``, or None."""
    return _backends.get(name)


def backend_names() -> list[str]:
    """The registered backends' names, sorted (``"local"`` is not among them: it needs no registration)."""
    return sorted(_backends)
