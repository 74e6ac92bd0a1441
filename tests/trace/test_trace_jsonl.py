"""Writing and reading JSON-lines traces: exact round trip, atomic write, clear errors."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra.errors import TraceError
from simulacra.trace import TRACE_SCHEME, Trace

json_leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
payloads = st.recursive(
    json_leaves,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4)
    ),
    max_leaves=15,
)
# Few distinct times, so ties are common; plus arbitrary finite floats (incl. -0.0).
times = st.sampled_from([0.0, 1.0, 1.5, 2.0]) | st.floats(allow_nan=False, allow_infinity=False)
kinds = st.sampled_from(["spawn", "resume", "exit", "fail", "interrupt"]) | st.text(max_size=6)
records = st.lists(st.tuples(times, kinds, st.text(max_size=6), payloads), max_size=25)

HEADER = '{"scheme":"simulacra.trace.v1"}\n'


@settings(deadline=None, max_examples=50)  # each example fsyncs a file
@given(records)
def test_jsonl_round_trip_keeps_digest_and_equality(
    recs: list[tuple[float, str, str, object]],
) -> None:
    trace = Trace(recs)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        trace.to_jsonl(path)
        back = Trace.from_jsonl(path)

    assert trace.digest() == back.digest()
    assert trace == back
    assert len(trace) == len(back)
    for (t1, k1, w1, _), (t2, k2, w2, _) in zip(trace, back, strict=True):
        assert (math.copysign(1, t1), t1, k1, w1) == (math.copysign(1, t2), t2, k2, w2)


def test_file_format(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    Trace([(0, "spawn", "a", {"x": {2, 1}}), (1.5, "exit", "a", math.inf)]).to_jsonl(path)

    assert path.read_text(encoding="utf-8") == (
        HEADER + '[0.0,"spawn","a",{"x":[1,2]}]\n[1.5,"exit","a",{"$float":"inf"}]\n'
    )


def test_empty_trace_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    Trace([]).to_jsonl(path)
    assert path.read_text(encoding="utf-8") == HEADER
    assert Trace.from_jsonl(path) == Trace([])


def test_to_jsonl_replaces_atomically_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("old contents\n", encoding="utf-8")
    Trace([(0.0, "k", "w", 1)]).to_jsonl(str(path))
    assert Trace.from_jsonl(path) == Trace([(0.0, "k", "w", 1)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_failed_write_keeps_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    """The target is a directory: os.replace fails, the temp file is removed."""
    target = tmp_path / "dir.jsonl"
    target.mkdir()
    (target / "inside").write_text("x", encoding="utf-8")
    with pytest.raises(OSError):  # IsADirectoryError on POSIX, PermissionError on Windows
        Trace([(0.0, "k", "w", 1)]).to_jsonl(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.jsonl"]


def test_tolerates_a_crlf_file_written_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"scheme": "simulacra.trace.v1"}\r\n[1, "k", "w", {"b": 1, "a": 2}]\r\n')
    back = Trace.from_jsonl(path)
    assert back == Trace([(1.0, "k", "w", {"a": 2, "b": 1})])


def test_last_line_without_newline_is_accepted_when_complete(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(HEADER + '[1.0,"k","w",null]', encoding="utf-8")
    assert Trace.from_jsonl(path) == Trace([(1.0, "k", "w", None)])


def test_truncated_last_line(tmp_path: Path) -> None:
    """What a process killed mid-write leaves: an error by default, dropped on request."""
    path = tmp_path / "t.jsonl"
    path.write_text(HEADER + '[1.0,"k","w",null]\n[2.0,"k","w",{"a":', encoding="utf-8")

    with pytest.raises(TraceError, match=r"t\.jsonl:3: .*allow_truncated=True"):
        Trace.from_jsonl(path)
    assert Trace.from_jsonl(path, allow_truncated=True) == Trace([(1.0, "k", "w", None)])


def test_allow_truncated_does_not_hide_a_bad_line_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(HEADER + '[1.0,"k","w",\n[2.0,"k","w",null]\n', encoding="utf-8")
    with pytest.raises(TraceError, match=r"t\.jsonl:2: not valid JSON"):
        Trace.from_jsonl(path, allow_truncated=True)


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("", 1, "empty file"),
        ("not json\n", 1, "bad header line: not valid JSON"),
        ("[1]\n", 1, "expected the header line"),
        ('{"version": 1}\n', 1, "expected the header line"),
        ('{"scheme": "simulacra.trace.v0"}\n', 1, "'simulacra.trace.v0' is not supported"),
        (HEADER + "\n", 2, "blank line"),
        (HEADER + '[0.0,"k","w",1]\n{"a":1}\n', 3, "expected a JSON array"),
        (HEADER + "[0.0,\n", 2, "not valid JSON"),
        (HEADER + '[0.0,"k","w"]\n', 2, "4-tuple"),
        (HEADER + '[0.0,"k","w",1,2]\n', 2, "4-tuple"),
        (HEADER + '["0","k","w",1]\n', 2, "time must be a finite float"),
        (HEADER + '[true,"k","w",1]\n', 2, "time must be a finite float"),
        (HEADER + '[1e999,"k","w",1]\n', 2, "time must be a finite float"),
        (HEADER + '[0.0,1,"w",1]\n', 2, "kind must be a str"),
        (HEADER + '[0.0,"k",null,1]\n', 2, "who must be a str"),
        (HEADER + '[0.0,"k","w",NaN]\n', 2, "NaN is not allowed"),
        (HEADER + '[0.0,"k","w",{"a":1,"a":2}]\n', 2, "duplicate key 'a'"),
    ],
)
def test_malformed_file_names_path_and_line(
    tmp_path: Path, body: str, line: int, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(TraceError) as info:
        Trace.from_jsonl(path)
    text = str(info.value)
    assert text.startswith(f"{path}:{line}: " if line > 1 or body else f"{path}: ")
    assert message in text


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(HEADER.encode() + b'[0.0,"k","w","\xff"]\n')
    with pytest.raises(TraceError, match=r"bad\.jsonl:2: not UTF-8"):
        Trace.from_jsonl(path)


def test_header_scheme_constant_matches_file() -> None:
    assert TRACE_SCHEME in HEADER


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Trace.from_jsonl(tmp_path / "nope.jsonl")
