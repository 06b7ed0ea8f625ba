"""The report's failure table: the user/system split of mart_job_outcomes_daily, the one the alert uses."""

from __future__ import annotations

import re
from datetime import date

from slurmscope.report import _reliability_section, collect_data


def _cells(html: str, header: str) -> list[list[str]]:
    """Rows of the table whose first header cell is `header`."""
    tables = re.findall(r"<table[^>]*>.*?</table>", html)
    table = next(t for t in tables if re.search(rf"<th[^>]*>{re.escape(header)}</th>", t))
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table)
    return [cells for row in rows if (cells := re.findall(r"<td[^>]*>(.*?)</td>", row))]


def test_failure_table_splits_user_and_system_failures(con):
    day = date(2026, 2, 10)
    for state, failure, jobs, hours in (
        ("COMPLETED", "none", 10, 20.0),
        ("FAILED", "user", 3, 3.0),  # non-zero exits
        ("FAILED", "system", 1, 8.0),  # a non-zero exit its node incident caused
        ("NODE_FAIL", "system", 2, 4.0),
        ("CANCELLED", "user", 4, 1.0),  # cancelled by their owners
        ("CANCELLED", "none", 5, 0.0),  # cancelled while pending: never ran, not a failure
    ):
        con.execute(
            'INSERT INTO mart_job_outcomes_daily (cluster, day, "partition", account, state, failure, jobs,'
            " gpu_hours) VALUES ('c1', ?, 'gpu', 'a', ?, ?, ?, ?)",
            [day, state, failure, jobs, hours],
        )
    html = _reliability_section(collect_data(con, "c1", date(2026, 2, 1)))
    # 25 attempts ended: user 3 + 4 = 7 (28.0%), system 1 + 2 = 3 (12.0%); no requeue rows
    assert _cells(html, "attempts ended") == [["25", "7", "28.0%", "3", "12.0%", "0", "–", "–"]]
    assert _cells(html, "failure") == [
        ["system", "NODE_FAIL", "2", "4.0"],
        ["system", "FAILED", "1", "8.0"],
        ["user", "CANCELLED", "4", "1.0"],
        ["user", "FAILED", "3", "3.0"],
    ]
    assert "docs/pipelines.md#job-failures" in html
