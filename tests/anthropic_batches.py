"""A Message Batches API for tests: the real ``anthropic`` SDK over ``httpx2.MockTransport``.

:class:`BatchClaude` extends :class:`agentlab.chat._offline.OfflineClaude` (which answers ``POST /v1/messages``) with
the batch endpoints, answering with the JSON shapes of the API reference:

* ``POST /v1/messages/batches``: a ``message_batch`` object, ``processing_status: "in_progress"``, every
  request counted as ``processing``, ``results_url: null``;
* ``GET /v1/messages/batches/{id}``: ``in_progress`` for the first ``polls`` retrievals, then ``ended`` with
  ``ended_at``, the final ``request_counts`` and ``results_url``;
* ``GET /v1/messages/batches/{id}/results``: JSON Lines, one ``{"custom_id", "result"}`` per request in a
  shuffled order, ``result`` being ``{"type": "succeeded", "message": {...}}``, ``{"type": "errored", "error":
  {"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}}``, ``{"type": "expired"}`` or
  ``{"type": "canceled"}``.

What each request gets is decided by ``outcome(custom_id, params, attempt) -> "succeeded" | "expired" |
"canceled" | ("errored", error_type)``, ``attempt`` counting from 0 the times that custom_id was batched; a
batch whose every request is expired ends as an expired batch does (``ended_at`` equal to ``expires_at``).
Every HTTP request is recorded in ``calls`` as ``(method, path)``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agentlab.chat._offline import OfflineClaude

__all__ = ["BatchClaude"]

_BATCHES = "/v1/messages/batches"


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


class BatchClaude(OfflineClaude):
    """Batches and messages, offline (see the module docstring)."""

    def __init__(self, responder: Callable[[dict[str, Any]], Any], *, polls: int = 1,
                 outcome: Callable[[str, dict[str, Any], int], Any] | None = None, seed: int = 0) -> None:
        super().__init__(responder, seed=seed)
        self.polls = polls
        self.outcome: Callable[[str, dict[str, Any], int], Any] = outcome or (lambda custom_id, params, attempt: "succeeded")
        self.batches: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.seen: dict[str, int] = {}
        self._shuffle = random.Random(seed)

    # -- helpers ------------------------------------------------------------------------------------------

    def created(self) -> int:
        return sum(1 for m, p in self.calls if m == "POST" and p == _BATCHES)

    def message_requests(self) -> int:
        return sum(1 for m, p in self.calls if m == "POST" and p == "/v1/messages")

    def _object(self, batch: dict[str, Any]) -> dict[str, Any]:
        ended = batch["polled"] > self.polls
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if ended:
            for item in batch["items"]:
                counts[item["result"]["type"]] += 1
        else:
            counts["processing"] = len(batch["items"])
        all_expired = ended and counts["expired"] == len(batch["items"])
        return {
            "id": batch["id"], "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": counts,
            "created_at": _stamp(batch["created"]),
            "expires_at": _stamp(batch["created"] + timedelta(hours=24)),
            "ended_at": (_stamp(batch["created"] + timedelta(hours=24)) if all_expired
                         else _stamp(batch["created"] + timedelta(minutes=3))) if ended else None,
            "archived_at": None, "cancel_initiated_at": None,
            "results_url": f"https://api.anthropic.com/v1/messages/batches/{batch['id']}/results" if ended else None,
        }

    def _result(self, custom_id: str, params: dict[str, Any]) -> dict[str, Any]:
        attempt = self.seen.get(custom_id, 0)
        self.seen[custom_id] = attempt + 1
        verdict = self.outcome(custom_id, params, attempt)
        if verdict == "succeeded":
            message = self._normalise(self.responder(params), params)
            return {"type": "succeeded", "message": message}
        if verdict in ("expired", "canceled"):
            return {"type": verdict}
        _, error_type = verdict
        return {"type": "errored", "error": {"type": "error", "error": {"type": error_type, "message": {
            "invalid_request_error": "max_tokens: Field required",
            "api_error": "Internal server error",
            "overloaded_error": "Overloaded"}.get(error_type, error_type)},
            "request_id": self._id("req_01")}}

    # -- transport ----------------------------------------------------------------------------------------

    def handler(self, request: Any) -> Any:
        import httpx2

        path = request.url.path
        method = request.method
        self.calls.append((method, path))
        if path == _BATCHES and method == "POST":
            body = json.loads(bytes(request.content))
            batch_id = self._id("msgbatch_01")
            items = [{"custom_id": r["custom_id"], "result": self._result(r["custom_id"], r["params"])}
                     for r in body["requests"]]
            created = {"id": batch_id, "items": items, "polled": 0,
                       "created": datetime(2026, 12, 2, 9, 0, tzinfo=UTC) + timedelta(minutes=len(self.batches))}
            self.batches[batch_id] = created
            self.requests.extend(r["params"] for r in body["requests"])
            return httpx2.Response(200, json=self._object(created))
        if path.startswith(_BATCHES + "/"):
            rest = path[len(_BATCHES) + 1:]
            batch_id, _, tail = rest.partition("/")
            batch = self.batches.get(batch_id)
            if batch is None:
                return httpx2.Response(404, json={"type": "error", "error": {
                    "type": "not_found_error", "message": f"No batch {batch_id}"}})
            if tail == "results":
                lines = list(batch["items"])
                self._shuffle.shuffle(lines)
                text = "".join(json.dumps(item) + "\n" for item in lines)
                return httpx2.Response(200, content=text.encode(), headers={"content-type": "application/binary"})
            batch["polled"] += 1
            return httpx2.Response(200, json=self._object(batch))
        return super().handler(request)
