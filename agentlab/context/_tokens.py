"""Token estimates: the upstream heuristic, not a tokenizer.

Upstream (Cloudflare Agents, ``utils/tokens.ts``) never loads a tokenizer. It takes the larger of two cheap
guesses, characters / 4 and words x 1.3, and adds 4 tokens of framing per message. This module re-creates that
heuristic exactly, including the parts that depend on JavaScript semantics:

* String length is counted in UTF-16 code units (``utf16_len``), so an emoji counts 2, as ``String.length`` does.
* Words are runs of non-whitespace where *whitespace* is JavaScript's ``\\s`` set (``JS_WHITESPACE``), which is not
  Python's: Python also splits on U+001C..U+001F and U+0085, and does not split on U+FEFF.
* Values that are not strings are measured through ``js_stringify``, a ``JSON.stringify`` equivalent (compact,
  non-ASCII kept, integral floats printed as integers, integer-like keys first, non-finite numbers as ``null``).

Invariants: every estimate is a non-negative ``int``; nothing here mutates its input; the functions are pure, so the
same input always gives the same count.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence, Set
from decimal import Decimal
from json.encoder import encode_basestring as _quote  # JSON string literal, non-ASCII kept
from typing import Any, Protocol

__all__ = [
    "CHARS_PER_TOKEN",
    "JS_WHITESPACE",
    "TOKENS_PER_MESSAGE",
    "WORDS_TOKEN_MULTIPLIER",
    "TokenCounter",
    "estimate_message_tokens",
    "estimate_string_tokens",
    "estimate_value_tokens",
    "js_number_to_string",
    "js_stringify",
    "js_trim",
    "normalize_count",
    "utf16_len",
    "utf16_prefix",
]

CHARS_PER_TOKEN = 4
WORDS_TOKEN_MULTIPLIER = 1.3
TOKENS_PER_MESSAGE = 4

# ECMAScript WhiteSpace + LineTerminator: the set matched by /\s/ and removed by String.prototype.trim.
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_JS_WORD = re.compile("[^" + re.escape(JS_WHITESPACE) + "]+")
# The only characters on which str.isspace() and JavaScript's \s disagree (checked over all code points).
_SPACE_DISAGREEMENT = re.compile("[\x1c-\x1f\x85\ufeff]")


def utf16_len(s: str) -> int:
    """Length of ``s`` in UTF-16 code units, i.e. JavaScript's ``s.length``.

    Args:
        s: Any Python string (lone surrogates are allowed and count 1).

    Returns:
        The number of UTF-16 code units: characters above U+FFFF count 2.
    """
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def utf16_prefix(s: str, units: int) -> str:
    """The first ``units`` UTF-16 code units of ``s``, like JavaScript's ``s.slice(0, units)``.

    One difference on purpose: if the cut would split a surrogate pair, the lone high surrogate is dropped, because a
    Python string holding one cannot be encoded to UTF-8 (DuckDB, JSON files and HTTP bodies would all fail).

    Args:
        s: The string to cut.
        units: How many UTF-16 code units to keep (negative counts as 0).

    Returns:
        The prefix, at most ``units`` code units long.
    """
    units = max(0, units)
    if s.isascii():
        return s[:units]
    head = s.encode("utf-16-le", "surrogatepass")[: 2 * units].decode("utf-16-le", "surrogatepass")
    if head and "\ud800" <= head[-1] <= "\udbff" and utf16_len(s) > units:
        head = head[:-1]
    return head


def js_trim(s: str) -> str:
    """JavaScript's ``String.prototype.trim``: strip ``JS_WHITESPACE`` from both ends."""
    return s.strip(JS_WHITESPACE)


def js_number_to_string(x: float | int) -> str:
    """Format a number the way JavaScript's ``String(x)`` does (``1.0`` -> ``"1"``, ``1e-7`` -> ``"1e-7"``)."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"  # JavaScript prints -0 as "0"
    sign = "-" if x < 0 else ""
    # repr() gives the shortest digits that round-trip, which is also what ECMAScript Number::toString uses.
    _, digit_tuple, exp = Decimal(repr(abs(x))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    exp = int(exp) + (len(digit_tuple) - len(digits))
    k = len(digits)
    n = k + exp  # value = 0.digits x 10^n
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        body = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + body


def _is_array_index(key: str) -> bool:
    # JavaScript objects list canonical array-index keys first, ascending, whatever the insertion order.
    return key.isdigit() and key.isascii() and (key == "0" or key[0] != "0") and int(key) < 4294967295


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, (bool, int, float)):
        return js_number_to_string(key)
    return str(key)


def _dump_object(value: Mapping[Any, Any]) -> str:
    items = [(_key_text(k), v) for k, v in value.items()]
    if any(k[:1].isdigit() and _is_array_index(k) for k, _ in items):
        index_items = sorted((kv for kv in items if _is_array_index(kv[0])), key=lambda kv: int(kv[0]))
        items = index_items + [kv for kv in items if not _is_array_index(kv[0])]
    return "{" + ",".join(_quote(k) + ":" + _dump(v) for k, v in items) + "}"


def _dump(value: Any) -> str:
    # Exact type checks first: this runs per node of every tool input, and ABC isinstance checks are slow.
    kind = type(value)
    if kind is str:
        return _quote(value)
    if kind is dict:
        return _dump_object(value)
    if kind is list or kind is tuple:
        return "[" + ",".join([_dump(v) for v in value]) + "]"
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is float:
        return js_number_to_string(value) if math.isfinite(value) else "null"
    if isinstance(value, str):
        return _quote(str(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        f = float(value)
        return js_number_to_string(f) if math.isfinite(f) else "null"
    if isinstance(value, Mapping):
        return _dump_object(value)
    if isinstance(value, (Sequence, Set)) and not isinstance(value, (bytes, bytearray)):
        return "[" + ",".join([_dump(v) for v in value]) + "]"
    if hasattr(value, "isoformat"):  # dates serialise through toJSON() upstream
        return _quote(value.isoformat())
    return _quote(str(value))


def js_stringify(value: Any) -> str:
    """Compact JSON text of ``value``, as JavaScript's ``JSON.stringify(value)`` would write it.

    Equivalent to ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)`` for ordinary JSON data, plus the
    JavaScript details that change lengths: integral floats print without ``.0``, tiny and huge floats use
    JavaScript's exponent rules, NaN and infinities become ``null``, and integer-like object keys come first.

    Args:
        value: Any JSON-like value (dicts, lists, tuples, str, int, float, bool, None). Other objects are written as
            their ``str()`` in quotes, and dates as ISO strings.

    Returns:
        The JSON text.
    """
    return _dump(value)


def estimate_string_tokens(text: str | None) -> int:
    """Estimate tokens in a string: ``ceil(max(utf16_len / 4, words * 1.3))``, 0 for empty or None.

    Args:
        text: The text; ``None`` and ``""`` give 0.

    Returns:
        The estimate, a non-negative int. ``"Hello world"`` gives 3 and ``"x" * 400`` gives 100.
    """
    if not text:
        return 0
    char_estimate = utf16_len(text) / CHARS_PER_TOKEN
    # str.split() is several times faster than the regex and gives the same count unless a disputed character occurs.
    words = len(text.split()) if _SPACE_DISAGREEMENT.search(text) is None else len(_JS_WORD.findall(text))
    word_estimate = words * WORDS_TOKEN_MULTIPLIER
    return math.ceil(max(char_estimate, word_estimate))


def estimate_value_tokens(value: Any) -> int:
    """Estimate tokens of any value: strings directly, ``None`` as 0, anything else through ``js_stringify``."""
    if value is None:
        return 0
    if isinstance(value, str):
        return estimate_string_tokens(value)
    return estimate_string_tokens(js_stringify(value))


def _first_defined(part: Mapping[str, Any], *keys: str) -> Any:
    # JavaScript's `a ?? b`: the first value that is neither null nor undefined.
    for key in keys:
        value = part.get(key)
        if value is not None:
            return value
    return None


def _part_tokens(part: Mapping[str, Any]) -> int:
    kind = part.get("type")
    kind = kind if isinstance(kind, str) else ""
    if kind in ("text", "reasoning"):
        return estimate_value_tokens(_first_defined(part, "text", "reasoning"))
    if kind.startswith("tool-") or kind == "dynamic-tool":
        output = _first_defined(part, "output", "result")
        return estimate_value_tokens(part.get("input")) + estimate_value_tokens(output)
    # Anthropic content blocks, which upstream never sees: count the field that carries the words.
    if kind == "thinking":
        return estimate_value_tokens(part.get("thinking"))
    if kind == "tool_use":
        return estimate_value_tokens(part.get("input"))
    if kind == "tool_result":
        return estimate_value_tokens(part.get("content"))
    # Upstream checks `!== undefined`, so a key holding null still wins (and counts 0).
    if "text" in part:
        return estimate_value_tokens(part["text"])
    if "result" in part:
        return estimate_value_tokens(part["result"])
    return 0


def estimate_message_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Estimate tokens of a list of messages: 4 per message plus an estimate per part.

    Parts are read in both shapes: upstream AI-SDK parts (``text``, ``reasoning``, ``tool-<name>``,
    ``dynamic-tool``) and Anthropic blocks (``thinking`` counts its ``thinking`` text, ``tool_use`` its ``input``,
    ``tool_result`` its ``content``). Any other part counts its ``text`` if present, else its ``result``; images and
    redacted thinking count 0.

    Args:
        messages: Message dicts with a ``parts`` list; a missing ``parts`` counts as empty.

    Returns:
        The estimate. ``[{"role": "user", "parts": [{"type": "text", "text": "Hello world"}]}]`` gives 7.
    """
    total = 0
    for message in messages:
        total += TOKENS_PER_MESSAGE
        for part in message.get("parts") or ():
            if isinstance(part, Mapping):
                total += _part_tokens(part)
    return total


class TokenCounter(Protocol):
    """A replacement for the built-in estimate, e.g. a real tokenizer or a count_tokens call.

    Called with keyword arguments only; the Session passes the overlay-applied history, the frozen system prompt and
    the loaded context blocks. The compactor calls it per message with ``system_prompt=""`` and
    ``context_blocks=[]``. Any number may come back; ``normalize_count`` turns it into a usable count.
    """

    def __call__(self, *, messages: list[dict[str, Any]], system_prompt: str, context_blocks: list[Any]) -> float: ...


def normalize_count(x: Any) -> int:
    """Clamp a counter's answer like upstream: ``max(0, ceil(x))`` for a finite number, else 0.

    Booleans, strings and other non-numbers give 0, as ``Number.isFinite`` is false for them.
    """
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return 0
    f = float(x)
    if not math.isfinite(f):
        return 0
    return max(0, math.ceil(f))
