"""Registering the ``"ray"`` agent backend and evaluation executor with the layers below, which never import
this package: :func:`register` is called once by :mod:`agentlab._wiring`. Ray is imported only when a handle or
executor is first made."""

from __future__ import annotations

from typing import Any

from agentlab.agent import register_backend
from agentlab.eval.runner import register_executor

__all__ = ["register"]


def _open_handle(cls: type, name: str, **options: Any) -> Any:
    from agentlab.cluster._handle import open_handle

    return open_handle(cls, name, **options)


def _ray_executor() -> Any:
    from agentlab.cluster._evaluation import RayExecutor

    return RayExecutor()


def register() -> None:
    """Make ``get_agent(..., backend="ray")`` and ``agentlab.eval.run(..., executor="ray")`` reach this package."""
    register_backend("ray", _open_handle)
    register_executor("ray", _ray_executor)
