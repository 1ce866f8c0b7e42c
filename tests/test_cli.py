"""The ``agentlab`` command through its real entry point, in a subprocess: one line per error, --debug, --version."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import agentlab

ENTRY = Path(sys.executable).with_name("agentlab")
ROOT = Path(agentlab.__file__).parent.parent


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([str(ENTRY), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


@pytest.fixture(autouse=True)
def _installed():
    if not ENTRY.exists():  # pragma: no cover - the package is installed in the test environment
        pytest.skip(f"no agentlab entry point beside {sys.executable}")


class TestErrorsAreOneLine:
    @pytest.mark.parametrize("args, says", [
        (("eval", "locomo", "--data", "missing.json"), "LoCoMo file not found: missing.json. Check the path"),
        (("eval", "bundled", "--strategies", "bm25,nope"), "Unknown strategy 'nope'; choose from"),
        (("eval", "bundled", "--k", "1,x"), "--k takes comma-separated cut-offs of 1 or more, such as 1,5,10"),
        (("eval", "bundled", "--k", "0"), "--k takes comma-separated cut-offs"),
        (("experiment", "locomo", "--data", "missing.json"), "missing.json"),
    ], ids=["missing file", "bad strategy", "bad k", "zero k", "experiment missing file"])
    def test_a_failing_command_prints_one_line_and_exits_non_zero(self, tmp_path, args, says):
        done = run(*args, cwd=tmp_path)
        assert done.returncode != 0 and done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0] and lines[0].startswith(f"agentlab {args[0]}")
        assert "Traceback" not in done.stderr

    def test_the_missing_file_case_exits_with_status_1(self, tmp_path):
        assert run("eval", "locomo", "--data", "missing.json", cwd=tmp_path).returncode == 1

    def test_a_usage_mistake_is_one_line_too(self, tmp_path):
        done = run("eval", "bundled", "--window", "wide", cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            "agentlab eval: argument --window: invalid int value: 'wide' (see agentlab eval --help)"]


class TestDebugAndVersion:
    @pytest.mark.parametrize("where", ["before", "after"])
    def test_debug_shows_the_traceback(self, tmp_path, where):
        args = ["eval", "locomo", "--data", "missing.json"]
        args = ["--debug", *args] if where == "before" else [*args, "--debug"]
        done = run(*args, cwd=tmp_path)
        assert done.returncode == 1 and "Traceback (most recent call last)" in done.stderr
        assert "agentlab.errors.DatasetError: LoCoMo file not found" in done.stderr

    def test_version(self, tmp_path):
        done = run("--version", cwd=tmp_path)
        assert (done.returncode, done.stdout.strip()) == (0, f"agentlab {agentlab.__version__}")
