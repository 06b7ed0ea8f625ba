"""`scontrol ping` exits 1 when a controller is DOWN, and that output is the measurement (issue 9).

Found with a slurmctld restart on the live bed (tests/integration/test_slurm_faults_live.py): the ping run
was recorded as a failure and stored nothing, so /metrics kept the last stored `slurmscope_controller_up 1`
for the whole outage and SlurmControllerUnreachable could not fire. A fake scontrol prints what Slurm 22.05
printed there.
"""

from __future__ import annotations

from datetime import UTC, datetime

from slurmscope.collectors.collect import collect

from slurmscope.config import load_config

NOW = datetime(2024, 5, 10, 12, 0, tzinfo=UTC)


def fake_scontrol(tmp_path, stdout: str, rc: int, stderr: str = ""):
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\nprintf '%s' '{stdout}'\nprintf '%s' '{stderr}' >&2\nexit {rc}\n")
    script.chmod(0o755)
    return load_config(None, env={}).with_overrides(slurm={"scontrol": str(script), "timeout_seconds": 5.0})


def pings(con) -> list[tuple]:
    return con.execute("SELECT host, role, up FROM controller_pings ORDER BY snapshot_time").fetchall()


def test_controller_down_is_stored_as_down_not_as_a_failed_run(con, tmp_path):
    cfg = fake_scontrol(tmp_path, "Slurmctld(primary) at ctl1 is UP\n", 0)
    [up] = collect(con, cfg, "ping", now=NOW)
    assert up.status == "ok"
    cfg = fake_scontrol(
        tmp_path, "Slurmctld(primary) at ctl1 is DOWN\n*****\n** RESTORE SLURMCTLD DAEMON TO SERVICE **\n", 1
    )
    [down] = collect(con, cfg, "ping", now=NOW.replace(minute=1))
    assert (down.status, down.rows) == ("ok", 1)
    assert pings(con) == [("ctl1", "primary", True), ("ctl1", "primary", False)]
    assert con.execute("SELECT status FROM collector_runs ORDER BY run_id").fetchall() == [("ok",), ("ok",)]


def test_exit_1_without_a_ping_line_is_still_a_failure(con, tmp_path):
    cfg = fake_scontrol(tmp_path, "", 1, "scontrol: error: Unable to establish a connection to munge")
    [out] = collect(con, cfg, "ping", now=NOW)
    assert out.status == "error" and "munge" in out.error
    assert pings(con) == []
    assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0


def test_other_exit_codes_are_failures_even_with_output(con, tmp_path):
    cfg = fake_scontrol(tmp_path, "Slurmctld(primary) at ctl1 is DOWN\n", 2)
    [out] = collect(con, cfg, "ping", now=NOW)
    assert out.status == "error" and "exit status 2" in out.error
    assert pings(con) == []
