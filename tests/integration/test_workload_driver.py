"""The workload driver's own clock: RUNNING intervals estimated from squeue samples (no cluster needed).

The live GPU-seconds check trusts the driver's record within the uncertainty the driver states, so the
estimate must really lie within that uncertainty of the true start and end, whatever the sampling.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurmbed"))
import workload  # noqa: E402


def _line(state: str) -> str:
    return f"42|42|{state}|None|gpu01|2026-12-02T13:00:00|N/A"


# Each example replays 80 samples; 150 examples keep this under a few seconds on the shared 2-core box.
@settings(max_examples=150)
@given(
    start=st.floats(5, 50),
    length=st.floats(0.01, 50),
    gaps=st.lists(st.tuples(st.floats(0.05, 3), st.floats(0, 1), st.floats(0, 1)), min_size=80, max_size=80),
)
def test_estimated_interval_holds_the_true_one_within_the_stated_uncertainty(start, length, gaps):
    end = start + length
    poller = workload.Poller()
    t = 0.0
    for gap, latency_frac, when_frac in gaps:
        tb = t + gap
        ta = tb + latency_frac  # squeue itself takes up to 1 s
        seen_at = tb + when_frac * (ta - tb)  # the instant slurmctld answered
        state = "PENDING" if seen_at < start else "RUNNING" if seen_at < end else "COMPLETED"
        poller.observe(_line(state), tb, ta)
        t = ta
    (iv,) = poller.intervals.get("42") or [None]
    if iv is None:  # never sampled while running: the driver falls back to squeue's own start/end
        return
    est_start, est_end, unc_s, unc_e, _ = iv
    assert abs(est_start - start) <= unc_s + 1e-9
    if poller.states["42"] == "COMPLETED":
        assert abs(est_end - end) <= unc_e + 1e-9


def test_a_requeued_job_gets_one_interval_per_attempt():
    poller = workload.Poller()
    for i, state in enumerate(
        ["PENDING", "RUNNING", "RUNNING", "PENDING", "PENDING", "RUNNING", "COMPLETED"]
    ):
        poller.observe(_line(state), float(i), i + 0.1)
    ivs = poller.intervals["42"]
    assert [round(a, 2) for a, *_ in ivs] == [0.55, 4.55]  # midpoints of (0, 1.1] and (4, 5.1]
    assert [round(b, 2) for _, b, *_ in ivs] == [2.55, 5.55]  # midpoints of (2, 3.1] and (5, 6.1]
    assert poller.states["42"] == "COMPLETED"
