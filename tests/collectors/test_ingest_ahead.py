"""ingest.ahead: slices parsed one step ahead in a worker thread reach the loader unchanged, in order, with
the worker's error raised in the loader and no worker left running once the loader stops."""

from __future__ import annotations

import threading

import pytest
from slurmscope.collectors.ingest import ahead


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "slurmscope-parse-ahead"]


def test_items_arrive_in_order_and_the_worker_ends():
    assert list(ahead(iter(range(50)))) == list(range(50))
    assert _workers() == []


def test_an_error_while_producing_is_raised_after_the_items_before_it():
    def produce():
        yield "slice 1"
        yield "slice 2"
        raise OSError("damaged gzip input")

    got = []
    with pytest.raises(OSError, match="damaged gzip input"):
        for item in ahead(produce()):
            got.append(item)
    assert got == ["slice 1", "slice 2"]
    assert _workers() == []


def test_closing_early_stops_the_worker_before_it_reads_everything():
    produced = []

    def produce():
        for i in range(1000):
            produced.append(i)
            yield i

    gen = ahead(produce())
    assert next(gen) == 0
    gen.close()
    assert _workers() == []
    # one item handed over, at most one waiting in the queue, at most one being put when stopped
    assert len(produced) <= 3


def test_closing_early_closes_the_producer_before_returning():
    """A parser that runs its own threads (sacct's parse workers) stops them when closed: ahead closes it,
    rather than leaving that to whenever the last reference goes."""
    closed = threading.Event()

    def produce():
        try:
            yield from range(1000)
        finally:
            closed.set()

    producer = produce()  # still referenced here, so only an explicit close runs its cleanup
    gen = ahead(producer)
    assert next(gen) == 0
    gen.close()
    assert closed.is_set()
    assert _workers() == []
