"""The composition root: registers the Ray backend with the registries of the agent and eval layers.

``get_agent(..., backend="ray")`` and ``eval.run(..., executor="ray")`` look their backend up by name; the cluster
layer, above both, provides it. The package imports this module first, so the names are there before anything
can ask for them; Ray itself loads on first use.
"""

from __future__ import annotations

from agentlab.cluster import register as register_cluster

register_cluster()
