"""The official `agents` JavaScript client (pinned in tests/js/package.json) against `agentlab serve`.

tests/js/conformance.mjs drives upstream's own AgentClient and agentFetch: identity and initial state, a
setState broadcast to a second client, a rejected update reported to its sender and not stored, a readonly
client, plain and streaming RPC whose state changes reach the other client, two names kept apart, HTTP
answers and a 404. The server is the real CLI in its own process; once it has stopped, the DuckDB files
must hold what the clients stored.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab import get_agent

REPO = Path(__file__).resolve().parent.parent
JS = REPO / "tests" / "js"

pytestmark = pytest.mark.slow


def _installed_version(package: str) -> str | None:
    manifest = JS / "node_modules" / package / "package.json"
    return json.loads(manifest.read_text())["version"] if manifest.is_file() else None


@pytest.fixture(scope="module")
def node_client() -> Path:
    """tests/js/node_modules with the pinned packages (npm ci when they are missing or other versions)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("Node and npm are needed for the conformance test: run `make js` (Debian's nodejs and npm).")
    pins = json.loads((JS / "package.json").read_text())["dependencies"]
    if any(_installed_version(name) != version for name, version in pins.items()):
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
            cwd=JS, check=True, timeout=600,
        )
    assert {name: _installed_version(name) for name in pins} == pins
    return JS


def _serve(root: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentlab.cli", "serve", "tests/js/served_agents.py:Counter", "--root", str(root),
         "--port", "0", "--log-level", "warning"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "serving" not in line:
        proc.kill()
        pytest.fail(f"agentlab serve did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    url = line.split(" at ", 1)[1].split("/agents/", 1)[0]
    return proc, url.removeprefix("http://")


def test_the_official_client_speaks_to_agentlab_serve(node_client, tmp_path):
    root = tmp_path / "served"
    proc, host = _serve(root)
    try:
        run = subprocess.run(["node", "conformance.mjs", host], cwd=node_client, capture_output=True, text=True,
                             timeout=120)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, server_log = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, server_log = proc.communicate()
    report = json.loads(run.stdout.strip().splitlines()[-1]) if run.stdout.strip() else {"ok": False}
    assert report["ok"], f"{report.get('error')}\n--- node stderr:\n{run.stderr}\n--- server log:\n{server_log}"
    assert run.returncode == 0
    assert proc.returncode == 0, server_log
    assert report["results"]["final"] == {"alice": {"count": 11}, "bob": {"count": 42}}
    assert report["results"]["identity"] == ["alice", "counter"]

    # The server has stopped: its files hold what the clients stored, one file per name.
    from tests.js.served_agents import Counter  # the class the server served
    alice = get_agent(Counter, "alice", root=root)
    bob = get_agent(Counter, "bob", root=root)
    assert (alice.state, bob.state) == ({"count": 11}, {"count": 42})
    assert alice.path != bob.path and alice.path.parent == root / "counter"
