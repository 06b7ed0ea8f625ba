"""sshare under `-M <cluster>` (slurm.cluster_flag): Slurm prints `CLUSTER: <name>` before the header even
for one cluster (src/sshare/sshare.c `_multi_cluster`, 22.05 to 25.11; the live test on the bed checks the
real line). The line is Slurm's banner, not an association."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from slurmscope.collectors import sshare

from slurmscope.config import load_config
from tests.paths import FIXTURES

CAPTURE = FIXTURES / "slurm-22.05" / "sshare_final.txt"


def _parse(data: bytes):
    return sshare.parse(
        data, cluster="c", snapshot_time=datetime(2026, 12, 2, tzinfo=UTC), tz=ZoneInfo("UTC")
    )


def test_the_cluster_banner_before_the_header_is_skipped_and_the_rows_are_the_capture_s():
    plain = _parse(CAPTURE.read_bytes())
    banner = _parse(b"CLUSTER: slurmbed\n" + CAPTURE.read_bytes())
    assert banner.quarantine.height == 0
    assert banner.tables["shares"].equals(plain.tables["shares"]) and plain.tables["shares"].height > 5


def test_a_banner_anywhere_else_is_still_a_bad_line():
    lines = CAPTURE.read_bytes().splitlines(keepends=True)
    p = _parse(b"".join([lines[0], b"CLUSTER: slurmbed\n", *lines[1:]]))
    assert p.quarantine["line_no"].to_list() == [2]


def test_the_live_command_names_the_cluster_with_dash_m(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text('[[clusters]]\nname = "beta"\n[clusters.slurm]\ncluster_flag = true\n')
    beta = load_config(cfg, env={}).for_cluster("beta")
    assert sshare.command(beta)[:5] == ["sshare", "-M", "beta", "--all", "--parsable2"]
    assert sshare.command(beta)[5] == f"--format={','.join(sshare.LIVE_FIELDS)}"
