"""Export and import (agentlab/portable.py) killed at chosen moments, and on a full disk.

A child process replaces one step of the export or import with an immediate SIGKILL; afterwards the destination
must be as it was (the old export, no agent file, the old agent) or complete, and the next run tidies up. The
disk-full cases mount a small tmpfs (as root) so that writes really fail with ENOSPC.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab import Agent, get_agent
from agentlab.agent import _atomic
from agentlab.agent._portable import MANIFEST, export, import_
from agentlab.errors import ExportDiskFullError, ExportError
from agentlab.session._session import Session
from agentlab.store._naming import agent_path

from .portlab import digest

KILL = r'''
import importlib, os, signal, sys
from agentlab import Agent, get_agent
from agentlab.agent._portable import export, import_

class Pad(Agent):
    initial_state = {"n": 0}

mode, step, root, folder = sys.argv[1:5]
module, name = step.split(":")

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

setattr(importlib.import_module(module), name, die)
if mode == "export":
    export(get_agent(Pad, "pad", root=root, read_only=True), folder, overwrite=True)
else:
    import_(folder, Pad, root=root, overwrite=True)
print("finished", flush=True)
'''


class Pad(Agent):
    initial_state = {"n": 0}


def kill_at(mode: str, step: str, root: Path, folder: Path) -> None:
    """Run an export or import (overwrite=True) in a child that SIGKILLs itself where ``step`` is called."""
    done = subprocess.run([sys.executable, "-c", KILL, mode, step, str(root), str(folder)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]


def add(agent: Agent, start: int, count: int, size: int = 40) -> None:
    Session(agent).append_messages([
        {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"note {i} " + "x" * size}]}
        for i in range(start, start + count)
    ])
    agent.set_state({"n": start + count})


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def pad(tmp_path):
    agent = get_agent(Pad, "pad", root=tmp_path / "home")
    add(agent, 0, 300)
    agent.sql('CREATE TABLE "odd/name" (x INTEGER)')
    agent.sql('INSERT INTO "odd/name" VALUES (1), (2)')
    yield agent
    agent.close()


def imported(folder: Path, root: Path) -> str:
    agent = import_(folder, Pad, root=root)
    try:
        return digest(agent)
    finally:
        agent.close()


class TestKilledExport:
    def test_killed_after_writing_its_tables_the_old_export_is_untouched(self, pad, tmp_path):
        dest = tmp_path / "out" / "pad"
        export(pad, dest)
        old_files, old = files(dest), digest(pad)
        add(pad, 300, 100)
        pad.close()
        kill_at("export", "agentlab.agent._export:_version", tmp_path / "home", dest)  # every table written, no manifest
        assert files(dest) == old_files
        beside = [p for p in dest.parent.iterdir() if p != dest]
        assert len(beside) == 1 and not (beside[0] / MANIFEST).exists()
        with pytest.raises(ExportError, match=r"No manifest.json"):
            import_(beside[0], Pad, root=tmp_path / "check2")
        assert imported(dest, tmp_path / "check") == old
        assert list(dest.parent.iterdir()) == [dest]  # the import removed the killed export's folder

    def test_killed_right_after_the_swap_the_new_export_is_in_place(self, pad, tmp_path):
        dest = tmp_path / "out" / "pad"
        export(pad, dest)
        add(pad, 300, 100)
        new = digest(pad)
        pad.close()
        kill_at("export", "agentlab.agent._atomic:discard_folder", tmp_path / "home", dest)
        assert len(list(dest.parent.iterdir())) == 2  # the old export is still beside it, complete
        export(get_agent(Pad, "pad", root=tmp_path / "home", read_only=True), dest, overwrite=True)
        assert list(dest.parent.iterdir()) == [dest]  # the next export removed it
        assert imported(dest, tmp_path / "check") == new

    def test_an_old_export_moved_aside_by_a_killed_two_rename_swap_is_put_back(self, pad, tmp_path):
        dest = tmp_path / "out" / "pad"
        export(pad, dest)
        old = digest(pad)
        aside = dest.with_name(_atomic.temp_path(dest, "replaced").name.replace(f"-{os.getpid()}-", f"-{dead_pid()}-"))
        os.rename(dest, aside)  # where the swap without renameat2 is killed between its two renames
        assert imported(dest, tmp_path / "check") == old
        assert list(dest.parent.iterdir()) == [dest]

    def test_a_live_writers_temporary_folder_is_left_alone(self, pad, tmp_path):
        dest = tmp_path / "out" / "pad"
        export(pad, dest)
        busy = _atomic.temp_path(dest, "export")  # this process's id: a writer that is still running
        busy.mkdir()
        export(pad, dest, overwrite=True)
        assert busy.is_dir()


class TestKilledImport:
    def test_killed_inside_the_restore_there_is_no_agent_and_a_retry_works(self, pad, tmp_path):
        folder = export(pad, tmp_path / "export")
        expected = digest(pad)
        kill_at("import", "agentlab.agent._portable:_advance_sequences", tmp_path / "second", folder)
        target = agent_path("Pad", "pad", tmp_path / "second")
        assert not target.exists() and not list(tmp_path.glob("second/**/*.duckdb"))
        assert imported(folder, tmp_path / "second") == expected
        assert [p.name for p in target.parent.iterdir()] == [target.name]

    def test_killed_while_overwriting_the_old_agent_is_intact(self, pad, tmp_path):
        folder = export(pad, tmp_path / "export")
        other = get_agent(Pad, "pad", root=tmp_path / "second")
        add(other, 0, 5)
        old = digest(other)
        other.close()
        kill_at("import", "agentlab.agent._portable:_advance_sequences", tmp_path / "second", folder)
        again = get_agent(Pad, "pad", root=tmp_path / "second")
        assert digest(again) == old
        again.close()

    def test_overwrite_folds_in_the_old_agents_log_and_replaces_it(self, pad, tmp_path):
        folder = export(pad, tmp_path / "export")
        code = ("import os, signal\nfrom agentlab import Agent, get_agent\nclass Pad(Agent): pass\n"
                f"a = get_agent(Pad, 'pad', root={str(tmp_path / 'second')!r})\n"
                "a.sql('CREATE TABLE scratch AS SELECT 1 AS x')\nos.kill(os.getpid(), signal.SIGKILL)\n")
        subprocess.run([sys.executable, "-c", code], timeout=120)
        target = agent_path("Pad", "pad", tmp_path / "second")
        assert target.with_name(target.name + ".wal").exists()  # a writer killed before its checkpoint
        restored = import_(folder, Pad, root=tmp_path / "second", overwrite=True)
        assert digest(restored) == digest(pad)
        restored.close()
        assert [p.name for p in target.parent.iterdir()] == [target.name]


@pytest.fixture
def small_disk(tmp_path):
    """A 6 MiB tmpfs mounted for the test (root only); unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def add_bulk(agent: Agent, megabytes: int) -> None:
    """Messages of random text, which Parquet and DuckDB cannot compress much."""
    for i in range(megabytes):
        text = secrets.token_urlsafe(768 * 1024)
        Session(agent).append_message({"id": f"bulk{i}", "role": "user", "parts": [{"type": "text", "text": text}]})


@pytest.mark.slow
class TestFullDisk:
    def test_an_export_that_fills_the_disk_leaves_the_old_export(self, pad, tmp_path, small_disk):
        dest = small_disk / "pad"
        export(pad, dest)
        old_files, old = files(dest), digest(pad)
        add_bulk(pad, 8)
        with pytest.raises(ExportDiskFullError, match="is full") as info:
            export(pad, dest, overwrite=True)
        assert info.value.path == str(dest)
        assert files(dest) == old_files and list(small_disk.iterdir()) == [dest]
        assert imported(dest, tmp_path / "check") == old

    def test_an_import_that_fills_the_disk_creates_no_agent_file(self, pad, tmp_path, small_disk):
        add_bulk(pad, 8)
        folder = export(pad, tmp_path / "export")
        with pytest.raises(ExportDiskFullError, match="is full") as info:
            import_(folder, Pad, root=small_disk)
        target = agent_path("Pad", "pad", small_disk)
        assert info.value.path == str(target)
        assert [p for p in small_disk.rglob("*") if p.is_file()] == []

    def test_an_import_over_an_agent_that_fills_the_disk_keeps_the_old_agent(self, pad, tmp_path, small_disk):
        other = get_agent(Pad, "pad", root=small_disk)
        add(other, 0, 5)
        old = digest(other)
        other.close()
        target = agent_path("Pad", "pad", small_disk)
        before = target.read_bytes()
        add_bulk(pad, 8)
        folder = export(pad, tmp_path / "export")
        with pytest.raises(ExportDiskFullError):
            import_(folder, Pad, root=small_disk, overwrite=True)
        assert target.read_bytes() == before and [p.name for p in target.parent.iterdir()] == [target.name]
        again = get_agent(Pad, "pad", root=small_disk)
        assert digest(again) == old
        again.close()
