"""Past one machine: agents as named Ray actors, evaluations and simulated users on a Ray cluster.

* ``get_agent(Cls, name, backend="ray")`` returns an :class:`AgentHandle` whose calls run in the named, detached
  actor that owns the agent's DuckDB file (:mod:`agentlab.cluster._handle`).
* ``agentlab.eval.run(..., executor="ray")`` shards conversations over Ray workers (:class:`RayExecutor`).
* :func:`simulate` replays a dataset as many users, one agent each, here or on Ray (``agentlab simulate``).

This module re-exports names on first use, and :func:`register` (:mod:`agentlab.cluster._registration`, called by
:mod:`agentlab._wiring`) registers the ``"ray"`` backend and executor: Ray itself is imported when something
first needs it (``pip install 'agentlab[ray]'``), never by ``import agentlab``.
"""

from __future__ import annotations

from typing import Any

from agentlab.cluster._registration import register

__all__ = ["AgentHandle", "CompactionPolicy", "RayExecutor", "SessionHandle", "Simulation", "register", "simulate"]

_EXPORTS = {
    "AgentHandle": "_handle", "SessionHandle": "_handle", "RayExecutor": "_evaluation",
    "CompactionPolicy": "_simulation", "Simulation": "_simulation", "simulate": "_simulation",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentlab.cluster' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)
