"""SIGKILL a writer at random moments: no acknowledged write is ever lost, the file stays consistent.

The benchmark (benchmarks/reliability.py) runs 20 trials per scenario; the tests run fewer.
"""

from __future__ import annotations

import pytest

from .crashlab import SCENARIOS, run_trials

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_killed_writers_lose_no_acknowledged_write(tmp_path, scenario):
    results = run_trials(tmp_path, scenario, trials=2, seed=7)
    assert sum(r.acknowledged for r in results) > 0, "the writer never acknowledged anything"
    assert [r.lost for r in results] == [[] for _ in results]
    assert [r.problems for r in results] == [[] for _ in results]
