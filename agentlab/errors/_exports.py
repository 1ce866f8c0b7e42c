"""Errors of agent exports and imports (Parquet folders with a manifest)."""

from __future__ import annotations

from agentlab.errors._base import AgentlabError

__all__ = ["ExportDiskFullError", "ExportError", "ExportMismatchError"]


class ExportError(AgentlabError):
    """An agent export (Parquet folder and manifest) that cannot be written, read or restored here."""


class ExportDiskFullError(ExportError):
    """The disk ran out of space while an export folder or an imported agent file was written.

    ``path`` is the destination that was being written. Nothing there changed: an earlier export in that folder
    is intact, and an import created no agent file.
    """

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"The disk holding {path} is full ({detail}). Nothing there was changed. Free some space on that "
            "disk, or choose a destination on another one, and try again."
        )


class ExportMismatchError(ExportError):
    """An export's Parquet file does not hold what its manifest says (rows or columns): damaged or edited.

    ``table`` names the table, ``what`` is ``"rows"`` or ``"columns"``, ``expected`` comes from the manifest and
    ``found`` from the file. It is raised before anything is written.
    """

    def __init__(self, table: str, file: str, what: str, expected: object, found: object) -> None:
        self.table = table
        self.what = what
        self.expected = expected
        self.found = found
        super().__init__(
            f"Table {table!r}: the manifest says {what} {expected!r} but {file} holds {found!r}. The export is "
            "damaged or was edited after it was written; export the agent again."
        )
