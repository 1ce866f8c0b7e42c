"""The dashboard returned by ``agent.show()`` and ``session.show()``: the three views in one box.

Layout: the state view and the context view side by side, the branch tree below them. Each part is
an independent live client of the agent or session, so the dashboard needs no wiring of its own.

Invariant: every part the agent or session can support is shown; a part that cannot be (no session,
or a session without an agent) is left out, never shown empty. The dashboard also renders as
static HTML where widgets are not available.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ._base import esc
from .branch_tree import BranchTree
from .context_view import ContextView
from .state_view import StateView


class Dashboard(widgets.VBox):
    """A :class:`StateView`, a :class:`ContextView` and a :class:`BranchTree` together.

    Args:
        agent: The agent whose state to show (None: no state view).
        session: The session whose context and tree to show (None: neither).
        readonly: Passed to the state view.

    Attributes:
        state, context, tree: The parts (None where left out).
    """

    def __init__(self, agent: Any = None, session: Any = None, *, readonly: bool = False) -> None:
        self.agent = agent
        self.session = session
        self.state = StateView(agent, readonly=readonly) if agent is not None else None
        self.context = ContextView(session) if session is not None else None
        self.tree = BranchTree(session) if session is not None else None
        name = agent.name if agent is not None else (session.session_id if session is not None else "")
        title = widgets.HTML(f"<b>agentlab</b> · {esc(name)}")
        top = [w for w in (self.state, self.context) if w is not None]
        for part, flex in ((self.state, "1 1 30%"), (self.context, "2 1 60%")):
            if part is not None:
                part.layout = widgets.Layout(flex=flex, min_width="260px", margin="0 8px 8px 0")
        rows: list[Any] = [title]
        if top:
            rows.append(widgets.HBox(top, layout=widgets.Layout(width="100%", align_items="flex-start")))
        if self.tree is not None:
            rows.append(self.tree)
        super().__init__(rows, layout=widgets.Layout(width="100%"))

    def __repr__(self) -> str:
        parts = [name for name in ("state", "context", "tree") if getattr(self, name) is not None]
        return f"<Dashboard {', '.join(parts)}>"

    def to_html(self) -> str:
        """The parts' static HTML, one after the other."""
        parts = [p for p in (self.state, self.context, self.tree) if p is not None]
        return "".join(p.to_html() for p in parts)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        data = super()._repr_mimebundle_(**kwargs) or {}
        data = dict(data)
        data["text/html"] = self.to_html()
        return data

    def close(self) -> None:
        """Close the parts (their connections and subscriptions) and the box."""
        for part in (self.state, self.context, self.tree):
            if part is not None:
                part.close()
        super().close()


def for_agent(agent: Any) -> Dashboard:
    """The dashboard of an agent: its state, plus its ``session`` attribute's context and tree if it has one."""
    session = getattr(agent, "session", None)
    if session is not None and not hasattr(session, "subscribe"):
        session = None
    return Dashboard(agent, session)


def for_session(session: Any) -> Dashboard:
    """The dashboard of a session: its agent's state (if it has an agent), its context and its tree."""
    return Dashboard(getattr(session, "agent", None), session)
