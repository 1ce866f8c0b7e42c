"""The fact memory designs: mem0's extracted facts with add / update / delete, and Zep's dated facts.

mem0 describes the memory: an *extraction* phase turns new messages into short facts, and an *update* phase compares
each new fact with similar stored ones and decides, per fact, to ADD it, UPDATE a stored fact, DELETE a stored fact
it contradicts, or do nothing (NONE) (mem0's ``DEFAULT_UPDATE_MEMORY_PROMPT`` in ``mem0/configs/prompts.py``; its
``Memory.add`` in ``mem0/memory/main.py`` searches the 5 most similar stored memories per new fact before deciding).
Zep's Graphiti keeps facts as dated edges instead: a contradicted fact is not deleted but gets an ``invalid_at`` date
and stays searchable (``EntityEdge.valid_at`` / ``invalid_at`` in ``graphiti_core/edges.py``). :class:`FactMemory`
does either (``dated=True`` for Zep's way), and :class:`FactsDesign` replays it as a policy's memory design: the
facts are the entries of a search block (``facts``) of the session, and at question time the ``k`` facts the
design's retrieval ranks best go into the prompt as the result of one ``search_facts`` call with the question (mem0
answers from the memories its ``search`` returns; Zep adds the facts it finds, with their dates, to the prompt).

Offline (``writer="rules"``), each stored turn is handled as it arrives. Extraction (:func:`extract_facts`) is
rule-based, deterministic, and keeps words as they were said:

* a turn is split into sentences; questions, and sentences with fewer than 3 content words and no number or name,
  are dropped (greetings, "Wow, that's great!"); what is left is the fact, verbatim, with its speaker, date and the
  turn it came from;
* a few first-person patterns give a fact a *key*, subject + attribute: "my <thing> is/are ..." (attribute: the
  thing), "I work/worked as/at/for ..." (``work``), "I live/moved in/to ..." (``home``), "I have/got/adopted a
  <noun>" (``has <noun>``), "I love/enjoy/started <doing>" (``does <doing>``); negated forms ("I lost/quit/left my
  job", "I stopped/gave up <doing>", "I no longer ...") say the keyed fact no longer holds.

The rule-based update (:meth:`FactMemory.decide`) decides, per extracted fact:

* a negated keyed fact: **DELETE** the stored fact with that key (dated: give it ``valid_to``), then **ADD** the
  statement itself ("Lost my job as a banker" is a fact too);
* a keyed fact whose key is stored with other words: **UPDATE** it (dated: close the old one, add the new one);
* a fact whose content words are all in a stored fact of the same speaker: **NONE** (already known); one whose
  words include all of a stored fact's and more: **UPDATE** that fact (mem0 keeps "the fact which has the most
  information");
* anything else: **ADD**.

With Claude (``writer="claude"``, :class:`ClaudeFactWriter`), mem0's two phases run once per dated session:

1. **Extraction**: one request with the session's turns, each prefixed with its id (``[D1:3] Caroline: ...``) under
   its date, asks for the facts worth remembering as JSON, ``{"facts": [{"fact", "turns"}]}``, each fact one
   sentence naming the person, with relative dates resolved against the session's date and the ids of the turns it
   comes from (mem0's ``FACT_RETRIEVAL_PROMPT`` asks for ``{"facts": [...]}`` strings; the turn ids are added here
   so the experiment can tell which evidence a fact carries).
2. **Update**: for each new fact the memory's own retrieval finds the 5 most similar stored facts; their union is
   shown with small integer ids (as mem0 does, so the model cannot garble long ids), and one request asks for an
   event per fact, ``ADD``, ``UPDATE``, ``DELETE`` or ``NONE`` (mem0's ``{"memory": [{"id", "text", "event"}]}``
   format, plus the turns). When no stored fact is similar to any new one, the new facts are added without it.

Claude's events go through :meth:`FactMemory.apply` like the rules' ones, so a dated memory closes what a plain one
would overwrite or delete. A reply that is not the JSON asked for is counted in :attr:`ClaudeFactWriter.errors` and
changes nothing. The prompts are written for this project.

Invariants: every fact names the turns it came from (``sources``, message ids; Claude's facts only cite turns of
their session, other ids are dropped); rule-based decisions depend only on the order of turns, so a replay is
deterministic; every decision is logged in :attr:`FactMemory.log`; facts reach the search block in batches
(:meth:`FactMemory.flush`), at the end of each dated session and before any question.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .memory_design import DesignRun, MemoryDesign, Recall, ask_claude, reply_text, session_lines
from .retrieval import Doc, Retrieval, make_index

__all__ = ["EVENTS", "EXTRACT_INSTRUCTIONS", "UPDATE_INSTRUCTIONS", "ClaudeFactWriter", "Decision", "Fact",
           "FactMemory", "FactsDesign", "extract_facts", "parse_json", "render_facts"]

EVENTS = ("ADD", "UPDATE", "DELETE", "NONE")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_STOP = frozenset((  # noqa: SIM905 - a word list reads better as one string
    "a about after again all also am an and any are as at be because been before being both but by can could did "
    "do does doing done for from got had has have having he her here hers him his how i if in into is it its "
    "just let me more most my no nor not now of off oh on once only or other our out over own please same she "
    "should so some such than that the their them then there these they this those through to too under until up "
    "very was we were what when where which while who whom why will with would yes you your yeah wow hey hi "
    "hello thanks thank ok okay sure really so much great awesome cool nice amazing lol haha gonna wanna gotta "
    "im it's i'm that's you're i've i'll don't can't what's good glad well yep totally definitely").split())
_THING = r"((?:favou?rite |new |old |current |best )?[a-z]+)"
# (pattern, attribute template, holds): group 1, where present, fills "{}".
_KEYS: tuple[tuple[re.Pattern[str], str, bool], ...] = tuple((re.compile(p), a, h) for p, a, h in (
    (r"\b(?:lost|quit|left) my (?:job|work)\b", "work", False),
    (r"\bi(?:'m| am) (?:no longer|not) (?:working|employed)\b", "work", False),
    (r"\bi (?:work|worked|am working|started working|got a job|have a job|found a job) (?:as|at|for|in)\b",
     "work", True),
    (r"\bi(?:'ve| have)? (?:moved|relocated) (?:to|into)\b", "home", True),
    (r"\bi (?:live|lived|am living) (?:in|at|near)\b", "home", True),
    (r"\bi(?:'ve| have)? (?:stopped|quit|gave up|given up) ([a-z]+ing)\b", "does {}", False),
    (r"\bi (?:no longer|don't|do not) ([a-z]+)\b(?! [a-z]+ing)", "does {}", False),
    (r"\bi (?:love|enjoy|like|started|began|took up|am into|have been) ([a-z]+ing)\b", "does {}", True),
    (r"\bi (?:sold|gave away|lost) my ([a-z]+)\b", "has {}", False),
    (r"\bi(?:'ve| have)? (?:have|got|adopted|bought) (?:a|an|my|two|three|\d+) (?:new |little |cute )?([a-z]+)\b",
     "has {}", True),
    (r"\bmy " + _THING + r" (?:is|are|was|were)\b", "{}", True),
))


def _words(text: str) -> set[str]:
    return {w for w in (m.group(0).lower() for m in _WORD.finditer(text)) if w not in _STOP and len(w) > 1}


def _specific(sentence: str) -> bool:
    tokens = sentence.split()
    return any(any(c.isdigit() for c in t) or (i > 0 and t[:1].isupper() and t.strip(".,!?") != "I")
               for i, t in enumerate(tokens))


def _key_of(sentence: str) -> tuple[str | None, bool]:
    lowered = sentence.lower().replace("\u2019", "'")
    for pattern, attribute, holds in _KEYS:
        match = pattern.search(lowered)
        if match:
            filled = attribute.format(*match.groups()) if match.groups() else attribute
            return filled.replace("favourite", "favorite"), holds
    return None, True


@dataclass(frozen=True)
class Fact:
    """One remembered fact.

    Attributes:
        key: Its id in the memory (``"<subject>/<attribute>"`` for keyed facts, ``"<turn>#<n>"`` otherwise).
        text: The fact as the model reads it.
        subject: Whom it is about (the speaker who said it).
        attribute: For keyed facts, what it says about the subject (``"work"``, ``"has dog"``); else None.
        sources: Message ids of the turns it came from.
        date: When it was said (the dataset session's date).
        valid_from, valid_to: For dated memories: when it started and stopped being true (None: still true).
        holds: False for a statement that something no longer holds (it deletes / closes the keyed fact).
    """

    key: str
    text: str
    subject: str | None
    attribute: str | None = None
    sources: tuple[str, ...] = ()
    date: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    holds: bool = True

    def doc(self) -> Doc:
        """The fact as an index document."""
        return Doc(self.key, self.text, self.subject, self.date, None, self.sources,
                   {"valid_from": self.valid_from, "valid_to": self.valid_to})


def extract_facts(doc: Doc, *, start: int = 0) -> list[Fact]:
    """The rule-based facts of one stored turn (see the module docstring), keys not yet made unique.

    Args:
        doc: The turn (its ``id`` is the message id, ``sources`` are set to it).
        start: Number of the first unkeyed fact (``"<turn>#<n>"``).
    """
    out: list[Fact] = []
    n = start
    for line in doc.text.splitlines():
        for sentence in (s.strip() for s in _SENTENCE_END.split(line.strip())):
            if not sentence or sentence.endswith("?"):
                continue
            words = _words(sentence)
            if len(words) < 3 and not (words and _specific(sentence)):
                continue
            attribute, holds = _key_of(sentence)
            key = f"{(doc.speaker or '').lower()}/{attribute}" if attribute else f"{doc.id}#{n}"
            n += attribute is None
            out.append(Fact(key, sentence, doc.speaker, attribute, (doc.id,), doc.date, doc.date, None, holds))
    return out


@dataclass(frozen=True)
class Decision:
    """One logged decision: ``event`` (ADD, UPDATE, DELETE, NONE), the fact's key, old and new text, the turns."""

    event: str
    key: str
    old: str | None
    new: str | None
    sources: tuple[str, ...]


@dataclass
class FactMemory:
    """Facts about the people of one conversation, updated fact by fact (see the module docstring).

    Args:
        index: Where the facts are searched (a search block of the session); None keeps them here only.
        dated: Zep's way: a contradicted or replaced fact gets ``valid_to`` and stays, instead of being overwritten.
    """

    index: Any = None
    dated: bool = False
    facts: dict[str, Fact] = field(default_factory=dict)
    log: list[Decision] = field(default_factory=list)
    _by_word: dict[str, set[str]] = field(default_factory=dict)
    _dirty: set[str] = field(default_factory=set)
    _versions: dict[str, int] = field(default_factory=dict)

    # -- reading --------------------------------------------------------------------------------------------------

    def current(self) -> list[Fact]:
        """The facts still true (for a plain memory: all of them), in insertion order."""
        return [f for f in self.facts.values() if f.valid_to is None]

    def by_subject(self, subject: str | None) -> list[Fact]:
        """The current keyed facts about ``subject``."""
        return [f for f in self.current() if f.subject == subject and f.attribute]

    # -- writing --------------------------------------------------------------------------------------------------

    def observe(self, doc: Doc) -> list[Decision]:
        """Extract the facts of one turn and apply the rule-based update to each; returns the decisions."""
        made = []
        for fact in extract_facts(doc):
            made.extend(self.decide(fact))
        return made

    def decide(self, fact: Fact) -> list[Decision]:
        """The rule-based update for one extracted fact (ADD, UPDATE, DELETE or NONE)."""
        if fact.attribute and not fact.holds:
            done = []
            key = f"{(fact.subject or '').lower()}/{fact.attribute}"
            if self._live(key) is not None:
                done.append(self.apply("DELETE", key, None, fact.sources, fact.date))
            loose = replace(fact, key=f"{fact.sources[0]}#{fact.attribute}", attribute=None)
            return [*done, self.apply("ADD", loose.key, loose.text, loose.sources, loose.date, loose.subject)]
        if fact.attribute:
            stored = self._live(fact.key)
            if stored is None:
                return [self.apply("ADD", fact.key, fact.text, fact.sources, fact.date, fact.subject, fact.attribute)]
            if _words(stored.text) >= _words(fact.text):
                return [self.apply("NONE", stored.key, fact.text, fact.sources, fact.date)]
            return [self.apply("UPDATE", stored.key, fact.text, fact.sources, fact.date)]
        words = _words(fact.text)
        for key in self._similar(words, fact.subject):
            known = _words(self.facts[key].text)
            if words <= known:
                return [self.apply("NONE", key, fact.text, fact.sources, fact.date)]
            if known < words:  # the same fact told with more: merged in place, also in a dated memory
                return [self.apply("UPDATE", key, fact.text, fact.sources, fact.date, supersede=False)]
        return [self.apply("ADD", fact.key, fact.text, fact.sources, fact.date, fact.subject)]

    def apply(self, event: str, key: str, text: str | None, sources: Iterable[str], date: str | None,
              subject: str | None = None, attribute: str | None = None, *, supersede: bool = True) -> Decision:
        """Apply one decision, from the rules or from a model (mem0's four events); returns what was logged.

        ``UPDATE`` replaces the fact's text and adds ``sources`` to its own (a dated memory closes the old fact on
        ``date`` and stores the new text as a new version, unless ``supersede`` is False: a restatement with more
        detail, merged in place); ``DELETE`` removes it (dated: closes it); an update of an unknown key adds it, and
        a delete of one changes nothing (logged as NONE).
        """
        if event not in EVENTS:
            from agentlab.errors import InvalidArgumentError

            raise InvalidArgumentError(f"A memory event is ADD, UPDATE, DELETE or NONE, not {event!r}.")
        sources = tuple(sources)
        old = self._live(key)
        if event in ("UPDATE", "DELETE") and old is None:
            event = "ADD" if event == "UPDATE" and text else "NONE"
        if event == "ADD":
            key = self._fresh(key)
            self._put(Fact(key, text or "", subject, attribute, sources, date, date))
        elif event == "UPDATE" and old is not None:
            if self.dated and supersede:
                self._put(replace(old, valid_to=date))
                key = self._fresh(old.key)
                self._put(Fact(key, text or old.text, old.subject, old.attribute, sources, date, date))
            else:
                merged = tuple(dict.fromkeys(old.sources + sources))
                self._put(replace(old, text=text or old.text, sources=merged, date=date))
        elif event == "DELETE" and old is not None:
            if self.dated:
                self._put(replace(old, valid_to=date))
            else:
                self._drop(old.key)
        decision = Decision(event, key, None if old is None else old.text, text, sources)
        self.log.append(decision)
        return decision

    def flush(self) -> None:
        """Write the facts changed since the last flush to the index (one batch)."""
        if self.index is None or not self._dirty:
            self._dirty.clear()
            return
        gone = [k for k in self._dirty if k not in self.facts]
        kept = [self.facts[k].doc() for k in self.facts if k in self._dirty]
        self.index.remove(gone)
        self.index.add(kept)
        self._dirty.clear()

    # -- internals ------------------------------------------------------------------------------------------------

    def _live(self, key: str) -> Fact | None:
        """The current version of ``key`` (a dated memory's newest version still true)."""
        base = key.split("~")[0]
        version = self._versions.get(base, 0)
        fact = self.facts.get(f"{base}~{version}" if version else base)
        return fact if fact is not None and fact.valid_to is None else None

    def _fresh(self, key: str) -> str:
        """A key not in use: ``key`` itself, else the next version ``key~n``."""
        base = key.split("~")[0]
        if base not in self.facts:
            return base
        version = self._versions.get(base, 0) + 1
        self._versions[base] = version
        return f"{base}~{version}"

    def _put(self, fact: Fact) -> None:
        previous = self.facts.get(fact.key)
        if previous is not None:
            self._unindex(previous)
        self.facts[fact.key] = fact
        if fact.valid_to is None:
            for w in _words(fact.text):
                self._by_word.setdefault(w, set()).add(fact.key)
        self._dirty.add(fact.key)

    def _drop(self, key: str) -> None:
        fact = self.facts.pop(key)
        self._unindex(fact)
        base = key.split("~")[0]
        if base == key:
            self._versions.pop(base, None)
        self._dirty.add(key)

    def _unindex(self, fact: Fact) -> None:
        for w in _words(fact.text):
            keys = self._by_word.get(w)
            if keys is not None:
                keys.discard(fact.key)

    def _similar(self, words: set[str], subject: str | None) -> list[str]:
        """Current facts of ``subject`` that share a word with ``words`` (at most 5, most shared words first)."""
        counts: dict[str, int] = {}
        for w in words:
            for key in self._by_word.get(w, ()):
                counts[key] = counts.get(key, 0) + 1
        found = [k for k in counts if self.facts[k].subject == subject and self.facts[k].attribute is None]
        return sorted(found, key=lambda k: (-counts[k], k))[:5]


def render_facts(docs: Iterable[Doc], *, dated: bool = False) -> list[str]:
    """Facts as prompt lines: ``- [date] Speaker: text``; a dated memory adds when each stopped being true."""
    lines = []
    for doc in docs:
        line = f"- {doc.key_text}"
        until = (doc.metadata or {}).get("valid_to")
        if dated and until:
            line += f" (no longer true from {until})"
        lines.append(line)
    return lines


# -- Claude as the writer ------------------------------------------------------------------------------------------

EXTRACT_INSTRUCTIONS = (
    "You write the long-term memory of an assistant that follows a long conversation between people. Below is one "
    "session of it, under its date; each turn starts with its id in brackets. List the facts worth remembering about "
    "the people: events and when they happened, plans, jobs, places, possessions, relationships, preferences. Write "
    "each fact as one short sentence that names the person; turn relative dates into dates using the session's date "
    "('yesterday' in a session of 8 May 2023 is 7 May 2023). Give the ids of the turns each fact comes from. Reply "
    'with JSON only: {"facts": [{"fact": "...", "turns": ["D1:3"]}]}, or {"facts": []} when there is nothing.'
)

UPDATE_INSTRUCTIONS = (
    "You keep a memory of facts up to date. Compare the new facts with the stored facts and give every stored fact "
    "and every new fact one event: ADD a new fact that says something the memory lacks (give it a new id); UPDATE a "
    "stored fact (keep its id, give the new text) when a new fact says the same thing with more detail or changes "
    "it; DELETE a stored fact that a new fact contradicts (keep its id); NONE when a fact is already stored or not "
    "worth keeping. Keep the turns of the facts you use. Reply with JSON only: "
    '{"memory": [{"id": "0", "text": "...", "event": "ADD|UPDATE|DELETE|NONE", "turns": ["D1:3"]}]}.'
)

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


def parse_json(text: str) -> Any:
    """The JSON object in a reply (code fences and text around the outermost braces are ignored).

    Raises:
        ValueError: No JSON object in the text.
    """
    cleaned = _FENCE.sub("", text or "").strip()
    start, end = cleaned.find("{"), cleaned.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the reply")
    return json.loads(cleaned[start:end + 1])


def _turn_label(message_id: str) -> str:
    return message_id.rsplit("/", 1)[-1]


class ClaudeFactWriter:
    """Updates a :class:`FactMemory` from one dated session (see the module docstring).

    Args:
        client: An ``anthropic.Anthropic`` client or a :class:`~agentlab.experiments.cache.CachedClient`.
        model: Model id (default: the settings' model).
        max_tokens: Output limit of each request.
        similar: Stored facts looked up per new fact.
    """

    def __init__(self, client: Any, *, model: str | None = None, max_tokens: int = 2048, similar: int = 5) -> None:
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.similar = similar
        self.calls = 0
        self.errors: list[str] = []

    def _ask(self, system: str, text: str) -> Any:
        response = ask_claude(self.client, system, text, max_tokens=self.max_tokens, model=self.model)
        self.calls += 1
        reply = reply_text(response)
        try:
            return parse_json(reply)
        except ValueError as exc:
            self.errors.append(f"{exc}: {reply[:200]!r}")
            return None

    def __call__(self, memory: FactMemory, docs: Sequence[Any]) -> int:
        """Extract the session's facts and apply the decisions; returns how many events changed the memory."""
        if not docs:
            return 0
        ids = {_turn_label(d.id): d for d in docs}
        lines = session_lines(docs)
        found = self._ask(EXTRACT_INSTRUCTIONS, "\n".join(lines))
        facts = [f for f in (found or {}).get("facts") or () if isinstance(f, dict) and str(f.get("fact", "")).strip()]
        if not facts:
            return 0
        session_date = docs[-1].date

        def sources(turns: Any) -> tuple[str, ...]:
            return tuple(dict.fromkeys(ids[t].id for t in (turns or ()) if isinstance(t, str) and t in ids))

        def subject(cited: tuple[str, ...]) -> str | None:
            by_id = {d.id: d for d in docs}
            return by_id[cited[0]].speaker if cited else None

        memory.flush()
        stored: dict[str, str] = {}
        for fact in facts:
            for key in memory.index.rank(str(fact["fact"]), self.similar) if memory.index is not None else ():
                if key in memory.facts and memory.facts[key].valid_to is None:
                    stored.setdefault(key, memory.facts[key].text)
        base = f"{docs[0].id}#c"
        if not stored:
            changed = 0
            for n, fact in enumerate(facts):
                cited = sources(fact.get("turns"))
                memory.apply("ADD", f"{base}{n}", str(fact["fact"]), cited, session_date, subject(cited))
                changed += 1
            return changed
        numbered = {str(i): key for i, key in enumerate(stored)}
        old = [{"id": i, "text": stored[key]} for i, key in numbered.items()]
        new = [{"fact": str(f["fact"]), "turns": list(f.get("turns") or [])} for f in facts]
        text = (f"Stored facts:\n```json\n{json.dumps(old, ensure_ascii=False)}\n```\n\n"
                f"New facts:\n```json\n{json.dumps(new, ensure_ascii=False)}\n```")
        decided = self._ask(UPDATE_INSTRUCTIONS, text)
        changed = 0
        for n, item in enumerate((decided or {}).get("memory") or ()):
            if not isinstance(item, dict) or item.get("event") not in EVENTS or item.get("event") == "NONE":
                continue
            event, item_id, said = str(item["event"]), str(item.get("id", "")), str(item.get("text") or "")
            cited = sources(item.get("turns"))
            if event == "ADD" or item_id not in numbered:
                if event != "ADD" or not said:
                    continue
                memory.apply("ADD", f"{base}{n}", said, cited, session_date, subject(cited))
            else:
                memory.apply(event, numbered[item_id], said or None, cited, session_date)
            changed += 1
        return changed


# -- the design ---------------------------------------------------------------------------------------------------

class _FactsRun(DesignRun):
    design: FactsDesign

    def configure(self) -> None:
        dated = self.design.dated
        index = make_index(self.design.retrieval, self.session, label="facts", shared=self.shared, turns=False,
                           description="Facts about the people in this conversation" +
                                       (", with the date each stopped being true" if dated else "") +
                                       "; searched with the question when one is asked.")
        index.reset()
        self.memory = FactMemory(index, dated=dated)
        self.writer: Any = None
        if self.design.writer == "claude":
            from agentlab.errors import ExperimentError

            if self.claude is None:  # pragma: no cover - the replay's client factory raised already
                raise ExperimentError(f"The {self.design.kind} design writes with Claude; set ANTHROPIC_API_KEY.")
            self.writer = ClaudeFactWriter(self.claude())

    def prepare(self, questions: Sequence[str]) -> None:
        self.memory.index.prepare(questions)

    def appended(self, doc: Doc) -> None:
        if self.writer is None:
            self.memory.observe(doc)

    def session_ended(self, docs: list[Doc]) -> None:
        if self.writer is not None:
            self.writer(self.memory, docs)
        self.memory.flush()

    def recall(self, question: str) -> Recall:
        self.memory.flush()
        keys = self.memory.index.rank(question)
        items = [self.memory.facts[k].doc() for k in keys if k in self.memory.facts]
        if not items:
            return Recall("[search_facts: nothing found for this question]")
        text = "\n".join(["[search_facts found these facts for the question]",
                          *render_facts(items, dated=self.design.dated), "[end of search_facts results]"])
        return Recall(text, {}, items)


class FactsDesign(MemoryDesign):
    """Extracted facts kept up to date, searched at question time (see the module docstring).

    Args:
        retrieval: How facts are ranked for a question.
        writer: ``"rules"`` or ``"claude"``.
        dated: Close replaced facts with a date instead of overwriting them (Zep's way).
    """

    run_class = _FactsRun

    def __init__(self, retrieval: Retrieval | None = None, *, writer: str = "rules", dated: bool = False) -> None:
        super().__init__(retrieval, writer=writer)
        self.dated = dated
        self.kind = "dated-facts" if dated else "facts"
