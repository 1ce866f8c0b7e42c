"""StateView: an agent's state as a live, collapsible, editable tree.

The view is a client of the agent like any other: it holds one :class:`~agentlab.Connection`
from ``agent.connect()``. Changes made anywhere (a cell, a thread, another view) arrive as
``cf_agent_state`` frames and update the view; edits made in the view go back through the same
connection, so ``validate_state_change`` applies to them exactly as to a remote client.

Invariants:

* ``value`` always equals the agent's stored state (``None`` when ``has_state`` is false). The
  front end never writes it directly: an edit is a request, and after a refusal the view is put
  back to the stored state (``revision`` is bumped so the front end redraws even when the value did
  not change) and ``error`` carries the validator's message.
* A readonly view (or a view of a read-only agent) refuses every edit with an error, changing
  nothing.
* Lock order is agent lock, then nothing: the view reads and publishes under the agent's lock, so
  views see changes in the order they were stored, whichever thread made them.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

import traitlets as t

from agentlab.agent import read_state_meta
from agentlab.errors import AgentClosedError, AgentlabError

from ._base import STATIC, RequestWidget, esc, short_json


class StateView(RequestWidget):
    """A live view of ``agent.state`` with the time and source of the last change.

    Args:
        agent: The :class:`~agentlab.Agent` to show.
        readonly: Show only; edits from the front end are refused with an inline error.

    Synced traits: ``value`` (the state), ``has_state``, ``updated_at`` (ISO 8601, UTC),
    ``source`` (``"server"``, ``"this view"`` or ``"connection <id>"``), ``readonly``,
    ``agent_name``, ``revision`` and ``error``.
    """

    _esm = STATIC / "state_view.js"
    _css = STATIC / "state_view.css"
    _requests = ("set_state",)

    value = t.Any(None, allow_none=True).tag(sync=True)
    has_state = t.Bool(False).tag(sync=True)
    updated_at = t.Unicode("").tag(sync=True)
    source = t.Unicode("").tag(sync=True)
    readonly = t.Bool(False).tag(sync=True)
    agent_name = t.Unicode("").tag(sync=True)
    revision = t.Int(0).tag(sync=True)

    def __init__(self, agent: Any, *, readonly: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.agent = agent
        self.readonly = bool(readonly or agent.read_only)
        self.agent_name = agent.name
        self._connection: Any = None
        self._connection = agent.connect(on_state=self._on_state, readonly=self.readonly)
        self.refresh()

    def __repr__(self) -> str:
        mode = " readonly" if self.readonly else ""
        return f"<StateView of {self.agent_name!r}{mode}>"

    @property
    def connection(self) -> Any:
        """The view's :class:`~agentlab.Connection` to the agent."""
        return self._connection

    # -- kernel -> view -----------------------------------------------------------------------

    def _on_state(self, _state: Any) -> None:
        # Called inside the writer's broadcast (agent lock held). The frame's state is what was
        # stored, but re-reading also picks up the row's time and source in one place.
        if self._connection is not None:
            self.error = ""  # an old refusal no longer describes what is shown
            self.refresh()

    def refresh(self) -> None:
        """Re-read the stored state, its time and its source, and publish them to the front end."""
        agent = self.agent
        try:
            store = agent.store
        except AgentClosedError:
            self.error = "The agent is closed."
            return
        with store.lock:  # the agent's order: a concurrent writer cannot interleave with us
            if agent.closed:
                self.error = "The agent is closed."
                return
            has_state = agent.has_state
            value = agent.state if has_state else None
            meta = read_state_meta(store)
            updated_at, source = "", ""
            if meta is not None:
                stamp = meta[1]
                if isinstance(stamp, _dt.datetime):
                    stamp = stamp.astimezone(_dt.UTC).isoformat(timespec="milliseconds")
                updated_at = str(stamp)
                source = self._describe_source(meta[0])
            with self.hold_sync():
                self.value = value
                self.has_state = has_state
                self.updated_at = updated_at
                self.source = source
                self.revision += 1

    def _describe_source(self, source_id: str) -> str:
        if source_id == "server":
            return "server"
        if self._connection is not None and source_id == self._connection.id:
            return "this view"
        return f"connection {source_id[:8]}"

    # -- view -> kernel -----------------------------------------------------------------------

    def _request_set_state(self, state: Any) -> dict[str, Any]:
        return self._submit(state)

    def set_state(self, sync_data: dict[str, Any]) -> None:
        """ipywidgets entry point for front-end trait updates.

        A front end that writes ``value`` directly is treated as an edit: it goes through the
        connection like :meth:`_request_set_state`, never straight into the trait.
        """
        if "value" in sync_data:
            sync_data = dict(sync_data)
            self._submit(sync_data.pop("value"))
        if sync_data:
            super().set_state(sync_data)

    def _submit(self, state: Any) -> dict[str, Any]:
        connection = self._connection
        if connection is None or connection.closed:
            message = "This view is closed; create a new StateView."
        else:
            try:
                connection.set_state(state)  # validates; the broadcast skips this connection
            except AgentlabError as exc:
                message = str(exc)
            else:
                self.error = ""
                self.refresh()
                return {"ok": True}
        self.error = message
        self.refresh()  # back to the stored state, and make the front end redraw
        self.send_state("value")
        return {"ok": False, "error": message}

    def close(self) -> None:
        """Close the widget and its connection to the agent."""
        if self._connection is not None:
            self._connection.close()
        super().close()

    # -- static fallback ----------------------------------------------------------------------

    def to_html(self) -> str:
        """The state as pretty-printed JSON with its time and source (for non-widget front ends)."""
        when = f"changed {esc(self.updated_at)} by {esc(self.source)}" if self.has_state else "no state set"
        body = esc(short_json(self.value)) if self.has_state else "—"
        return (
            f'<div class="agentlab-static"><b>State of {esc(self.agent_name)}</b> '
            f'<small>({when})</small><pre>{body}</pre></div>'
        )
