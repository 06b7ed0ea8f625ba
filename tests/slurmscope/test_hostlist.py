"""Slurm hostlists: expansion (strict for parsers, lenient for stored data) and compression."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscope.hostlist import compress_hostlist, expand_hostlist, expand_hostlist_lenient


def test_expand_hostlist():
    assert expand_hostlist("gpu[001-004,010],cpu-a[1-3]") == [
        "gpu001",
        "gpu002",
        "gpu003",
        "gpu004",
        "gpu010",
        "cpu-a1",
        "cpu-a2",
        "cpu-a3",
    ]
    assert expand_hostlist("cpn-f13-03-[01-02],cpn-f13-04-[01-02]") == [
        "cpn-f13-03-01",
        "cpn-f13-03-02",
        "cpn-f13-04-01",
        "cpn-f13-04-02",
    ]
    assert expand_hostlist("r[1-2]n[01-02]") == ["r1n01", "r1n02", "r2n01", "r2n02"]
    assert expand_hostlist("node7") == ["node7"]
    assert expand_hostlist("None assigned") == []
    assert expand_hostlist("(null)") == []
    with pytest.raises(ValueError):
        expand_hostlist("gpu[1-3")
    with pytest.raises(ValueError):
        expand_hostlist("gpu[3-1]")


def test_compress_hostlist_round_trip():
    assert compress_hostlist(["gpu001", "gpu002", "gpu003", "gpu004", "gpu010"]) == "gpu[001-004,010]"
    assert compress_hostlist(["node7"]) == "node7"
    assert compress_hostlist(["login", "c1", "c2", "c2"]) == "login,c[1-2]"
    s = "gpu[001-004,010],cpu-a[1-3]"
    assert compress_hostlist(expand_hostlist(s)) == s


@settings(max_examples=300)  # a helper, not a parser: the CI profile's 2,000 examples are for parsers
@given(st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=30))
def test_compress_expand_inverse(nums):
    names = [f"n{n:03d}" for n in nums]
    assert sorted(set(expand_hostlist(compress_hostlist(names)))) == sorted(set(names))


def test_lenient_expansion_reads_what_the_strict_one_reads():
    assert expand_hostlist_lenient("g[01-03,7],login1") == ["g01", "g02", "g03", "g7", "login1"]
    assert expand_hostlist_lenient("r[1-2]n[08-09]") == ["r1n08", "r1n09", "r2n08", "r2n09"]
    assert expand_hostlist_lenient("None assigned") == [] and expand_hostlist_lenient(None) == []


def test_stored_node_lists_expand_bounded_and_unreadable_ones_stay_one_name():
    assert expand_hostlist_lenient("gpu[001-003,010],login1") == [
        "gpu001",
        "gpu002",
        "gpu003",
        "gpu010",
        "login1",
    ]
    assert expand_hostlist_lenient("None assigned") == [] and expand_hostlist_lenient(None) == []
    # would be 10^9 names: the pipeline keeps the attempt under its literal NodeList instead of running out of memory
    assert expand_hostlist_lenient("n[0-999999999]") == ["n[0-999999999]"]
    assert expand_hostlist_lenient("a[0-999]b[0-1000]") == ["a[0-999]b[0-1000]"]
