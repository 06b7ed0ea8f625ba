"""The XID vocabulary follows NVIDIA's catalogue: hand-checked entries from the published sheet."""

import csv
from importlib.resources import files

import pytest

from slurmscope import xid

# (code, NVIDIA's immediate resolution as printed in the catalogue sheet, our action)
PUBLISHED = [
    (13, "RESTART_APP", "restart_app"),
    (31, "RESTART_APP", "restart_app"),
    (43, "IGNORE", "ignore"),
    (45, "WORKFLOW_XID_45", "ignore"),
    (48, "WORKFLOW_XID_48", "reset_gpu"),
    (62, "RESET_GPU", "reset_gpu"),
    (63, "IGNORE", "ignore"),
    (64, "RESET_GPU", "reset_gpu"),
    (74, "WORKFLOW_NVLINK_ERR", "reset_gpu"),
    (79, "RESTART_BM", "reboot_node"),
    (92, "IGNORE", "ignore"),
    (94, "RESTART_APP", "restart_app"),
    (95, "RESET_GPU", "reset_gpu"),
    (119, "RESET_GPU", "reset_gpu"),
    (136, "RESET_GPU", "reset_gpu"),
    (140, "RESET_GPU", "reset_gpu"),
    (143, "RESET_GPU", "reset_gpu"),
    (144, "WORKFLOW_NVLINK5_ERR", "investigate"),
    (150, "WORKFLOW_NVLINK5_ERR", "investigate"),
    (151, "RESTART_VM", "reboot_node"),
    (154, "XID_154", "ignore"),
]


@pytest.mark.parametrize(("code", "resolution", "action"), PUBLISHED)
def test_entries_match_the_published_catalogue(code, resolution, action):
    entry = xid.lookup(code)
    assert entry.immediate_resolution == resolution
    assert entry.action == action


def test_every_code_of_the_sheet_is_read_and_every_resolution_has_an_action():
    text = files("slurmscope").joinpath("nvidia_xid_catalog.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    assert [int(r["xid"]) for r in rows] == list(range(1, 173))
    assert set(xid.catalog()) == set(range(1, 173))


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_xids_nvidia_attributes_to_the_application_never_implicate_hardware(code):
    entry = xid.lookup(code)
    assert entry.application and not entry.implicates_hardware and entry.verdict == "ok"


def test_a_contained_memory_error_restarts_the_application_but_is_the_gpus_fault():
    entry = xid.lookup(94)
    assert entry.verdict == "ok" and not entry.application


def test_software_ignorable_codes_are_not_failing():
    assert {63, 92}.isdisjoint(xid.codes("failing"))
    assert {48, 62, 64, 74, 79, 95, 119, 120, 136, 140, 143, 151} <= set(xid.codes("failing"))


def test_an_unlisted_code_is_investigated_not_ignored():
    entry = xid.lookup(999)
    assert entry.action == "investigate" and entry.verdict == "degraded"


def test_verdict_lists_partition_the_catalogue():
    lists = [set(xid.codes(v)) for v in ("ok", "degraded", "failing")]
    assert sum(len(s) for s in lists) == len(xid.catalog())
    assert set().union(*lists) == set(xid.catalog())
