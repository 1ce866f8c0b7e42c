"""Search over messages: which messages a session may find, on top of the agent's full-text index.

The index itself (BM25, ``porter unicode61`` tokens, phrase/all/any modes) is
:class:`agentlab.search.FullTextIndex`, namespace ``"messages"``, one group per session, kept current by
:class:`agentlab.session.duckdb._tree.MessageTree` in the same transaction as every write. This module scopes a query:

* a session searches its own rows on every branch, plus, for a fork, the shared path up to its fork point;
* ``branch=<leaf id>`` keeps only messages on the path to that leaf;
* ``all_sessions=True`` searches every session of the agent (upstream ``SessionManager.search``);
* ``role=`` keeps one role.

Invariants: a blank query returns ``[]`` and never reaches the index; query text is never parsed as FTS syntax;
every hit names a message that exists when the hits are returned (the index and the rows change together).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agentlab.session._messages import SearchHit, check_search, message_text, parse_rows

if TYPE_CHECKING:
    from agentlab.session.duckdb._tree import MessageTree

__all__ = ["search_tree"]



def _collect(fetch: Callable[[int], Sequence[Any]], accept: Callable[[Any], bool], limit: int) -> list[Any]:
    # Filters the index cannot apply (role, existence) are applied here, fetching more until enough pass.
    want = limit
    while True:
        hits = fetch(want)
        kept = [h for h in hits if accept(h)]
        if len(kept) >= limit or len(hits) < want:
            return kept[:limit]
        want *= 4


def search_tree(tree: MessageTree, session_id: str | None, query: str, *, mode: str = "phrase", limit: int = 20,
                role: str | None = None, branch: str | None = None, max_depth: int | None = None) -> list[SearchHit]:
    """Search the messages of ``tree``: of one session (``session_id``) or of all (``None``).

    See :meth:`agentlab.session.Session.search` for the arguments.
    """
    if not check_search(query, mode, limit):
        return []
    fts = tree.fts
    store = tree.store
    with store.lock:
        if branch is not None:
            scope = session_id if session_id is not None else tree.session_of(branch)
            ids = tree.path_ids(scope or "", branch, **({"max_depth": max_depth} if max_depth else {}))
            if not ids:
                return []

            seqs = tree.seqs_of(ids)

            def fetch(n: int) -> Sequence[Any]:
                return fts.search(query, mode=mode, limit=n, seqs=seqs)
        elif session_id is None:
            def fetch(n: int) -> Sequence[Any]:
                return fts.search(query, mode=mode, limit=n)
        else:
            inherited = tree.seqs_of(sorted(tree.inherited_ids(session_id)))

            def fetch(n: int) -> Sequence[Any]:
                hits = list(fts.search(query, mode=mode, limit=n, groups=[session_id]))
                if inherited:  # a fork also finds the shared path it reads from its parent
                    hits += fts.search(query, mode=mode, limit=n, seqs=inherited)
                    hits.sort(key=lambda h: -h.score)
                return hits[:n]

        def accept(hit: Any) -> bool:  # the index holds committed rows only, so every hit exists
            return role is None or tree.role_of(hit.doc_id) == role

        hits = _collect(fetch, accept, limit)
        messages = _messages_of(tree, hits)
        results = []
        for hit in hits:
            message = messages.get(hit.doc_id)
            if message is None:
                continue
            owner = hit.group
            # An inherited message (a fork reading its parent's path) is judged against the fork's branch.
            view = session_id if session_id is not None else owner
            text = message_text(message)
            results.append(SearchHit(
                id=hit.doc_id, role=message["role"], text=text, snippet=_snippet(fts, text, query),
                score=float(hit.score), on_current_branch=tree.on_current_branch(view, hit.doc_id, seq=hit.seq),
                session_id=owner, created_at=message.get("created_at")))
        return results


def _messages_of(tree: MessageTree, hits: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The hits' messages: from the content the index stored with each, else read from the tree."""
    found: dict[str, dict[str, Any]] = {}
    stored = [h for h in hits if getattr(h, "content", None)]
    if stored:
        for message in parse_rows([h.content for h in stored]):
            found[message["id"]] = message
    missing = [h.doc_id for h in hits if h.doc_id not in found]
    if missing:
        found.update((m["id"], m) for m in tree.read(missing))
    return found


def _snippet(fts: Any, text: str, query: str) -> str:
    maker = getattr(fts, "snippet", None)
    if maker is not None:
        return maker(text, query)
    return text[:160]
