"""Keys for keyed context entries (skills, searchable knowledge), exactly as upstream derives them.

When the model writes to a keyed block through ``set_context`` it may pass a title. Upstream turns the title (or,
without one, the content) into a key: a slug of the first 60 UTF-16 code units, plus a 32-bit FNV-1a hash of the
content when there is no title. The same text always gives the same key, so a second write with the same title
updates the entry in place.

Invariants: keys are non-empty and contain only ``[a-z0-9-]``; they never start or end with ``-``; the hash is
computed over UTF-16 code units (an emoji feeds two surrogate units), matching JavaScript's ``charCodeAt``.
"""

from __future__ import annotations

import re
import sys

from agentlab.context._tokens import js_trim

__all__ = ["context_entry_key", "fnv1a32_base36", "slugify"]

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193
_NOT_SLUG = re.compile(r"[^a-z0-9]+")
_DIGITS36 = "0123456789abcdefghijklmnopqrstuvwxyz"


_NATIVE_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def _utf16_units(s: str) -> memoryview:
    # cast("H") reads native-endian 16-bit units, so encode in the machine's own byte order.
    return memoryview(s.encode(_NATIVE_UTF16, "surrogatepass")).cast("H")


def fnv1a32_base36(s: str) -> str:
    """32-bit FNV-1a hash of ``s`` over its UTF-16 code units, written in base 36.

    Args:
        s: Any string; characters above U+FFFF contribute their two surrogate units.

    Returns:
        The unsigned hash in lower-case base 36 (as JavaScript's ``(h >>> 0).toString(36)``), 1 to 7 characters.
    """
    h = _FNV_OFFSET
    for unit in _utf16_units(s):
        # Math.imul keeps the low 32 bits of the product; the mask does the same here.
        h = ((h ^ unit) * _FNV_PRIME) & 0xFFFFFFFF
    if h == 0:
        return "0"
    out = []
    while h:
        h, r = divmod(h, 36)
        out.append(_DIGITS36[r])
    return "".join(reversed(out))


def slugify(s: str) -> str:
    """Upstream's slug: first 60 UTF-16 units, lower-cased, runs of non ``[a-z0-9]`` as ``-``, ends trimmed.

    Args:
        s: The title or content.

    Returns:
        The slug, possibly empty (for example for text with no ASCII letters or digits).
    """
    units = s.encode("utf-16-le", "surrogatepass")[:120]
    # Keep a split surrogate as JavaScript does; it is not [a-z0-9] and becomes "-" (or is trimmed) below.
    head = units.decode("utf-16-le", "surrogatepass").lower()
    slug = _NOT_SLUG.sub("-", head)
    # /^-|-$/g removes at most one dash at each end; runs were already collapsed to one.
    if slug.startswith("-"):
        slug = slug[1:]
    if slug.endswith("-"):
        slug = slug[:-1]
    return slug


def context_entry_key(title: str | None, content: str) -> str:
    """The key under which a keyed ``set_context`` write is stored.

    With a title that is not blank (JavaScript ``trim``), the key is ``slugify(title)``, or ``"entry-" +
    hash(title)`` if the slug is empty. Without one it is ``(slugify(content) or "entry") + "-" + hash(content)``.
    The slug uses the title as given, untrimmed.

    Args:
        title: ``metadata.title`` from the tool call, or None.
        content: The entry's content.

    Returns:
        The key, e.g. ``"pirate-style"`` for the title "Pirate style", ``"no-key-1nprufp"`` for untitled
        "no key", ``"entry-2mzjev"`` for untitled "用户喜欢咖啡".
    """
    if title is not None and js_trim(title):
        return slugify(title) or f"entry-{fnv1a32_base36(title)}"
    return f"{slugify(content) or 'entry'}-{fnv1a32_base36(content)}"
