"""Message columns for :mod:`agentlab.frames`: parts read by DuckDB, token estimates vectorised over Arrow buffers.

Each job is done where it is cheapest:

* **Parts** are read by DuckDB (``json_transform`` into typed structs, then one list lambda, :data:`PARTS`, in the query
  ``agentlab.session.duckdb._messages_table.MESSAGES_FRAME`` runs):
  the kinds of parts, whether each is searchable text, and the strings the token estimate measures. Tool calls
  and their results are joined in SQL too (``_messages_table.TOOL_CALLS``, reading :data:`TOOL_SCHEMA`).
* **Columns per message** (:func:`part_columns`) are assembled from the flattened parts with Arrow list arrays.
* **Token estimates** are computed on those strings with numpy over the Arrow UTF-8 buffers
  (:func:`string_tokens`): DuckDB's regular expressions, and even Arrow's whitespace splitting, cost several times
  more CPU on long texts (measured here over 100,000 texts: 5.7 s of CPU for DuckDB's astral-character count).
  Strings holding a non-ASCII JavaScript space, and messages whose JSON numbers or keys DuckDB prints differently
  from ``JSON.stringify``, fall back to :mod:`agentlab.context._tokens`.

Invariant: the ``tokens`` column of :func:`part_columns` equals
:func:`agentlab.context.estimate_message_tokens` of each message exactly (the tests compare them on random
text, every JavaScript space and the JSON number forms).
"""

from __future__ import annotations

import json
from typing import Any

from agentlab.context import estimate_message_tokens, estimate_string_tokens

# Fields of a part that the estimate or the text column read, all as VARCHAR: json_transform then gives a string
# value unquoted and any other value as its JSON text, which is exactly what estimate_value_tokens measures.
PARTS_SCHEMA = (
    '{"parts":[{"type":"VARCHAR","text":"VARCHAR","reasoning":"VARCHAR","thinking":"VARCHAR",'
    '"input":"VARCHAR","output":"VARCHAR","result":"VARCHAR","content":"VARCHAR"}]}'
)


def json_text(x: str) -> str:
    # For JSON-typed fields: a string as is, anything else as its JSON text, null as nothing.
    return (f"CASE WHEN {x} IS NULL THEN NULL WHEN json_type({x}) = 'VARCHAR' THEN {x}->>'$' "
            f"ELSE CAST({x} AS VARCHAR) END")


def _risky(x: str) -> str:
    # DuckDB prints 1.0 as "1.0", 1e20 with ".0" and keeps "2" keys in place, where JSON.stringify prints "1",
    # plain digits and integer keys first. A value that may be such a number, object or array (it starts like
    # one and holds a decimal point, an exponent, a digit key or a long number) is re-estimated in Python; a
    # string that merely looks like one only costs that slower path.
    return (f"({x} IS NOT NULL AND regexp_matches({x}, '^[-\\[{{0-9]') AND "
            f"regexp_matches({x}, '[0-9][.eE]|\"[0-9]+\":|[0-9]{{16}}'))")


# One struct per part, in one lambda (several list lambdas cost DuckDB twice the CPU): the kind, the strings the
# estimate measures (m2 only for AI-SDK tool parts, which count input and output), whether it is searchable text,
# and whether DuckDB's JSON text may differ from JSON.stringify. m1/m2 mirror tokens._part_tokens case by case.
PARTS = f"""list_transform(parts, lambda p: {{
        'kind': p.type,
        'm1': CASE WHEN p.type IN ('text', 'reasoning') THEN coalesce(p.text, p.reasoning)
                   WHEN p.type = 'dynamic-tool' OR starts_with(p.type, 'tool-') THEN p.input
                   WHEN p.type = 'thinking' THEN p.thinking
                   WHEN p.type = 'tool_use' THEN p.input
                   WHEN p.type = 'tool_result' THEN p.content
                   ELSE coalesce(p.text, p.result) END,
        'm2': CASE WHEN p.type = 'dynamic-tool' OR starts_with(p.type, 'tool-') THEN coalesce(p.output, p.result) END,
        'is_text': p.type = 'text' AND p.text IS NOT NULL,
        'risky': {_risky('p.input')} OR {_risky('p.output')} OR {_risky('p.result')} OR {_risky('p.content')}
    }})"""

# A part holding "text": null counts 0 upstream even when it has a result; the fast path cannot see the key.
TEXT_NULL = """contains(content, '"text":null')"""

_ASCII_SPACE = bytes([9, 10, 11, 12, 13, 32])  # JavaScript's \s within ASCII (not \x1c-\x1f)


def _string_buffers(values: Any) -> tuple[Any, Any, Any]:
    """(offsets rebased to 0, UTF-8 bytes, validity) of an Arrow string array, as numpy arrays."""
    import numpy as np
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], pa.string())
    if values.type not in (pa.string(), pa.large_string()):
        values = values.cast(pa.large_string())
    n = len(values)
    _, offsets_buf, data_buf = values.buffers()
    wide = np.int64 if values.type == pa.large_string() else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=wide)[values.offset:values.offset + n + 1].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8)[offsets[0]:offsets[-1]] if data_buf is not None and n \
        else np.zeros(0, dtype=np.uint8)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    return offsets - offsets[0], data, valid


def _exotic_spaces(data: Any) -> Any:
    """Byte positions of the non-ASCII characters in JavaScript's whitespace class (U+00A0, U+1680,
    U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF), found from their UTF-8 lead bytes."""
    import numpy as np

    high = np.flatnonzero(data >= 0xC2)  # lead bytes of 2-4 byte characters; few in most texts
    first = data[high]
    lead = high[(first == 0xC2) | ((first >= 0xE1) & (first <= 0xE3)) | (first == 0xEF)]
    if not lead.size:
        return lead
    padded = np.concatenate([data, np.zeros(2, dtype=np.uint8)])
    b0, b1, b2 = padded[lead], padded[lead + 1], padded[lead + 2]
    hit = ((b0 == 0xC2) & (b1 == 0xA0)) | ((b0 == 0xE1) & (b1 == 0x9A) & (b2 == 0x80)) \
        | ((b0 == 0xE2) & (b1 == 0x80) & (((b2 >= 0x80) & (b2 <= 0x8A)) | (b2 == 0xA8) | (b2 == 0xA9)
                                           | (b2 == 0xAF))) \
        | ((b0 == 0xE2) & (b1 == 0x81) & (b2 == 0x9F)) | ((b0 == 0xE3) & (b1 == 0x80) & (b2 == 0x80)) \
        | ((b0 == 0xEF) & (b1 == 0xBB) & (b2 == 0xBF))
    return lead[hit]


def string_tokens(values: Any) -> Any:
    """``estimate_string_tokens`` of every string of an Arrow string array, vectorised over the UTF-8 bytes.

    UTF-16 length = code points (bytes that are not continuation bytes) plus one per 4-byte character; words =
    non-space bytes that follow a space or start the string, spaces being JavaScript's ASCII whitespace. The rare
    strings holding a non-ASCII JavaScript space are estimated by
    :func:`agentlab.context.estimate_string_tokens`.

    Args:
        values: A ``pyarrow`` string array (nulls count 0).

    Returns:
        A numpy int64 array, equal element by element to :func:`agentlab.context.estimate_string_tokens`.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    offsets, data, valid = _string_buffers(values)
    n = len(offsets) - 1
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    lengths = np.diff(offsets)
    starts = offsets[:-1]
    nonempty = (lengths > 0) & valid
    if not data.size:
        return np.zeros(n, dtype=np.int64)
    space = ((data - np.uint8(9)) <= 4) | (data == 32)  # \t \n \v \f \r and the space
    previous = np.empty_like(space)
    previous[0] = True
    previous[1:] = space[:-1]
    previous[starts[nonempty]] = True  # a string's first byte starts a word unless it is a space
    # One extra element lets the empty or null strings at the end start at len(data): clamping their start to
    # the last byte (as before) cut that byte off the string before them (" 1" then a null counted no word).
    starts_word = np.append(~space & previous, False)
    words = np.where(nonempty, np.add.reduceat(starts_word, starts, dtype=np.int64), 0)
    chars = pc.utf8_length(values).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    astral = np.flatnonzero(data >= 0xF0)  # 4-byte characters count two UTF-16 units
    if astral.size:
        chars += np.bincount(np.searchsorted(offsets, astral, "right") - 1, minlength=n)
    out = np.ceil(np.maximum(chars / 4, words * 1.3)).astype(np.int64)
    exotic = _exotic_spaces(data)
    for i in np.unique(np.searchsorted(offsets, exotic, "right") - 1).tolist():
        out[i] = estimate_string_tokens(values[i].as_py())
    return out


def part_columns(parts: Any, text_null: Any, contents: Any) -> dict[str, Any]:
    """Message columns from the ``PARTS`` list column: ``n_parts``, ``part_kinds``, ``text`` and ``tokens``.

    Args:
        parts: Arrow list<struct<kind, m1, m2, is_text, risky>> column, one list per message.
        text_null: Arrow boolean column, the ``TEXT_NULL`` test per message.
        contents: A function giving the stored JSON of message rows (a list of row indexes), for the messages
            the fast path cannot estimate exactly.

    Returns:
        Arrow arrays by name; ``tokens`` equals ``estimate_message_tokens([message])`` of each row.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(parts, pa.ChunkedArray):
        parts = parts.combine_chunks() if parts.num_chunks else pa.array([], parts.type)
    n = len(parts)
    parts = pc.fill_null(parts, pa.scalar([], parts.type)) if parts.null_count else parts
    lengths = pc.list_value_length(parts).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(parts)
    owners = np.repeat(np.arange(n, dtype=np.int64), lengths)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    weights = string_tokens(flat.field("m1")) + string_tokens(flat.field("m2"))
    tokens = (np.bincount(owners, weights=weights, minlength=n) if len(flat) else np.zeros(n)).astype(np.int64) + 4
    is_text = flat.field("is_text").fill_null(False).to_numpy(zero_copy_only=False)
    text_counts = np.bincount(owners[is_text], minlength=n)
    text_offsets = pa.array(np.concatenate([[0], np.cumsum(text_counts)]).astype(np.int32))
    texts = pa.ListArray.from_arrays(text_offsets, flat.field("m1").filter(pa.array(is_text)))
    risky = flat.field("risky").fill_null(False).to_numpy(zero_copy_only=False)
    redo = np.union1d(np.unique(owners[risky]), np.flatnonzero(text_null.to_numpy(zero_copy_only=False)))
    if redo.size:
        for i, content in zip(redo.tolist(), contents(redo.tolist())):
            tokens[i] = estimate_message_tokens([json.loads(content)])
    return {"n_parts": pa.array(lengths), "part_kinds": pa.ListArray.from_arrays(offsets, flat.field("kind")),
            "text": pc.binary_join(texts, " "), "tokens": pa.array(tokens)}


# The fields of a message that the tool-calls query reads.
TOOL_SCHEMA = (
    '{"metadata":"JSON","parts":[{"type":"VARCHAR","id":"VARCHAR","name":"VARCHAR","input":"JSON",'
    '"tool_use_id":"VARCHAR","content":"JSON","is_error":"BOOLEAN","toolCallId":"VARCHAR","toolName":"VARCHAR",'
    '"output":"JSON","result":"JSON","state":"VARCHAR","errorText":"VARCHAR"}]}'
)
