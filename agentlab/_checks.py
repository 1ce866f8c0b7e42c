"""Argument checks shared by the public API: counts, amounts and text that can be stored as they are.

Each check returns the value in its plain Python type (``int``, ``float``, ``str``) or raises
:class:`~agentlab.errors.InvalidArgumentError` naming the argument, before anything is written. They exist
because DuckDB and the JSON encoder refuse such values only halfway through a write, with their own errors
(``ConversionException``, ``UnicodeEncodeError``), or store them silently (NaN in a DOUBLE column).
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from typing import Any

from agentlab.errors import InvalidArgumentError

INT64_MAX = 2**63 - 1
"""The largest value a DuckDB ``BIGINT`` column holds."""


def check_count(name: str, value: Any, *, maximum: int | None = INT64_MAX) -> int:
    """``value`` as an ``int`` in ``0 .. maximum``: a whole number (bool excluded); by default one that a BIGINT
    column can hold, with ``maximum=None`` any size.

    Raises:
        InvalidArgumentError: Not an integer (floats such as 1.5 or NaN included), negative, or above ``maximum``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"{name} must be a whole number of 0 or more, not {value!r}.")
    number = int(value)
    if number < 0:
        raise InvalidArgumentError(f"{name} must be 0 or more, not {number:,}.")
    if maximum is not None and number > maximum:
        raise InvalidArgumentError(f"{name} must be between 0 and {maximum:,}, not {number:,}.")
    return number


def check_amount(name: str, value: Any) -> float:
    """``value`` as a finite ``float`` of 0 or more (an int is accepted; bool is not).

    Raises:
        InvalidArgumentError: Not a real number, NaN, infinite or negative.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name} must be a number of 0 or more, not {value!r}.")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise InvalidArgumentError(f"{name} must be a finite number of 0 or more, not {number!r}.")
    return number


def check_text(name: str, value: Any, *, empty: bool = True) -> str:
    """``value`` as a ``str`` that encodes to UTF-8 (no lone surrogates); ``empty=False`` also refuses ``""``.

    Raises:
        InvalidArgumentError: Not a string, empty when ``empty`` is False, or holding a lone surrogate.
    """
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string, not {type(value).__name__}.")
    if not empty and not value:
        raise InvalidArgumentError(f"{name} must be a non-empty string.")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                f"{name} is not valid text: it holds a lone surrogate ({value[exc.start]!r} at position "
                f"{exc.start}), which UTF-8 cannot store. Pass the text decoded properly."
            ) from None
    return str(value)


def metadata_json(metadata: Mapping[str, Any] | None, key: str) -> str | None:
    """``metadata`` as JSON object text (None for no metadata), or a TypeError naming ``key``."""
    if metadata is None or metadata == {}:
        return None
    if not isinstance(metadata, Mapping):
        raise TypeError(f"Metadata of {key!r} must be a dict or None, not {type(metadata).__name__}.")
    try:
        return json.dumps(dict(metadata), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"Metadata of {key!r} is not JSON ({exc}); use str, int, finite float, bool, None, lists and dicts."
        ) from None
