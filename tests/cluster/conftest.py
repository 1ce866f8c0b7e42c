"""One local Ray for the whole test session (``ray.init(num_cpus=2, include_dashboard=False)``), shut down after.

Ray starts in 3-20 s and takes about 0.8 GB here, so it is started once, on first use. Its workers get this folder
on their ``PYTHONPATH`` so that they import the test agent classes (``cluster_agents``) by name. After each test,
every actor the test left in the ``agentlab`` namespace is killed, so no actor (and no open file) leaks.

Every test that uses Ray is marked ``slow``: besides Ray's start, each actor is a new worker process, which takes
1-5 s to start on this machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "ray" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def ray_session():
    ray = pytest.importorskip("ray")
    import agentlab

    path = [str(HERE), str(Path(agentlab.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    ray.init(num_cpus=2, include_dashboard=False, logging_level="error",
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in path if p),
                                       "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}})
    yield ray
    ray.shutdown()


@pytest.fixture
def ray(ray_session):
    """The session's Ray; actors the test left in the ``agentlab`` namespace are killed afterwards."""
    yield ray_session
    from ray.util import list_named_actors

    for entry in list_named_actors(all_namespaces=True):
        if entry["namespace"] == "agentlab":
            try:
                ray_session.kill(ray_session.get_actor(entry["name"], namespace="agentlab"))
            except ValueError:
                pass  # already gone
