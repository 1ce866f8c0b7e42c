"""SIGKILL trials for export and import (agentlab/portable.py), shared by tests/reliability and
benchmarks/reliability.py.

Export trial: a folder holds a complete export of an agent's earlier state ("old"). A child process exports
the agent's current state ("new") over it with ``overwrite=True`` and is killed at a random moment of the
export. Afterwards the folder must import as exactly the old or exactly the new state (the new one if the
child said it had finished), and any folder beside it that ``import_`` accepts must hold one of the two as
well: no partial export is ever importable. The next export removes what the killed one left.

Import trial: a child imports a complete export and is killed at a random moment of the import. Afterwards
there is no agent file, or one holding exactly the exported rows (it must, if the child said it had
finished); retrying the import then works (or says "already exists" when there is a complete agent), and
leaves no temporary file beside the agent.

A trial is "lost" when the state it checks is neither of the allowed ones.
"""

from __future__ import annotations

import hashlib
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentlab import Agent, get_agent
from agentlab.agent._portable import export, import_
from agentlab.errors import ExportError
from agentlab.session._session import Session
from agentlab.store._naming import agent_path

from .snapshot import snapshot

CHILD = r'''
import sys
from agentlab import Agent, get_agent
from agentlab.agent._portable import export, import_

class Traveller(Agent):
    initial_state = {"trips": 0}

mode, root, folder = sys.argv[1:4]
if mode == "export":
    agent = get_agent(Traveller, "traveller", root=root, read_only=True)
    print("start", flush=True)
    export(agent, folder, overwrite=True)
else:
    print("start", flush=True)
    import_(folder, Traveller, root=root)
print("done", flush=True)
'''

KINDS = ("export", "import")


class Traveller(Agent):
    initial_state = {"trips": 0}


@dataclass
class PortTrial:
    kind: str
    finished: bool = False  # the child printed "done" before the kill
    outcome: str = ""  # export: "old" or "new" in the folder; import: "none" or "complete"
    lost: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def digest(agent: Agent) -> str:
    """A hash of every row of every table: equal digests mean the same stored data."""
    return hashlib.sha256(repr(sorted(snapshot(agent).items())).encode()).hexdigest()


def _add(agent: Agent, start: int, count: int) -> None:
    Session(agent).append_messages([
        {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
         "parts": [{"type": "text", "text": f"leg {i} of the trip, by train " * 8}]} for i in range(start, start + count)
    ])
    agent.set_state({"trips": start + count})


def _imported_digest(folder: Path, scratch: Path) -> str | None:
    """The digest of what ``folder`` imports as, or None if ``import_`` refuses it."""
    try:
        agent = import_(folder, Traveller, root=scratch)
    except ExportError:
        return None
    try:
        return digest(agent)
    finally:
        agent.close()


def _kill_during(args: list[str], delay: float) -> bool:
    """Run the child, SIGKILL it ``delay`` seconds after it says "start"; True if it said "done" first."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    assert proc.stdout is not None and proc.stderr is not None
    out = b""
    try:
        give_up = time.monotonic() + 120
        while b"start\n" not in out and time.monotonic() < give_up and proc.poll() is None:
            if select.select([proc.stdout], [], [], 0.05)[0]:
                out += os.read(proc.stdout.fileno(), 4096)
        if b"start\n" not in out:
            raise RuntimeError(f"child never started: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(delay)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    out += proc.stdout.read()
    if proc.returncode != -signal.SIGKILL and b"done\n" not in out:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    return b"done\n" in out


def _setup(base: Path, messages: int) -> tuple[Path, Path, dict[str, str], float, float]:
    """An agent (closed), its export of the old state in ``dest`` and of the new one in ``fresh``, the digests
    of both, and how long an export and an import of it take here."""
    home = base / "home"
    agent = get_agent(Traveller, "traveller", root=home)
    _add(agent, 0, messages)
    dest, fresh = base / "exports" / "traveller", base / "fresh"
    export(agent, dest)
    shutil.copytree(dest, base / "old-export")
    old = digest(agent)
    _add(agent, messages, messages // 4)
    new = digest(agent)
    started = time.perf_counter()
    export(agent, fresh)
    export_seconds = time.perf_counter() - started
    agent.close()
    started = time.perf_counter()
    restored = import_(fresh, Traveller, root=base / "calibration")
    import_seconds = time.perf_counter() - started
    assert digest(restored) == new, "an undisturbed export and import do not round-trip"
    restored.close()
    return home, dest, {"old": old, "new": new}, export_seconds, import_seconds


def export_trials(base: Path, trials: int, seed: int = 0, messages: int = 4000) -> list[PortTrial]:
    """``trials`` exports over a good export, each killed at a random moment, each checked."""
    rng = random.Random(seed)
    home, dest, digests, seconds, _ = _setup(base, messages)
    by_digest = {v: k for k, v in digests.items()}
    results = []
    for n in range(trials):
        trial = PortTrial("export")
        trial.finished = _kill_during(["export", str(home), str(dest)], rng.uniform(0.0, seconds * 1.3))
        # first what the killed export left beside the folder (importing the folder tidies it away)
        for entry in sorted(dest.parent.iterdir()):
            if entry != dest:
                beside = _imported_digest(entry, base / f"check{n}-{entry.name}")
                if beside is not None and beside not in by_digest:
                    trial.problems.append(f"{entry.name} beside the export imports as a partial export")
        found = _imported_digest(dest, base / f"check{n}")
        trial.outcome = "refused" if found is None else by_digest.get(found, "other")
        if trial.outcome not in ("old", "new") or (trial.finished and trial.outcome != "new"):
            trial.lost.append(f"the folder imports as {trial.outcome!r} after a kill (finished={trial.finished})")
        results.append(trial)
        if trial.outcome == "new":  # the next trial starts over the old state again
            shutil.rmtree(dest)
            shutil.copytree(base / "old-export", dest)
    # the next export tidies what killed ones left: only the export remains
    agent = get_agent(Traveller, "traveller", root=home, read_only=True)
    export(agent, dest, overwrite=True)
    agent.close()
    left = [e.name for e in dest.parent.iterdir() if e != dest]
    if left and results:
        results[-1].problems.append(f"leftovers after the next export: {left}")
    return results


def import_trials(base: Path, trials: int, seed: int = 0, messages: int = 4000) -> list[PortTrial]:
    """``trials`` imports of a complete export, each killed at a random moment, each checked and retried."""
    rng = random.Random(seed)
    _, _, digests, _, seconds = _setup(base, messages)
    results = []
    for n in range(trials):
        trial = PortTrial("import")
        root = base / f"target{n}"
        trial.finished = _kill_during(["import", str(root), str(base / "fresh")], rng.uniform(0.0, seconds * 1.3))
        target = agent_path(Traveller.__name__, "traveller", root)
        if target.exists():
            agent = get_agent(Traveller, "traveller", root=root)
            complete = digest(agent) == digests["new"]
            agent.close()
            trial.outcome = "complete" if complete else "incomplete"
            if not complete:
                trial.lost.append("a killed import left an agent file that does not hold the export")
        else:
            trial.outcome = "none"
            if trial.finished:
                trial.lost.append("the import said it had finished but there is no agent file")
        try:
            again = import_(base / "fresh", Traveller, root=root)
        except ExportError as exc:
            if trial.outcome == "none" or "already exists" not in str(exc):
                trial.problems.append(f"the retried import failed: {exc}")
        else:
            if trial.outcome != "none":
                trial.problems.append("the retried import replaced an existing agent without overwrite=True")
            if digest(again) != digests["new"]:
                trial.lost.append("the retried import does not hold the export")
            again.close()
        # The store builds new files in .agentlab-creating beside them: the folder may stay, its files may not.
        left = [p.name for p in target.parent.iterdir() if p != target and p.name != ".agentlab-creating"] \
            if target.parent.exists() else []
        creating = target.parent / ".agentlab-creating"
        left += [f"{creating.name}/{p.name}" for p in creating.iterdir()] if creating.exists() else []
        if left:
            trial.problems.append(f"files beside the agent after the retry: {left}")
        results.append(trial)
    return results


def run_port_trials(base: Path, kind: str, trials: int, seed: int = 0) -> list[PortTrial]:
    """The ``kind`` ("export" or "import") trials in their own folder under ``base``."""
    run = export_trials if kind == "export" else import_trials
    return run(base / kind, trials, seed)
