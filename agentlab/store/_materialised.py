"""A query result already copied out of DuckDB (as Arrow), safe to convert from any thread."""

from __future__ import annotations

from typing import Any

__all__ = ["Materialised"]


class Materialised:
    """A query result already copied out of DuckDB, as Arrow, convertible to pandas."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def to_arrow_table(self) -> Any:
        return self._table

    def df(self) -> Any:
        import pandas as pd

        if self._table is None:
            return pd.DataFrame()
        return self._table.to_pandas()
