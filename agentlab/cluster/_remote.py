"""What every part of agentlab.cluster shares: reaching Ray, carrying errors out of actors, reading memory.

Ray is imported here, inside functions, and nowhere at module level, so ``import agentlab`` never loads it.

Errors: an exception raised in an actor is caught there and sent back as a :class:`Failure` (its class, ``args``,
attributes and traceback text), not left to Ray. Ray would wrap it in a ``RayTaskError`` and rebuild the original
by calling its class with ``args``, which garbles agentlab's errors (their ``__init__`` takes other arguments than
the message they store). :meth:`Failure.rebuild` makes an instance of the same class without calling
``__init__``, so the caller gets the exact type, message and attributes (``path``, ``id``, ``query``...), with the
remote traceback as a note.
"""

from __future__ import annotations

import importlib
import logging
import pickle
import traceback
from dataclasses import dataclass, field
from typing import Any

from agentlab.errors import ClusterError, RayNotInstalledError

__all__ = ["Failure", "dispatch", "ensure_ray", "guarded", "process_memory", "require_ray", "unwrap"]

INSTALL_HINT = "pip install 'agentlab[ray]' (Ray 2.60.0)"


def require_ray() -> Any:
    """The ``ray`` module.

    Raises:
        RayNotInstalledError: Ray is not installed.
    """
    try:
        import ray
    except ImportError as exc:
        raise RayNotInstalledError(f"This needs Ray, which is not installed: {INSTALL_HINT}.") from exc
    return ray


def ensure_ray(address: str | None = None, **init: Any) -> bool:
    """Connect to Ray unless this process already is; returns True when this call started the connection.

    Args:
        address: A cluster to join (``"auto"``, ``"10.0.0.5:6379"``, ``"ray://head:10001"``); ``None`` starts a
            local Ray, or joins the one ``$RAY_ADDRESS`` names.
        **init: More ``ray.init`` arguments (``num_cpus``, ``runtime_env``...).

    Raises:
        RayNotInstalledError: Ray is not installed.
        ClusterError: The cluster could not be reached.
    """
    ray = require_ray()
    if ray.is_initialized():
        return False
    _probe(address)
    init.setdefault("include_dashboard", False)
    init.setdefault("logging_level", logging.ERROR)
    try:
        ray.init(address=address, **init)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"at {address!r}" if address else "(local)"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterError(f"Could not start or reach Ray {where}: {first}") from exc
    return True


def _probe(address: str | None, timeout: float = 3.0) -> None:
    """Fail fast on a ``HOST:PORT`` (or ``ray://HOST:PORT``) nobody listens on: Ray itself retries for minutes."""
    if not address or address == "auto" or ":" not in address:
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not port.isdigit():
        return
    import socket

    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ClusterError(f"Could not reach Ray at {address!r}: {exc.strerror or exc}. Is the cluster up "
                           "(ray start --head), and is the address right?") from None


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


@dataclass
class Failure:
    """An exception raised inside an actor, in a form that crosses processes intact."""

    module: str
    qualname: str
    args: tuple[Any, ...]
    text: str
    remote_traceback: str
    attributes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def capture(cls, exc: BaseException) -> Failure:
        """Record ``exc`` (call inside the ``except`` block that caught it)."""
        args = exc.args if _picklable(exc.args) else tuple(str(a) for a in exc.args)
        attributes = {k: v for k, v in getattr(exc, "__dict__", {}).items() if _picklable(v)}
        return cls(type(exc).__module__, type(exc).__qualname__, tuple(args), str(exc),
                   "".join(traceback.format_exception(exc)), attributes)

    def _class(self) -> type[BaseException] | None:
        try:
            found: Any = importlib.import_module(self.module)
            for part in self.qualname.split("."):
                found = getattr(found, part)
        except Exception:
            return None
        return found if isinstance(found, type) and issubclass(found, BaseException) else None

    def rebuild(self, where: str) -> BaseException:
        """The exception again, as an instance of its own class, with a note naming ``where`` it was raised.

        A class this process cannot import gives a :class:`ClusterError` carrying the original text.
        """
        kind = self._class()
        exc: BaseException
        if kind is None:
            exc = ClusterError(f"{self.qualname}: {self.text}")
        else:
            try:
                exc = kind.__new__(kind)
                exc.args = self.args
                if self.attributes:
                    exc.__dict__.update(self.attributes)
            except Exception:
                exc = ClusterError(f"{self.qualname}: {self.text}")
        exc.add_note(f"Raised in {where}:\n{self.remote_traceback.rstrip()}")
        return exc


def guarded(fn: Any, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
    """Run ``fn``; return ``(True, result)`` or ``(False, Failure)`` (the actors' reply shape)."""
    try:
        return True, fn(*args, **kwargs)
    except BaseException as exc:  # everything, so that the caller sees the real type
        return False, Failure.capture(exc)


def unwrap(reply: tuple[bool, Any], where: str) -> Any:
    """The result of a :func:`guarded` reply, or its exception raised again here."""
    ok, value = reply
    if ok:
        return value
    raise value.rebuild(where)


def process_memory() -> dict[str, int]:
    """This process's memory in bytes: ``rss``, ``pss`` (shared pages split among their users) and ``uss``
    (pages only this process uses: what it would free by exiting). Linux ``/proc``; zeros elsewhere."""
    out = {"rss": 0, "pss": 0, "uss": 0}
    try:
        with open("/proc/self/smaps_rollup", encoding="ascii") as f:
            fields = {}
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                    fields[parts[0][:-1]] = int(parts[1]) * 1024
    except OSError:
        return out
    out["rss"] = fields.get("Rss", 0)
    out["pss"] = fields.get("Pss", 0)
    out["uss"] = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return out


def dispatch(actors: list[Any], items: list[Any], submit: Any) -> Any:
    """Give each actor one item at a time and the next as soon as it is done; yield ``(item, reply, actor)`` as
    they finish.

    ``submit(actor, item)`` returns the call's object ref. Items are handed out in order, so put the longest first
    to finish together.
    """
    ray = require_ray()
    queue = list(items)
    pending: dict[Any, tuple[Any, Any]] = {}
    for actor in actors:
        if queue:
            item = queue.pop(0)
            pending[submit(actor, item)] = (actor, item)
    while pending:
        [done], _ = ray.wait(list(pending), num_returns=1)
        actor, item = pending.pop(done)
        if queue:
            following = queue.pop(0)
            pending[submit(actor, following)] = (actor, following)
        yield item, ray.get(done), actor
