"""`scontrol ping` parser: the real capture and a backup controller DOWN."""

from __future__ import annotations

from slurmscope.collectors import ping

from tests.collectors.scontrol_support import FIX, run


def test_ping_real_and_backup_down():
    p = run(ping, (FIX / "slurm-22.05/ping_final.txt").read_bytes())
    assert p.quarantine.height == 0
    assert p.tables["controller_pings"].select("host", "role", "up").rows() == [("vm", "primary", True)]
    p = run(ping, "Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup) at ctl2 is DOWN\nhello\n")
    assert p.tables["controller_pings"].select("host", "role", "up").rows() == [
        ("ctl1", "primary", True),
        ("ctl2", "backup", False),
    ]
    assert p.quarantine["line_no"].to_list() == [3]
