"""A server killed while its agents hibernate and wake loses no acknowledged update (see servelab)."""

from __future__ import annotations

import pytest

from .servelab import serve_kill_trial

pytestmark = pytest.mark.slow


def test_a_server_killed_during_hibernate_and_wake_cycles_loses_no_acknowledged_update(tmp_path):
    trials = [serve_kill_trial(tmp_path / f"t{seed}", seed) for seed in range(8)]
    assert [t.lost for t in trials] == [[]] * len(trials), [(t.acked, t.stored, t.sent) for t in trials]
    assert sum(t.wakes for t in trials) >= 8, "the trials did not go through hibernate/wake cycles"
    assert sum(sum(t.acked.values()) for t in trials) >= 200, "too few updates were acknowledged to mean anything"
