"""Past one machine: agents as named Ray actors, evaluations and simulated users on a Ray cluster.

* ``get_agent(Cls, name, backend="ray")`` returns an :class:`AgentHandle` whose calls run in the named, detached
  actor that owns the agent's DuckDB file (:mod:`agentlab.cluster.handle`).
* ``agentlab.eval.run(..., executor="ray")`` shards conversations over Ray workers (:class:`RayExecutor`).
* :func:`simulate` replays a dataset as many users, one agent each, here or on Ray (``agentlab simulate``).

This module re-exports names on first use, and :func:`register` (called by :mod:`agentlab._wiring`) registers the
``"ray"`` backend and executor: Ray itself is imported when something first needs it (``pip install
'agentlab[ray]'``), never by ``import agentlab``.
"""

from __future__ import annotations

from typing import Any

from agentlab.agent.agent import register_backend
from agentlab.eval.runner import register_executor

__all__ = ["AgentHandle", "CompactionPolicy", "RayExecutor", "SessionHandle", "Simulation", "register", "simulate"]

_EXPORTS = {
    "AgentHandle": "handle", "SessionHandle": "handle", "RayExecutor": "evaluation",
    "CompactionPolicy": "simulation", "Simulation": "simulation", "simulate": "simulation",
}


def _open_handle(cls: type, name: str, **options: Any) -> Any:
    from .handle import open_handle

    return open_handle(cls, name, **options)


def _ray_executor() -> Any:
    from .evaluation import RayExecutor

    return RayExecutor()


def register() -> None:
    """Make ``get_agent(..., backend="ray")`` and ``agentlab.eval.run(..., executor="ray")`` reach this package."""
    register_backend("ray", _open_handle)
    register_executor("ray", _ray_executor)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentlab.cluster' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)
