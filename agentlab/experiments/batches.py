"""Sending many Claude requests: through the Message Batches API (half price) or one by one, cached and capped.

:class:`Runner` takes :class:`Request` objects (a key, a kind and a Messages API body) and returns an
:class:`Outcome` per key. Keys already answered in the :class:`~agentlab.experiments.cache.RequestCache` are
not sent again. The rest go out in Message Batches (``client.messages.batches.create``; at most
``max_batch_requests`` requests or ``max_batch_bytes`` of JSON each), which are polled
(``batches.retrieve``) until they end, and whose results JSONL (``batches.results``) is stored line by line.
Results of type ``expired``, and ``errored`` results whose error is transient (``api_error``,
``overloaded_error``, ``rate_limit_error``, ``timeout_error``), are sent again in a new batch, up to
``max_attempts`` outcomes per request; an ``invalid_request_error`` or a ``canceled`` result is final.
``mode="direct"`` sends each request with ``messages.create`` instead (full price; the SDK retries).

The budget: before each batch (or direct request) is sent, what this run has spent plus the upper bound of
every batch still in flight plus the upper bound of the next one must stay within ``budget`` (USD). When the
next batch does not fit, the batches in flight are finished first (their actual cost is often far below the
bound), and if it still does not fit, :class:`~agentlab.errors.BudgetExceededError` stops the run. Nothing
received is lost: it is all in the cache.

Invariants: a batch is recorded in the cache before it is polled, so an interrupted run resumes polling it; a
run never sends a request whose key already has a succeeded result; ``spent`` counts only responses received
by this run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentlab.errors import BatchError, BudgetExceededError, InvalidArgumentError

from .cache import RequestCache, request_key
from .pricing import Estimate, Price, cost_of, estimate

__all__ = ["RETRYABLE_ERRORS", "Outcome", "Request", "Runner"]

RETRYABLE_ERRORS = frozenset({"api_error", "overloaded_error", "rate_limit_error", "timeout_error"})


@dataclass(frozen=True)
class Request:
    """One Messages API request of an experiment: ``key`` identifies it (see :func:`request_key`)."""

    key: str
    kind: str
    params: dict[str, Any]

    @classmethod
    def make(cls, kind: str, params: dict[str, Any], repetition: int = 0) -> Request:
        """A request whose key is derived from ``kind``, ``params`` and ``repetition``."""
        return cls(request_key(kind, params, repetition), kind, params)

    @property
    def custom_id(self) -> str:
        """The batch ``custom_id`` (at most 64 characters of ``[a-zA-Z0-9_-]``)."""
        return self.key[:48]


@dataclass(frozen=True)
class Outcome:
    """What became of one request: ``status`` is ``succeeded``, ``errored``, ``expired``, ``canceled`` or
    ``unsent`` (the run stopped first); ``message`` is the response body when it succeeded."""

    key: str
    status: str
    message: dict[str, Any] | None = None
    error_type: str | None = None
    error: Any = None
    cached: bool = False

    @property
    def text(self) -> str:
        """The response's text blocks joined ("" unless it succeeded)."""
        content = (self.message or {}).get("content") or []
        return "\n".join(b.get("text", "") for b in content if isinstance(b, Mapping) and b.get("type") == "text")


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    return obj.to_dict(mode="json")


class Runner:
    """Send requests, cached, in batches by default, within a budget (see the module docstring).

    Args:
        client: An ``anthropic.Anthropic`` client.
        cache: A :class:`RequestCache`, a path, ``"default"`` or ``None`` (memory).
        mode: ``"batch"`` (Message Batches, default) or ``"direct"`` (``messages.create`` per request).
        budget: Most USD this run may spend; ``None`` for no cap.
        prices: Extra or replacement prices (see :mod:`agentlab.experiments.pricing`).
        poll_interval: Seconds between two polls of a batch.
        max_wait: Seconds to wait for one batch before giving up (batches expire after 24 hours).
        max_attempts: Outcomes allowed per request before an expired or transient failure is final.
        max_batch_requests, max_batch_bytes: Limits of one batch (the API allows 100,000 and 256 MB).
        out: Where progress lines go (``print`` by default).
        sleep: The wait between polls (tests pass a no-op).
    """

    def __init__(self, client: Any, cache: Any = "default", *, mode: str = "batch", budget: float | None = None,
                 prices: Mapping[str, Price] | None = None, poll_interval: float = 30.0,
                 max_wait: float = 26 * 3600, max_attempts: int = 3, max_batch_requests: int = 100_000,
                 max_batch_bytes: int = 200 * 2**20, out: Callable[[str], Any] | None = print,
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        if mode not in ("batch", "direct"):
            raise InvalidArgumentError(f"mode must be 'batch' or 'direct', not {mode!r}.")
        if budget is not None and not budget >= 0:
            raise InvalidArgumentError(f"budget must be a number of dollars of 0 or more, not {budget!r}.")
        if max_attempts < 1:
            raise InvalidArgumentError(f"max_attempts must be 1 or more, not {max_attempts!r}.")
        self.client = client
        self.cache = RequestCache.open(cache)
        self.mode = mode
        self.budget = budget
        self.prices = prices
        self.poll_interval = poll_interval
        self.max_wait = max_wait
        self.max_attempts = max_attempts
        self.max_batch_requests = max_batch_requests
        self.max_batch_bytes = max_batch_bytes
        self.out = out or (lambda line: None)
        self.sleep = sleep
        self.spent = 0.0
        self._reserved: dict[str, float] = {}  # batch id -> upper bound, while in flight

    # -- estimates --------------------------------------------------------------------------------------------

    def pending(self, requests: Iterable[Request]) -> list[Request]:
        """The requests (unique by key) that the cache cannot answer."""
        unique = list({r.key: r for r in requests}.values())
        done = self.cache.succeeded(r.key for r in unique)
        return [r for r in unique if r.key not in done]

    def estimate(self, requests: Iterable[Request]) -> Estimate:
        """What sending the requests the cache cannot answer would cost (see :func:`pricing.estimate`)."""
        return estimate((r.params for r in self.pending(requests)), batch=self.mode == "batch", prices=self.prices)

    def _committed(self) -> float:
        return self.spent + sum(self._reserved.values())

    def _fits(self, upper: float) -> bool:
        return self.budget is None or self._committed() + upper <= self.budget + 1e-12

    # -- running ----------------------------------------------------------------------------------------------

    def run(self, requests: Iterable[Request]) -> dict[str, Outcome]:
        """Send what the cache cannot answer; return an :class:`Outcome` for every request's key.

        Raises:
            BudgetExceededError: The next requests would go over the budget (received results are kept).
            BatchError: A batch never ended within ``max_wait``, or the API refused to create one.
        """
        chosen = list({r.key: r for r in requests}.values())
        self.cache.add_requests((r.key, r.kind, r.params) for r in chosen)
        cached = set(self.cache.succeeded(r.key for r in chosen))
        todo = [r for r in chosen if r.key not in cached]
        if todo:
            self._resume({r.key for r in todo})
            for _ in range(self.max_attempts):  # each round sends what has no final outcome yet
                todo = self._unfinished(todo)
                if not todo:
                    break
                self._send(todo)
        return self._outcomes(chosen, cached)

    def _unfinished(self, requests: list[Request]) -> list[Request]:
        keys = [r.key for r in requests]
        done = set(self.cache.succeeded(keys))
        attempts = self.cache.attempts(keys)
        last = self.cache.last_outcomes(keys)
        return [r for r in requests if r.key not in done
                and (r.key not in last or self._retryable(last[r.key], attempts.get(r.key, 0)))]

    def _outcomes(self, chosen: list[Request], cached: set[str]) -> dict[str, Outcome]:
        keys = [r.key for r in chosen]
        done = self.cache.succeeded(keys)
        last = self.cache.last_outcomes(keys)
        out = {}
        for key in keys:
            if key in done:
                out[key] = Outcome(key, "succeeded", done[key], cached=key in cached)
            elif key in last:
                kind, error_type, body = last[key]
                out[key] = Outcome(key, kind, None, error_type, body)
            else:
                out[key] = Outcome(key, "unsent")
        return out

    def _retryable(self, last: tuple[str, str | None, Any], attempts: int) -> bool:
        kind, error_type, _ = last
        if attempts >= self.max_attempts:
            return False
        return kind == "expired" or (kind == "errored" and error_type in RETRYABLE_ERRORS)

    def _send(self, requests: list[Request]) -> None:
        if self.mode == "direct":
            for r in requests:
                self._direct(r, requests)
            return
        chunks = self._chunks(requests)
        waiting: list[str] = []
        for i, chunk in enumerate(chunks):
            upper = estimate((r.params for r in chunk), batch=True, prices=self.prices).upper_usd
            if not self._fits(upper) and waiting:
                self._collect(waiting)  # finish what is in flight: its actual cost is usually well below the bound
                waiting.clear()
            if not self._fits(upper):
                unsent = sum(len(c) for c in chunks[i:])
                raise BudgetExceededError(self._committed(), upper, float(self.budget or 0), unsent)
            waiting.append(self._create(chunk, upper))
        self._collect(waiting)

    def _chunks(self, requests: list[Request]) -> list[list[Request]]:
        chunks: list[list[Request]] = [[]]
        size = 0
        for r in requests:
            n = len(json.dumps(r.params, ensure_ascii=False).encode()) + 100
            if chunks[-1] and (len(chunks[-1]) >= self.max_batch_requests or size + n > self.max_batch_bytes):
                chunks.append([])
                size = 0
            chunks[-1].append(r)
            size += n
        return [c for c in chunks if c]

    def _create(self, chunk: list[Request], upper: float) -> str:
        try:
            batch = _as_dict(self.client.messages.batches.create(
                requests=[{"custom_id": r.custom_id, "params": r.params} for r in chunk]))
        except Exception as exc:
            raise BatchError(f"Creating a batch of {len(chunk):,} requests failed: {type(exc).__name__}: {exc}. "
                             "Nothing was sent; check the key and the request parameters.") from exc
        self.cache.add_batch(batch, [r.key for r in chunk], upper)
        self._reserved[batch["id"]] = upper
        self.out(f"batch {batch['id']}: {len(chunk):,} requests sent (up to ${upper:.2f})")
        return str(batch["id"])

    def _resume(self, keys: set[str]) -> None:
        """Poll and collect batches an earlier run created but did not collect, when they hold wanted keys."""
        open_ones = [(b, reserved) for b, members, reserved in self.cache.open_batches() if keys & set(members)]
        for batch_id, reserved in open_ones:
            self._reserved[batch_id] = reserved
            self.out(f"batch {batch_id}: resuming a batch an earlier run created")
        if open_ones:
            self._collect([b for b, _ in open_ones])

    def _collect(self, batch_ids: list[str]) -> None:
        """Poll until every batch has ended, then store each one's results."""
        started = time.monotonic()
        pending = list(batch_ids)
        while pending:
            still = []
            for batch_id in pending:
                batch = _as_dict(self.client.messages.batches.retrieve(batch_id))
                self.cache.update_batch(batch)
                if batch.get("processing_status") == "ended":
                    self._results(batch)
                else:
                    still.append(batch_id)
            pending = still
            if pending:
                if time.monotonic() - started > self.max_wait:
                    raise BatchError(f"Batches {pending} had not ended after {self.max_wait:,.0f} s; their results "
                                     "stay on the server: re-run later to collect them (nothing is sent twice).")
                self.sleep(self.poll_interval)

    def _results(self, batch: dict[str, Any]) -> None:
        batch_id = str(batch["id"])
        keys = {r[0][:48]: r[0] for r in self.cache.store.execute(
            "SELECT key FROM batch_requests WHERE batch_id = ?", [batch_id]).fetchall()}
        counts: dict[str, int] = {}
        for line in self.client.messages.batches.results(batch_id):
            item = _as_dict(line)
            key = keys.get(str(item.get("custom_id")))
            if key is None:
                continue  # not a request of ours: nothing to store it under
            result = item.get("result") or {}
            kind = str(result.get("type"))
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "succeeded":
                message = result.get("message") or {}
                cost = cost_of(message.get("model"), message.get("usage"), batch=True, prices=self.prices)
                self.spent += cost or 0.0
                self.cache.add_result(key, kind, message, batch_id=batch_id, usage=message.get("usage"),
                                      cost_usd=cost)
            else:
                error = result.get("error")
                error_type = ((error or {}).get("error") or {}).get("type") if isinstance(error, Mapping) else None
                self.cache.add_result(key, kind, error, batch_id=batch_id, error_type=error_type)
        self.cache.update_batch(batch, collected=True)
        self._reserved.pop(batch_id, None)
        summary = ", ".join(f"{n:,} {kind}" for kind, n in sorted(counts.items())) or "no results"
        self.out(f"batch {batch_id}: ended, {summary}")

    def _direct(self, request: Request, todo: list[Request]) -> None:
        upper = estimate([request.params], batch=False, prices=self.prices).upper_usd
        if not self._fits(upper):
            unsent = len(todo) - todo.index(request)
            raise BudgetExceededError(self._committed(), upper, float(self.budget or 0), unsent)
        from agentlab.chat import call_messages_api

        try:
            message = call_messages_api(self.client, dict(request.params))
        except Exception as exc:  # recorded as the request's outcome; the run goes on with the others
            cause = getattr(exc, "cause", None) or exc.__cause__ or exc
            body = getattr(cause, "body", None)
            error_type = ((body or {}).get("error") or {}).get("type") if isinstance(body, Mapping) else None
            self.cache.add_result(request.key, "errored", body if isinstance(body, Mapping) else str(exc),
                                  error_type=error_type or ("api_error" if _transient(cause) else type(exc).__name__))
            return
        cost = cost_of(message.get("model"), message.get("usage"), batch=False, prices=self.prices)
        self.spent += cost or 0.0
        self.cache.add_result(request.key, "succeeded", message, usage=message.get("usage"), cost_usd=cost)


def _transient(exc: BaseException) -> bool:
    name = type(exc).__name__
    return name in ("APIConnectionError", "APITimeoutError", "InternalServerError", "RateLimitError")
