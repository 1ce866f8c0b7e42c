"""Shared fixtures: real DuckDB stores, and AGENTLAB_HOME pointed at a fresh folder for every test."""

from __future__ import annotations

import os

import pytest

from agentlab.agent import _agent as agent_module
from agentlab.store._database import Store

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def agentlab_home(tmp_path, monkeypatch):
    """Every test gets its own agent root, and no live agent leaks from one test to the next."""
    home = tmp_path / "agentlab-home"
    monkeypatch.setenv("AGENTLAB_HOME", str(home))
    yield home
    for live in list(agent_module._registry.values()):
        live.close()


@pytest.fixture
def store():
    """An in-memory DuckDB store with the full schema."""
    s = Store()
    yield s
    s.close()


@pytest.fixture
def store_path(tmp_path):
    """A path for a DuckDB file in the test's temporary folder."""
    return tmp_path / "agent.duckdb"
