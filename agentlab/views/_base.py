"""Shared plumbing for agentlab's widgets: the request/response channel and the static fallback.

Widgets sync only small JSON as traitlets. Anything bigger (message text, a branch's path, a
collapsed run of the tree) is fetched by the front end on request, over anywidget's custom
messages, with a tiny uuid protocol:

* front end -> kernel: ``{"kind": "request", "id": <uuid>, "method": <name>, "params": {...}}``
* kernel -> front end: ``{"kind": "response", "id": <uuid>, "result": ...}`` or
  ``{"kind": "response", "id": <uuid>, "error": "<message>"}``

Invariants: a handler that raises never raises into the comm (the error travels back as
``{"error": ...}``, as quak does); unknown methods are errors of the same shape; every widget also
renders as plain HTML (``text/html`` next to the widget view in ``_repr_mimebundle_``) so that
exported notebooks and front ends without widget support still show something useful.
"""

from __future__ import annotations

import html
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import traitlets as t

STATIC = Path(__file__).parent / "static"

Handler = Callable[..., Any]


class RequestWidget(anywidget.AnyWidget):
    """An anywidget whose front end can call whitelisted Python methods and await the result.

    Subclasses list callable names in ``_requests`` and implement ``_request_<name>(**params)``.
    ``error`` is a small synced trait the front ends show inline.
    """

    error = t.Unicode("").tag(sync=True)
    _requests: tuple[str, ...] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Several threads may change the agent at once; the widget's own bookkeeping is serialised.
        self._view_lock = threading.RLock()
        self.on_msg(self._on_custom_message)

    def _on_custom_message(self, _widget: Any, content: Any, buffers: list[bytes]) -> None:
        if not isinstance(content, dict) or content.get("kind") != "request":
            return
        reply = self.handle_request(content.get("method"), content.get("params") or {})
        reply.update(kind="response", id=content.get("id"))
        self.send(reply)

    def handle_request(self, method: Any, params: Any) -> dict[str, Any]:
        """Run one front-end request and return ``{"result": ...}`` or ``{"error": ...}``; never raises.

        Args:
            method: One of the widget's request names (``_requests``).
            params: Keyword arguments for it (a JSON object).
        """
        if method not in self._requests:
            return {"error": f"Unknown request {method!r}; this widget answers {list(self._requests)}."}
        if not isinstance(params, dict):
            return {"error": "Request params must be a JSON object."}
        handler: Handler = getattr(self, f"_request_{method}")
        try:
            return {"result": handler(**params)}
        except Exception as exc:  # a view must never break the comm: report, do not raise
            return {"error": f"{type(exc).__name__}: {exc}"}

    # -- static fallback ----------------------------------------------------------------------

    def to_html(self) -> str:
        """A self-contained static HTML rendering of what the widget currently shows."""
        return f"<pre>{html.escape(repr(self))}</pre>"

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return {"text/html": self.to_html(), "text/plain": repr(self)}
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = dict(data)
        data["text/html"] = self.to_html()
        return data, metadata


def short_json(value: Any, limit: int = 2000) -> str:
    """Pretty JSON for static views, cut to ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, indent=2)
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def esc(value: Any) -> str:
    """HTML-escape ``str(value)``."""
    return html.escape(str(value), quote=True)
