"""Accessors that a lower layer offers and a higher layer implements, bound at the package's composition root.

``session.messages_df()`` and ``agent.show()`` belong where a notebook user looks for them, on the session and the
agent, but their code lives in higher layers (frames, views) that the session and agent layers must never
import. A lower layer declares such a method with :class:`Accessor` (a named slot); :mod:`agentlab._wiring`, which
the package imports first, binds every slot to the higher-layer function that implements it. Nothing is imported
until an accessor is used, so ``import agentlab`` stays light.

Invariant: a slot is bound once, at import of the package; calling one that nothing bound raises a
:class:`~agentlab.errors.AgentlabError` naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentlab.errors import AgentlabError

_bound: dict[str, Callable[..., Any]] = {}


def bind(name: str, implementation: Callable[..., Any]) -> None:
    """Bind the slot ``name`` to ``implementation(owner, *args, **kwargs)``."""
    _bound[name] = implementation


def resolve(name: str) -> Callable[..., Any]:
    """The function bound to ``name``."""
    try:
        return _bound[name]
    except KeyError:
        raise AgentlabError(f"Nothing implements {name!r}; import agentlab (the package binds it).") from None


class Accessor:
    """A class attribute whose value, read on an instance, is what the slot's implementation returns for it.

    ``messages_df = Accessor("session.messages_df", "Doc...")`` makes ``session.messages_df`` the bound frame
    object (call it for pandas, ``.arrow()`` for Arrow); ``show = Accessor("agent.show")`` with ``call=True`` makes
    ``agent.show()`` an ordinary method call.
    """

    def __init__(self, name: str, doc: str, *, call: bool = False) -> None:
        self.name = name
        self.call = call
        self.__doc__ = doc

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.attribute = attribute

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        implementation = resolve(self.name)
        if self.call:
            def method(*args: Any, **kwargs: Any) -> Any:
                return implementation(obj, *args, **kwargs)

            method.__doc__ = self.__doc__
            method.__name__ = getattr(self, "attribute", self.name)
            return method
        return implementation(obj)
