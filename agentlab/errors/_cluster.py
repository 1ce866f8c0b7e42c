"""Errors of running agents as Ray actors."""

from __future__ import annotations

from agentlab.errors._base import AgentlabError

__all__ = ["ActorLostError", "ClusterError", "RayNotInstalledError"]


class ClusterError(AgentlabError):
    """Running agents, evaluations or simulations on Ray failed (cluster unreachable, a call Ray could not run)."""


class RayNotInstalledError(ClusterError, ImportError):
    """Ray is needed (``backend="ray"``, ``executor="ray"``, ``--ray``) but not installed."""


class ActorLostError(ClusterError):
    """The actor owning an agent died during a call that is not safe to send twice (SQL that writes, ``ask``).

    The actor was recreated, so the next call works; whether the lost call took effect is unknown, so the caller
    looks (``sql``, ``get_history``) before repeating it. ``actor_name`` names the actor, ``method`` the call.
    """

    def __init__(self, actor_name: str, method: str, detail: str = "") -> None:
        self.actor_name = actor_name
        self.method = method
        self.detail = detail
        super().__init__(
            f"The Ray actor {actor_name!r} died during {method}(){f' ({detail})' if detail else ''}; it has been "
            "recreated, but whether the call took effect is unknown. Check the agent's data, then repeat the call "
            "if it is missing."
        )
