"""Agent names and where their files live.

An agent is found by (class, name, root). Its one DuckDB file sits at
``<root>/<kebab(class name)>/<file_name_for(name)>.duckdb``.

Invariants:

* Any Unicode name of 1 to :data:`MAX_NAME_LENGTH` characters without control characters is
  accepted; anything else raises :class:`InvalidNameError`.
* The file name is a short readable slug plus a 128-bit hash of the exact name, so distinct names
  (including ones that differ only in case or normalisation) get distinct files, and no name can
  produce a path separator, ``.``/``..`` or a name too long for the file system. The agent also
  records its name inside the file and refuses to open a file recorded under another name.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from pathlib import Path

from agentlab.errors import InvalidNameError

MAX_NAME_LENGTH = 512
DEFAULT_ROOT = "agentlab-data"
HOME_ENV = "AGENTLAB_HOME"

_SLUG_CHARS = re.compile(r"[^a-z0-9]+")


def kebab_case(class_name: str) -> str:
    """Upstream's kebab-case of a class name: ``ChatAgent`` -> ``chat-agent``, ``MY_AGENT`` -> ``my-agent``."""
    if class_name.isupper() or not any(c.isalpha() for c in class_name):
        out = class_name.lower().replace("_", "-")
    else:
        out = "".join("-" + c.lower() if c.isupper() else c for c in class_name).replace("_", "-")
    return out.strip("-")


def validate_name(name: object, what: str = "agent name") -> str:
    """Return ``name`` if it is usable, else raise :class:`InvalidNameError` saying why."""
    if not isinstance(name, str):
        raise InvalidNameError(f"The {what} must be a string, not {type(name).__name__}.")
    if not name:
        raise InvalidNameError(f"The {what} is empty; use a non-empty name such as a user id.")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidNameError(
            f"The {what} has {len(name)} characters; at most {MAX_NAME_LENGTH} are allowed."
        )
    for i, char in enumerate(name):
        if unicodedata.category(char) == "Cc":
            raise InvalidNameError(
                f"The {what} contains the control character {char!r} at position {i}; remove it."
            )
        if 0xD800 <= ord(char) <= 0xDFFF:
            raise InvalidNameError(
                f"The {what} contains a lone surrogate {char!r} at position {i}; it is not valid Unicode."
            )
    return name


def file_name_for(name: str) -> str:
    """The file name (without folder) of the agent called ``name``."""
    validate_name(name)
    slug = _SLUG_CHARS.sub("-", name.lower()).strip("-")[:40].strip("-") or "agent"
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
    return f"{slug}-{digest}.duckdb"


def resolve_root(root: str | os.PathLike[str] | None) -> Path:
    """The root folder: the argument, else ``$AGENTLAB_HOME``, else ``./agentlab-data``."""
    if root is None:
        root = os.environ.get(HOME_ENV) or DEFAULT_ROOT
    return Path(root).expanduser().resolve()


def agent_path(class_name: str, name: str, root: str | os.PathLike[str] | None = None) -> Path:
    """Where the agent ``name`` of class ``class_name`` keeps its DuckDB file."""
    folder = resolve_root(root) / (kebab_case(class_name) or "agent")
    return folder / file_name_for(name)
