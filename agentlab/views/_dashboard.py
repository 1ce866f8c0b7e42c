"""The dashboard returned by ``show(agent)`` and ``show(session)``: the three views in one box.

Layout: the state view and the context view side by side, the branch tree below them. Each part is
an independent live client of the agent or session, so the dashboard needs little wiring of its own.

``show(agent)`` on an agent with a ``session`` attribute (a :class:`~agentlab.chat.ChatAgent`) shows that
session. On any other agent it looks in the file: when sessions store messages (or have rows in the
``sessions`` table), it shows the most recently active one, with a picker to switch between them. Such a
session is read through a :class:`~agentlab.session.Session` object of the dashboard's own, so the dashboard
also listens to the agent's session frames and redraws the tree when the notebook writes through its own
Session object.

Invariant: every part the agent or session can support is shown; a part that cannot be (no session,
or a session without an agent) is left out, never shown empty. The dashboard also renders as
static HTML where widgets are not available.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from agentlab.views._branch_tree import BranchTree
from agentlab.views._context_view import ContextView
from agentlab.views._state_view import StateView

from ._base import esc


def _label(session_id: str, name: str | None) -> str:
    if session_id == "":
        return "default session ('')"
    return f"{name} ({session_id[:8]})" if name else session_id


def stored_sessions(agent: Any) -> list[tuple[str, str]]:
    """``(label, session id)`` of every session of ``agent``'s file that stores messages or has a row, most
    recently active first."""
    from agentlab.session import SessionManager, tree_of

    active = tree_of(agent.store).active_sessions()
    rows = {info.id: info for info in SessionManager(agent).list()}
    ids = sorted(set(active) | set(rows), key=lambda sid: (active.get(sid, -1), rows[sid].seq if sid in rows else -1),
                 reverse=True)
    return [(_label(sid, rows[sid].name if sid in rows else None), sid) for sid in ids]


class Dashboard(widgets.VBox):
    """A :class:`StateView`, a :class:`ContextView` and a :class:`BranchTree` together.

    Args:
        agent: The agent whose state to show (None: no state view).
        session: The session whose context and tree to show (None: neither).
        readonly: Passed to the state view.
        sessions: ``(label, session id)`` choices for a session picker (the agent's stored sessions); the
            dashboard then owns ``session`` and follows the agent's session frames.

    Attributes:
        state, context, tree: The parts (None where left out).
        picker: The session picker (None without ``sessions``).
    """

    def __init__(self, agent: Any = None, session: Any = None, *, readonly: bool = False,
                 sessions: list[tuple[str, str]] | None = None) -> None:
        self.agent = agent
        self.session = session
        self.state = StateView(agent, readonly=readonly) if agent is not None else None
        self.context: ContextView | None = None
        self.tree: BranchTree | None = None
        self.picker: widgets.Dropdown | None = None
        self._frames: Any = None
        name = agent.name if agent is not None else (session.session_id if session is not None else "")
        self._title = widgets.HTML(f"<b>agentlab</b> · {esc(name)}")
        if sessions:
            self.picker = widgets.Dropdown(options=sessions, value=session.session_id, description="session",
                                           layout=widgets.Layout(width="auto", margin="0 0 0 12px"))
            self.picker.observe(self._pick, names="value")
            # This Session object is the dashboard's own: writes through the notebook's objects reach it as frames.
            self._frames = agent.connect(on_message=self._on_frame, readonly=True)
        self._build_parts()
        super().__init__(self._rows(), layout=widgets.Layout(width="100%"))

    def _build_parts(self) -> None:
        session = self.session
        self.context = ContextView(session) if session is not None else None
        self.tree = BranchTree(session) if session is not None else None
        for part, flex in ((self.state, "1 1 30%"), (self.context, "2 1 60%")):
            if part is not None:
                part.layout = widgets.Layout(flex=flex, min_width="260px", margin="0 8px 8px 0")

    def _rows(self) -> list[Any]:
        head: list[Any] = [self._title] if self.picker is None else [
            widgets.HBox([self._title, self.picker], layout=widgets.Layout(align_items="center"))]
        top = [w for w in (self.state, self.context) if w is not None]
        if top:
            head.append(widgets.HBox(top, layout=widgets.Layout(width="100%", align_items="flex-start")))
        if self.tree is not None:
            head.append(self.tree)
        return head

    def _pick(self, change: dict[str, Any]) -> None:
        from agentlab.session import Session

        for part in (self.context, self.tree):
            if part is not None:
                part.close()
        self.session = Session(self.agent, change["new"])
        self._build_parts()
        self.children = self._rows()

    def _on_frame(self, frame: dict[str, Any]) -> None:
        if frame.get("type") == "cf_agent_session" and self.tree is not None:
            self.tree.notice_change()

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
        if self._frames is not None:
            self._frames.close()
        for part in (self.state, self.context, self.tree):
            if part is not None:
                part.close()
        super().close()


def for_agent(agent: Any) -> Dashboard:
    """The dashboard of an agent: its state, plus its ``session`` attribute's context and tree if it has one, else
    the most recently active session stored in its file (with a picker when there are several)."""
    session = getattr(agent, "session", None)
    if session is not None and hasattr(session, "subscribe"):
        return Dashboard(agent, session)
    from agentlab.session import Session

    sessions = stored_sessions(agent)
    if not sessions:
        return Dashboard(agent, None)
    return Dashboard(agent, Session(agent, sessions[0][1]), sessions=sessions)


def for_session(session: Any) -> Dashboard:
    """The dashboard of a session: its agent's state (if it has an agent), its context and its tree."""
    return Dashboard(getattr(session, "agent", None), session)


def show(target: Any) -> Dashboard:
    """A live notebook dashboard of an agent (:func:`for_agent`) or a session (:func:`for_session`)."""
    from agentlab.session import Session

    return for_session(target) if isinstance(target, Session) else for_agent(target)
