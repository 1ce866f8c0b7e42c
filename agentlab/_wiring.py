"""The composition root: binds the accessors lower layers declare to the higher layers that implement them.

The session and agent layers declare ``messages_df``, ``show`` and the like as :class:`agentlab._hooks.Accessor`
slots, and the agent and eval layers keep registries of backends and executors; this module, imported by the
package before anything else can use them, says which function of :mod:`agentlab.frames`, :mod:`agentlab.views`
or :mod:`agentlab.cluster` answers each one. The imports are inside the functions, so nothing
heavy loads until an accessor is used.
"""

from __future__ import annotations

from typing import Any

from agentlab._hooks import bind
from agentlab.cluster import register as register_cluster

SESSION_FRAMES = ("messages", "branches", "compactions", "tokens", "blocks", "blocks_history", "tool_calls", "usage")
AGENT_FRAMES = ("messages", "branches", "compactions", "blocks_history", "tool_calls", "usage")


def _frame(name: str) -> Any:
    def make(owner: Any) -> Any:
        from agentlab.session import bound_frame

        return bound_frame(name, owner)

    return make


def _export_agent(agent: Any, path: Any, *, overwrite: bool = False) -> Any:
    from agentlab.agent import export

    return export(agent, path, overwrite=overwrite)


def _show_agent(agent: Any) -> Any:
    from agentlab.views import for_agent

    return for_agent(agent)


def _plot_results(results: Any, **options: Any) -> Any:
    from agentlab.frames.plot import recall_curves

    return recall_curves(results, **options)


def _show_session(session: Any) -> Any:
    from agentlab.views import for_session

    return for_session(session)


for _name in SESSION_FRAMES:
    bind(f"session.{_name}_df", _frame(_name))
for _name in AGENT_FRAMES:
    bind(f"agent.{_name}_df", _frame(_name))
bind("agent.show", _show_agent)
bind("agent.export", _export_agent)
register_cluster()  # get_agent(..., backend="ray") and eval.run(..., executor="ray"); Ray loads on first use
bind("session.show", _show_session)
bind("results.plot", _plot_results)
