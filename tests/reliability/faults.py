"""Fault injection at the storage boundary: make the N-th statement inside a transaction fail.

Wrapping the connection that ``Store.transaction`` hands out lets any multi-statement operation of
any layer be interrupted halfway, without knowing or replacing that layer's code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agentlab.store._database import Store


class InjectedFault(RuntimeError):
    """The failure we inject; tests check that it propagated and nothing was stored."""


_WRITES = ("INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "COPY", "TRUNCATE")


def _is_write(args: tuple[Any, ...]) -> bool:
    sql = args[0] if args and isinstance(args[0], str) else ""
    return sql.lstrip().upper().startswith(_WRITES)


def _hit(counter: dict[str, int], args: tuple[Any, ...]) -> None:
    """Count write statements; raise at the chosen one. Reads are not interrupted: a failed read
    after a committed write would report an error for an operation that did happen."""
    if _is_write(args):
        counter["seen"] += 1
        if counter["seen"] == counter["fail_at"]:
            raise InjectedFault(f"injected failure at write statement {counter['seen']}")


class _FailingConnection:
    def __init__(self, conn: Any, counter: dict[str, int]) -> None:
        self._conn = conn
        self._counter = counter

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        _hit(self._counter, args)
        return self._conn.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@contextmanager
def fail_at_statement(store: Store, n: int) -> Iterator[dict[str, int]]:
    """Inside the block, the ``n``-th write statement run through ``store`` (in a transaction or not) raises.

    Yields a counter dict; ``counter["seen"]`` tells how many statements the operation ran.
    """
    counter = {"seen": 0, "fail_at": n}
    original = Store.transaction
    original_execute = Store.execute

    def execute(self: Store, *args: Any, **kwargs: Any) -> Any:
        if self is store:
            _hit(counter, args)
        return original_execute(self, *args, **kwargs)

    @contextmanager
    def transaction(self: Store) -> Iterator[Any]:
        with original(self) as conn:
            yield _FailingConnection(conn, counter) if self is store else conn

    Store.transaction = transaction  # type: ignore[method-assign]
    Store.execute = execute  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        Store.transaction = original  # type: ignore[method-assign]
        Store.execute = original_execute  # type: ignore[method-assign]
