"""MemoryTracer and JsonlTracer: the recorders the kernel calls."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra.errors import ConfigError, TraceError
from simulacra.trace import JsonlTracer, MemoryTracer, Trace

Record = tuple[float, str, str, object]

RECORDS: list[Record] = [
    (0.0, "spawn", "customer#0", None),
    (0.0, "spawn", "customer#1", {"service": 0.25, "tags": {"b", "a"}}),
    (0.25, "resume", "customer#1", [1, 2.5, math.nan]),
    (0.25, "exit", "customer#1", "done"),
    (1, "user", "bank", {3: "three"}),
]


def _feed(tracer: MemoryTracer | JsonlTracer, records: list[Record]) -> None:
    for rec in records:
        tracer.record(*rec)


def test_memory_tracer_keeps_records() -> None:
    tracer = MemoryTracer()
    _feed(tracer, RECORDS)
    assert tracer.records == RECORDS
    assert tracer.trace_records is tracer.records
    assert len(tracer) == len(RECORDS)
    assert tracer.trace() == Trace(RECORDS)
    assert Trace.of(tracer) == Trace(RECORDS)


def test_memory_tracer_validates_when_the_trace_is_built() -> None:
    tracer = MemoryTracer()
    tracer.record(0.0, "ok", "a", None)
    tracer.record("later", "bad", "a", None)  # type: ignore[arg-type]
    with pytest.raises(TraceError, match=r"record 1: time must be a finite float"):
        tracer.trace()


def test_jsonl_tracer_digest_equals_trace_digest(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    memory = MemoryTracer()
    with JsonlTracer(path) as tracer:
        assert tracer.digest() == Trace([]).digest()
        for rec in RECORDS:
            tracer.record(*rec)
            memory.record(*rec)
        assert tracer.digest() == memory.trace().digest()
    assert tracer.closed
    assert len(tracer) == len(RECORDS)
    assert tracer.digest() == Trace(RECORDS).digest()
    assert Trace.from_jsonl(path).digest() == Trace(RECORDS).digest()


def test_jsonl_tracer_writes_the_to_jsonl_format(tmp_path: Path) -> None:
    with JsonlTracer(tmp_path / "streamed.jsonl", flush_every=2) as tracer:
        _feed(tracer, RECORDS)
    Trace(RECORDS).to_jsonl(tmp_path / "at_once.jsonl")
    assert (tmp_path / "streamed.jsonl").read_bytes() == (tmp_path / "at_once.jsonl").read_bytes()


@settings(deadline=None, max_examples=30)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 1e6),
            st.sampled_from(["spawn", "resume", "exit"]),
            st.text(max_size=5),
            st.none() | st.integers() | st.floats() | st.lists(st.text(max_size=3), max_size=3),
        ),
        max_size=30,
    ),
    st.integers(1, 7),
)
def test_jsonl_tracer_digest_property(records: list[Record], flush_every: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        with JsonlTracer(path, flush_every=flush_every) as tracer:
            _feed(tracer, records)
        assert tracer.digest() == Trace(records).digest()
        assert Trace.from_jsonl(path) == Trace(records)


def test_flushed_records_are_readable_before_close(tmp_path: Path) -> None:
    """No partial write is lost: after flush(), an unclosed tracer's file reads back whole."""
    path = tmp_path / "live.jsonl"
    tracer = JsonlTracer(path, flush_every=1000)
    try:
        _feed(tracer, RECORDS[:3])
        # Nothing written yet but the header: the batch is not full.
        assert len(Trace.from_jsonl(path)) == 0
        tracer.flush()
        assert Trace.from_jsonl(path) == Trace(RECORDS[:3])
        assert Trace.from_jsonl(path).digest() == tracer.digest()
        _feed(tracer, RECORDS[3:])
        tracer.flush()
        assert Trace.from_jsonl(path) == Trace(RECORDS)
    finally:
        tracer.close()


def test_full_batches_are_written_without_flush(tmp_path: Path) -> None:
    path = tmp_path / "batched.jsonl"
    tracer = JsonlTracer(path, flush_every=2)
    try:
        _feed(tracer, RECORDS[:3])
        # Two records made a full batch; the third waits for the next one.
        assert Trace.from_jsonl(path) == Trace(RECORDS[:2])
    finally:
        tracer.close()
    assert Trace.from_jsonl(path) == Trace(RECORDS[:3])


def _crashing_run(path: Path) -> None:
    with JsonlTracer(path) as tracer:
        _feed(tracer, RECORDS)
        _ = 1 / 0


def test_context_manager_writes_everything_when_the_run_raises(tmp_path: Path) -> None:
    path = tmp_path / "crash.jsonl"
    with pytest.raises(ZeroDivisionError):
        _crashing_run(path)
    assert Trace.from_jsonl(path) == Trace(RECORDS)


def test_payload_is_encoded_when_recorded(tmp_path: Path) -> None:
    payload: list[int] = [1]
    with JsonlTracer(tmp_path / "t.jsonl") as tracer:
        tracer.record(0.0, "k", "w", payload)
        payload.append(2)
    assert Trace.from_jsonl(tmp_path / "t.jsonl") == Trace([(0.0, "k", "w", [1])])


def test_bad_record_is_rejected_and_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with JsonlTracer(path) as tracer:
        tracer.record(0.0, "k", "w", None)
        with pytest.raises(TraceError, match=r"record 1: kind must be a str"):
            tracer.record(1.0, 7, "w", None)  # type: ignore[arg-type]
        with pytest.raises(TraceError, match=r"record 1: time must be a finite float, got inf"):
            tracer.record(math.inf, "k", "w", None)
        assert len(tracer) == 1
    assert tracer.digest() == Trace([(0.0, "k", "w", None)]).digest()
    assert Trace.from_jsonl(path) == Trace([(0.0, "k", "w", None)])


def test_closed_tracer(tmp_path: Path) -> None:
    tracer = JsonlTracer(tmp_path / "t.jsonl")
    tracer.close()
    tracer.close()  # harmless
    with pytest.raises(TraceError, match="closed"):
        tracer.record(0.0, "k", "w", None)
    with pytest.raises(TraceError, match="closed"):
        tracer.flush()
    assert "closed" in repr(tracer)
    assert tracer.path == str(tmp_path / "t.jsonl")


@pytest.mark.parametrize("flush_every", [0, -1, 1.5, True, "10"])
def test_flush_every_must_be_a_positive_int(tmp_path: Path, flush_every: object) -> None:
    with pytest.raises(ConfigError, match="flush_every must be an int >= 1"):
        JsonlTracer(tmp_path / "t.jsonl", flush_every=flush_every)  # type: ignore[arg-type]
    assert not (tmp_path / "t.jsonl").exists()
