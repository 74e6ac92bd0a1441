"""first_divergence names exactly the first differing record; assert_equivalent reports it."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from simulacra.errors import DeterminismError
from simulacra.trace import Divergence, MemoryTracer, Trace, assert_equivalent, first_divergence

Record = tuple[float, str, str, object]

leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
payloads = st.recursive(
    leaves,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3)
    ),
    max_leaves=8,
)
records = st.tuples(
    st.sampled_from([0.0, 0.5, 1.0]),
    st.sampled_from(["spawn", "resume", "exit"]),
    st.sampled_from(["a", "b", "c"]),
    payloads,
)


@given(st.lists(records, min_size=1, max_size=40), st.data())
def test_finds_exactly_the_mutated_index(recs: list[Record], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(recs) - 1), label="i")
    time, kind, who, payload = recs[i]
    mutated = list(recs)
    mutated[i] = (time, kind + "!", who, payload)  # a kind that cannot encode the same

    d = first_divergence(recs, mutated)

    assert d is not None
    assert i == d.index
    assert recs[i] == d.left
    assert mutated[i] == d.right
    assert tuple(recs[max(0, i - 3) : i]) == d.context


@given(st.lists(records, min_size=1, max_size=40), st.data())
def test_finds_a_payload_change(recs: list[Record], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(recs) - 1), label="i")
    new_payload = data.draw(payloads, label="payload")
    mutated = list(recs)
    mutated[i] = (*recs[i][:3], new_payload)
    assume(Trace([recs[i]]) != Trace([mutated[i]]))

    d = first_divergence(recs, mutated)

    assert d is not None
    assert i == d.index


@given(st.lists(records, max_size=30), st.data())
def test_prefix_diverges_at_the_shorter_length(recs: list[Record], data: st.DataObject) -> None:
    k = data.draw(st.integers(0, len(recs)), label="k")
    assume(k < len(recs))
    shorter = recs[:k]

    d = first_divergence(shorter, recs)
    assert d is not None
    assert k == d.index
    assert d.left is None
    assert recs[k] == d.right

    d2 = first_divergence(recs, shorter)
    assert d2 is not None
    assert k == d2.index
    assert recs[k] == d2.left
    assert d2.right is None


@given(st.lists(records, max_size=30))
def test_equal_traces_have_no_divergence(recs: list[Record]) -> None:
    assert first_divergence(recs, list(recs)) is None
    assert_equivalent(recs, Trace(recs))


def test_compares_canonical_encodings_not_python_equality() -> None:
    # Set order is irrelevant; 0.0 and -0.0 differ although 0.0 == -0.0.
    assert first_divergence([(0.0, "k", "w", {"b", "a"})], [(0.0, "k", "w", {"a", "b"})]) is None
    d = first_divergence([(0.0, "k", "w", 0.0)], [(0.0, "k", "w", -0.0)])
    assert d is not None
    assert d.index == 0


def test_report_text() -> None:
    a = [(float(i), "resume", f"customer#{i}", None) for i in range(20)]
    b = list(a)
    b[17] = (17.0, "resume", "customer#99", None)

    d = first_divergence(a, b)

    assert d == Divergence(17, a[17], b[17], tuple(a[14:17]))
    assert str(d) == (
        "traces diverge at record 17:\n"
        "  left   (17.0, 'resume', 'customer#17', None)\n"
        "  right  (17.0, 'resume', 'customer#99', None)\n"
        "  preceded by (common to both):\n"
        "    [14] (14.0, 'resume', 'customer#14', None)\n"
        "    [15] (15.0, 'resume', 'customer#15', None)\n"
        "    [16] (16.0, 'resume', 'customer#16', None)"
    )


def test_report_of_an_ended_trace_and_of_equal_reprs() -> None:
    class Same:
        def __init__(self, v: int) -> None:
            self.v = v

        def __repr__(self) -> str:
            return "Same()"

        def __trace__(self) -> object:
            return self.v

    d = first_divergence([(0.0, "k", "w", Same(1))], [(0.0, "k", "w", Same(2))])
    assert d is not None
    text = str(d)
    assert 'canonical [0.0,"k","w",1]' in text
    assert 'canonical [0.0,"k","w",2]' in text

    ended = first_divergence([], [(0.0, "k", "w", None)])
    assert ended is not None
    assert "left   <trace ended after 0 records>" in str(ended)
    assert "preceded by" not in str(ended)


def test_assert_equivalent_message_names_index_and_digests() -> None:
    a = Trace([(0.0, "spawn", "a", None), (1.0, "exit", "a", 1)])
    b = Trace([(0.0, "spawn", "a", None), (1.0, "exit", "a", 2)])

    with pytest.raises(DeterminismError) as info:
        assert_equivalent(a, b, label_a="sequential", label_b="threads x4")

    text = str(info.value)
    assert "traces diverge at record 1" in text
    assert a.digest() in text
    assert b.digest() in text
    assert "sequential" in text
    assert "threads x4  (1.0, 'exit', 'a', 2)" in text


def test_assert_equivalent_accepts_recorders_and_sim_like_objects() -> None:
    class FakeSim:
        def __init__(self) -> None:
            self.trace_records: list[Record] = [(0.0, "spawn", "a", None)]

    tracer = MemoryTracer()
    tracer.record(0.0, "spawn", "a", None)
    assert_equivalent(FakeSim(), tracer)
    tracer.record(1.0, "exit", "a", None)
    with pytest.raises(DeterminismError, match="record 1"):
        assert_equivalent(FakeSim(), tracer)
