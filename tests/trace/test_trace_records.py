"""Trace as a value: validation, sequence protocol, equality, filter, Trace.of."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulacra.errors import ConfigError, TraceError
from simulacra.trace import JsonlTracer, MemoryTracer, Trace

Record = tuple[float, str, str, object]

RECORDS: list[Record] = [
    (0.0, "spawn", "a", None),
    (0.0, "spawn", "b", None),
    (1.0, "resume", "a", {"x": 1}),
    (2.0, "exit", "b", None),
    (2.0, "exit", "a", [1, 2]),
]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            (0.0, "k", "w"),
            "record 2: a record must be a 4-tuple (time, kind, who, payload), got 3 items",
        ),
        ((0.0, "k", "w", None, 1), "record 2: a record must be a 4-tuple"),
        ("spawn", "record 2: a record must be a 4-tuple"),
        (
            None,
            "record 2: a record must be a 4-tuple (time, kind, who, payload), got NoneType None",
        ),
        (("0", "k", "w", None), "record 2: time must be a finite float, got str '0'"),
        ((True, "k", "w", None), "record 2: time must be a finite float, got bool True"),
        ((math.nan, "k", "w", None), "record 2: time must be a finite float, got nan"),
        ((math.inf, "k", "w", None), "record 2: time must be a finite float, got inf"),
        ((10**400, "k", "w", None), "record 2: time must be a finite float"),
        ((0.0, None, "w", None), "record 2: kind must be a str, got NoneType None"),
        ((0.0, "k", 3, None), "record 2: who must be a str, got int 3"),
    ],
)
def test_bad_record_shape_names_the_index(bad: object, message: str) -> None:
    with pytest.raises(TraceError) as info:
        Trace([RECORDS[0], RECORDS[1], bad])  # type: ignore[list-item]
    assert str(info.value).startswith(message)


def test_unencodable_payload_names_the_index() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(TraceError, match=r"^record 1: payload contains a reference cycle"):
        Trace([RECORDS[0], (0.0, "k", "w", loop)])


def test_list_records_and_int_times_are_normalised() -> None:
    t = Trace([[1, "k", "w", None]])  # type: ignore[list-item]
    assert t.records == ((1.0, "k", "w", None),)
    assert type(t[0][0]) is float


def test_not_iterable_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="iterable"):
        Trace(5)  # type: ignore[arg-type]


def test_sequence_protocol() -> None:
    t = Trace(iter(RECORDS))
    assert len(t) == 5
    assert list(t) == RECORDS
    assert t.records == tuple(RECORDS)
    assert t[2] == RECORDS[2]
    assert t[-1] == RECORDS[-1]
    head = t[:2]
    assert isinstance(head, Trace)
    assert head == Trace(RECORDS[:2])
    assert head.digest() == Trace(RECORDS[:2]).digest()


def test_equality_hash_and_repr() -> None:
    a = Trace(RECORDS)
    b = Trace(list(RECORDS))
    assert a == b
    assert hash(a) == hash(b)
    assert a != Trace(RECORDS[:-1])
    assert a != RECORDS  # not a Trace
    a.digest()
    assert a == b  # one digest cached, the other not
    b.digest()
    assert a == b
    assert len({a, b}) == 1
    assert repr(a) == f"<Trace of 5 records, digest {a.digest()[:16]}>"


def test_trace_is_a_snapshot_of_mutable_payloads() -> None:
    payload = {"x": [1]}
    t = Trace([(0.0, "k", "w", payload)])
    before = t.digest()
    payload["x"].append(2)
    assert before == t.digest()
    assert Trace([(0.0, "k", "w", {"x": [1]})]) == t


def test_filter() -> None:
    t = Trace(RECORDS)
    assert t.filter(kinds=["exit"]).records == (RECORDS[3], RECORDS[4])
    assert t.filter(who="a").records == (RECORDS[0], RECORDS[2], RECORDS[4])
    assert t.filter(kinds={"spawn", "exit"}, who="b").records == (RECORDS[1], RECORDS[3])
    assert t.filter() == t
    assert t.filter(kinds=[]) == Trace([])
    assert t.filter(kinds=["exit"]).digest() == Trace([RECORDS[3], RECORDS[4]]).digest()


def test_filter_rejects_a_bare_string() -> None:
    with pytest.raises(ConfigError, match=r"write kinds=\['exit'\]"):
        Trace(RECORDS).filter(kinds="exit")


class _TracedSim:
    """Stands in for Sim(trace=True): exposes trace_records."""

    def __init__(self, records: list[Record] | None) -> None:
        self.trace_records = records


def test_of_accepts_traces_sims_and_iterables() -> None:
    t = Trace(RECORDS)
    assert Trace.of(t) is t
    assert Trace.of(_TracedSim(list(RECORDS))) == t
    assert Trace.of(RECORDS) == t

    def gen() -> Iterator[Record]:
        yield from RECORDS

    assert Trace.of(gen()) == t


def test_of_a_sim_with_tracing_off_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^tracing is off: create the Sim with trace=True"):
        Trace.of(_TracedSim(None))


class _SimWithTracer:
    """Stands in for Sim(trace=tracer): trace_records is None, the tracer holds them."""

    trace_records = None

    def __init__(self, tracer: object) -> None:
        self.tracer = tracer


def test_of_a_sim_with_a_memory_tracer_reads_the_tracer() -> None:
    tracer = MemoryTracer()
    for rec in RECORDS:
        tracer.record(*rec)
    assert Trace.of(_SimWithTracer(tracer)) == Trace(RECORDS)


def test_of_a_sim_with_a_file_tracer_says_where_the_records_went(tmp_path: Path) -> None:
    with JsonlTracer(tmp_path / "t.jsonl") as tracer:
        sim = _SimWithTracer(tracer)
        with pytest.raises(ConfigError, match=r"go to a JsonlTracer.*Trace\.from_jsonl"):
            Trace.of(sim)


@pytest.mark.parametrize("bad", [5, "trace.jsonl", b"x", object()])
def test_of_rejects_other_things(bad: object) -> None:
    with pytest.raises(ConfigError, match="expected a Trace, an object with trace_records"):
        Trace.of(bad)  # type: ignore[arg-type]
