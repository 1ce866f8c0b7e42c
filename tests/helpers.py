"""Small builders and readers shared by the tests: messages in the stored shape, what a history reads as, and a
recording comm that stands in for a widget's front end."""

from __future__ import annotations

from typing import Any

from agentlab import Agent
from agentlab.session._compact_function import is_compaction_message


def msg(mid: str, text: str | None = None, role: str = "user", **extra: Any) -> dict[str, Any]:
    """A message with one text part (the id itself when no text is given), plus any extra keys."""
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": mid if text is None else text}], **extra}


def role_msg(mid: str, role: str = "user", text: str | None = None) -> dict[str, Any]:
    """A message with one text part, ``"text of <id>"`` when no text is given (role before text)."""
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}]}


def summarise_first_three(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A compaction function that folds the first three messages once the history has four or more."""
    if len(history) < 4:
        return None
    return {"from_message_id": history[0]["id"], "to_message_id": history[2]["id"], "summary": "the opening"}


class Quiet(Agent):
    """An agent that keeps the errors it reports (``self.errors``) instead of warning."""

    errors: list[BaseException]

    def on_start(self) -> None:
        self.errors = []

    def on_error(self, error: BaseException) -> None:
        self.errors.append(error)


def ids(messages: list[dict[str, Any]]) -> list[str]:
    """The ids of ``messages``, in order."""
    return [m["id"] for m in messages]


def texts(messages: list[dict[str, Any]]) -> list[str]:
    """Each message's id, or its summary text when it is a compaction overlay."""
    return [m["parts"][0]["text"] if is_compaction_message(m) else m["id"] for m in messages]


# --- widgets without a browser ---------------------------------------------------------------------------------
# A recording comm stands in for the front end (``comm.create_comm`` is the documented extension point): it keeps
# every message the kernel sends, and tests feed the kernel the messages a front end would send (custom requests and
# trait updates) through the widget's real comm handler. Install it with ``record_comms(monkeypatch)``.


def record_comms(monkeypatch: Any) -> None:
    """Make every widget created from now on talk to a :class:`RecordingComm`."""
    import comm
    from comm.base_comm import BaseComm

    class RecordingComm(BaseComm):
        """A comm whose 'front end' is a list of the messages the kernel published."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.published: list[tuple[str, dict[str, Any]]] = []
            super().__init__(*args, **kwargs)

        def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None, buffers: Any = None,
                        **keys: Any) -> None:
            self.published.append((msg_type, data or {}))

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: RecordingComm(*a, **k))


def custom_replies(widget: Any) -> list[dict[str, Any]]:
    """The kernel's replies to front-end requests, oldest first."""
    return [d["content"] for kind, d in widget.comm.published
            if kind == "comm_msg" and d.get("method") == "custom" and d["content"].get("kind") == "response"]


def frontend_request(widget: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Send a request as the front end does (a custom comm message) and return the kernel's reply."""
    before = len(custom_replies(widget))
    widget.comm.handle_msg({"content": {"comm_id": widget.comm.comm_id, "data": {
        "method": "custom", "content": {"kind": "request", "id": f"r{before}", "method": method, "params": params}}},
        "buffers": []})
    replies = custom_replies(widget)
    assert len(replies) == before + 1
    assert replies[-1]["id"] == f"r{before}"
    return replies[-1]


def frontend_update(widget: Any, state: dict[str, Any]) -> None:
    """Write traits as the front end does (an ``update`` comm message)."""
    widget.comm.handle_msg({"content": {"comm_id": widget.comm.comm_id, "data": {
        "method": "update", "state": state, "buffer_paths": []}}, "buffers": []})


def synced(widget: Any, name: str) -> Any:
    """The last value of trait ``name`` the kernel sent to the front end."""
    value = None
    for kind, data in widget.comm.published:
        state = data.get("state", {}) if kind in ("comm_open", "comm_msg") else {}
        if name in state:
            value = state[name]
    return value
