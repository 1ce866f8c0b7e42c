"""What Claude requests cost: list prices per model, the batch discount, and estimates made before sending.

Prices are USD per million tokens as listed on platform.claude.com's model pages (read 2026-12):
Haiku 5.5 $0.10 in / $0.50 out for prompts up to 100,000 tokens ($0.50 / $2.50 above), Sonnet 5.5 and 5
$2 / $10, Opus 5.5 $4 / $20, Opus 5 $5 / $25, Haiku 4.5 $1 / $5. The Message Batches API halves input and
output. A 5-minute cache write costs 1.25x the input price and a cache read 0.1x. Prices change: pass your own
``prices={"model-prefix": Price(...)}`` where these are out of date, and a model with no price raises
:class:`~agentlab.errors.PricingError` rather than being estimated at zero.

Estimates count input tokens with :func:`agentlab.context.estimate_string_tokens` over the request's texts (the
upstream heuristic, not Claude's tokenizer: newer Claude models count about 30% more tokens for the same text,
so the upper bound adds 30%) and output at ``max_tokens``, the most a request can cost.

Invariant: every function here is pure; nothing is sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentlab.errors import PricingError

__all__ = ["BATCH_DISCOUNT", "PRICES", "Estimate", "Price", "cost_of", "estimate", "price_for", "request_tokens"]

BATCH_DISCOUNT = 0.5
TOKENIZER_MARGIN = 1.3  # newer Claude tokenizers count up to ~30% more tokens than the heuristic


@dataclass(frozen=True)
class Price:
    """USD per million tokens; the ``long_*`` prices apply to prompts above ``long_above`` input tokens."""

    input: float
    output: float
    long_input: float | None = None
    long_output: float | None = None
    long_above: int = 100_000

    def rates(self, prompt_tokens: int) -> tuple[float, float]:
        """``(input, output)`` USD per million tokens for a prompt of this size."""
        if self.long_input is not None and prompt_tokens > self.long_above:
            return self.long_input, self.long_output if self.long_output is not None else self.output
        return self.input, self.output


PRICES: dict[str, Price] = {
    "claude-haiku-5-5": Price(0.10, 0.50, long_input=0.50, long_output=2.50),
    "claude-sonnet-5-5": Price(2.0, 10.0),
    "claude-sonnet-5": Price(2.0, 10.0),
    "claude-opus-5-5": Price(4.0, 20.0),
    "claude-opus-5": Price(5.0, 25.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
}


def price_for(model: str, prices: Mapping[str, Price] | None = None) -> Price:
    """The price of ``model``: the entry whose key is the longest prefix of the model id.

    Raises:
        PricingError: No entry matches (the message says how to give one).
    """
    table = {**PRICES, **(prices or {})}
    matches = [key for key in table if model == key or model.startswith((key + "-", key + "@"))]
    if not matches:
        raise PricingError(f"No price is known for model {model!r}, so the cost cannot be estimated before sending. "
                           "Pass prices={'" + model + "': Price(input, output)} (USD per million tokens), or on "
                           "the command line --price IN,OUT.")
    return table[max(matches, key=len)]


def cost_of(model: str | None, usage: Mapping[str, Any] | None, *, batch: bool,
            prices: Mapping[str, Price] | None = None) -> float | None:
    """USD cost of one response's ``usage``, or None when the model has no known price."""
    if not model or usage is None:
        return None
    try:
        price = price_for(model, prices)
    except PricingError:
        return None
    read = int(usage.get("cache_read_input_tokens") or 0)
    write = int(usage.get("cache_creation_input_tokens") or 0)
    plain = int(usage.get("input_tokens") or 0)
    rate_in, rate_out = price.rates(plain + read + write)
    total = (plain + 1.25 * write + 0.1 * read) * rate_in + int(usage.get("output_tokens") or 0) * rate_out
    return total / 1e6 * (BATCH_DISCOUNT if batch else 1.0)


def _texts(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key in ("text", "content", "description") or isinstance(item, (list, dict)):
                yield from _texts(item)
            elif key == "input_schema":
                yield json.dumps(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


def request_tokens(params: Mapping[str, Any]) -> int:
    """Estimated input tokens of a Messages API body: its system, tool and message texts, 4 per message."""
    from agentlab.context import estimate_string_tokens

    parts = [*_texts(params.get("system")), *_texts(params.get("tools")), *_texts(params.get("messages"))]
    return sum(estimate_string_tokens(p) for p in parts) + 4 * len(params.get("messages") or ())


@dataclass(frozen=True)
class Estimate:
    """What sending some requests may cost.

    Attributes:
        requests: How many.
        input_tokens: Estimated input tokens in all (the heuristic).
        max_output_tokens: The sum of their ``max_tokens``.
        expected_usd: Input at the estimate, output at ``expected_output`` tokens per request.
        upper_usd: Input at the estimate plus 30%, output at ``max_tokens``: the most they can cost.
        batch: Priced at the batch discount.
    """

    requests: int
    input_tokens: int
    max_output_tokens: int
    expected_usd: float
    upper_usd: float
    batch: bool

    def __str__(self) -> str:
        where = "Message Batches (50% off)" if self.batch else "Messages API"
        return (f"{self.requests:,} requests via {where}: ~{self.input_tokens:,} input tokens, at most "
                f"{self.max_output_tokens:,} output tokens; expected ${self.expected_usd:.2f}, at most "
                f"${self.upper_usd:.2f}")

    def __add__(self, other: Estimate) -> Estimate:
        return Estimate(self.requests + other.requests, self.input_tokens + other.input_tokens,
                        self.max_output_tokens + other.max_output_tokens, self.expected_usd + other.expected_usd,
                        self.upper_usd + other.upper_usd, self.batch and other.batch)


def estimate(requests: Iterable[Mapping[str, Any]], *, batch: bool, expected_output: int = 40,
             prices: Mapping[str, Price] | None = None) -> Estimate:
    """The :class:`Estimate` of sending these Messages API bodies.

    Args:
        requests: Request bodies (``model``, ``max_tokens``, ``system``, ``messages`` ...).
        batch: Priced at the Message Batches discount.
        expected_output: Output tokens a request is expected to use (short answers and one-word labels).
        prices: Extra or replacement prices.

    Raises:
        PricingError: A request's model has no price.
    """
    count = tokens = max_out = 0
    expected = upper = 0.0
    factor = BATCH_DISCOUNT if batch else 1.0
    for params in requests:
        price = price_for(str(params.get("model")), prices)
        n_in = request_tokens(params)
        n_out = int(params.get("max_tokens") or 0)
        rate_in, rate_out = price.rates(n_in)
        high_in, high_out = price.rates(int(n_in * TOKENIZER_MARGIN))
        count += 1
        tokens += n_in
        max_out += n_out
        expected += (n_in * rate_in + min(expected_output, n_out) * rate_out) / 1e6 * factor
        upper += (n_in * TOKENIZER_MARGIN * high_in + n_out * high_out) / 1e6 * factor
    return Estimate(count, tokens, max_out, expected, upper, batch)
