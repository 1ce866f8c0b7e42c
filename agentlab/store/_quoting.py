"""Quoting names and text into DuckDB SQL, for the statements that take no bound parameters (ATTACH, COPY, SET,
identifiers)."""

from __future__ import annotations

__all__ = ["sql_ident", "sql_literal"]


def sql_literal(text: str) -> str:
    """``text`` as a SQL string literal (single quotes, inner quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def sql_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (double quotes, inner quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'
