"""The canonical encoding: known answers, fixed-point property, no memory addresses."""

from __future__ import annotations

import collections
import dataclasses
import enum
import hashlib
import json
import math
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulacra.errors import TraceError
from simulacra.trace import TRACE_SCHEME, Trace, canonical, encode_record

# ---------------------------------------------------------------------------
# Known answers. These pin the encoding: if one changes, every stored digest
# changes with it, and TRACE_SCHEME must be bumped.
# ---------------------------------------------------------------------------

KAT_RECORDS: list[tuple[float, str, str, object]] = [
    (0.0, "spawn", "customer#0", None),
    (0.0, "spawn", "customer#1", {"service": 0.1, "tags": {"vip", "new"}}),
    (1.5, "resume", "customer#0", [1, -0.0, math.inf, math.nan, "café"]),
    (2, "user", "bank", {1: "one", "k": b"\x00\xff"}),
]
KAT_LINES = [
    b'[0.0,"spawn","customer#0",null]',
    b'[0.0,"spawn","customer#1",{"service":0.1,"tags":["new","vip"]}]',
    '[1.5,"resume","customer#0",[1,-0.0,{"$float":"inf"},{"$float":"nan"},"café"]]'.encode(),
    b'[2.0,"user","bank",{"$dict":[["k",{"$bytes":"00ff"}],[1,"one"]]}]',
]
KAT_DIGEST = "c374f4b88393b89688bb66a2ab00fd92b6a32f568cd43eaad118bc9df085fed4"


def test_scheme_is_versioned() -> None:
    assert TRACE_SCHEME == "simulacra.trace.v1"


@pytest.mark.parametrize(("rec", "line"), list(zip(KAT_RECORDS, KAT_LINES, strict=True)))
def test_encode_record_known_answers(rec: tuple[float, str, str, object], line: bytes) -> None:
    assert line == encode_record(rec)


def test_digest_known_answer() -> None:
    """The digest is SHA-256 over the scheme line and each encoded record plus newline."""
    expected = hashlib.sha256(
        TRACE_SCHEME.encode() + b"\n" + b"".join(line + b"\n" for line in KAT_LINES)
    ).hexdigest()
    assert expected == KAT_DIGEST
    assert Trace(KAT_RECORDS).digest() == KAT_DIGEST


def test_empty_trace_digest_is_the_scheme_hash() -> None:
    assert hashlib.sha256(b"simulacra.trace.v1\n").hexdigest() == Trace([]).digest()


# ---------------------------------------------------------------------------
# One rule at a time.
# ---------------------------------------------------------------------------


class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Perm(enum.Flag):
    R = 4
    W = 2


class Level(enum.IntEnum):
    LOW = 1


@dataclasses.dataclass
class Order:
    item: str
    qty: int
    tags: set[str] = dataclasses.field(default_factory=set)


class Point(NamedTuple):
    x: float
    y: float


class Traced:
    def __init__(self, value: int) -> None:
        self.value = value

    def __trace__(self) -> object:
        return {"value": self.value}


class Opaque:
    """Its repr contains a memory address."""


class MyStr(str):
    def __str__(self) -> str:
        return "overridden"


class MyInt(int):
    def __repr__(self) -> str:
        return "overridden"


class MyFloat(float):
    def __repr__(self) -> str:
        return "overridden"


def _fn() -> None:
    pass


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (None, None),
        (True, True),
        (False, False),
        (0, 0),
        (-(2**80), -(2**80)),
        ("", ""),
        ("x", "x"),
        (0.1, 0.1),
        (math.inf, {"$float": "inf"}),
        (-math.inf, {"$float": "-inf"}),
        (math.nan, {"$float": "nan"}),
        ((1, (2, 3)), [1, [2, 3]]),
        ([], []),
        (Point(1.0, 2.0), [1.0, 2.0]),
        (collections.deque([1, 2]), [1, 2]),
        ({"b": 1, "a": 2}, {"a": 2, "b": 1}),
        (collections.OrderedDict([("b", 1), ("a", 2)]), {"a": 2, "b": 1}),
        ({2: "b", 1: "a"}, {"$dict": [[1, "a"], [2, "b"]]}),
        ({(1, 2): "t"}, {"$dict": [[[1, 2], "t"]]}),
        ({"c", "a", "b"}, ["a", "b", "c"]),
        (frozenset({3, 1, 2}), [1, 2, 3]),
        (set(), []),
        (b"\x01\xab", {"$bytes": "01ab"}),
        (bytearray(b"\x02"), {"$bytes": "02"}),
        (memoryview(b"\x03"), {"$bytes": "03"}),
        (Color.RED, {"$enum": "Color.RED"}),
        (Level.LOW, {"$enum": "Level.LOW"}),
        (
            Order("tea", 2, {"hot", "green"}),
            {"$dc": "Order", "item": "tea", "qty": 2, "tags": ["green", "hot"]},
        ),
        (KeyError("k", 1), {"$exc": "KeyError", "args": ["k", 1]}),
        (Traced(7), {"value": 7}),
        (Opaque(), {"$obj": "Opaque"}),
        (object(), {"$obj": "object"}),
        (Opaque, {"$type": "Opaque"}),
        (_fn, {"$fn": "_fn"}),
        (len, {"$fn": "len"}),
        (MyStr("s"), "s"),
        (MyInt(5), 5),
        (MyFloat(2.5), 2.5),
    ],
)
def test_canonical_rules(payload: object, expected: object) -> None:
    assert expected == canonical(payload)


def test_types_are_exact_after_canonical() -> None:
    """Subclasses are reduced to the base type, so the C encoder never calls their repr."""
    assert type(canonical(MyStr("s"))) is str
    assert type(canonical(MyInt(5))) is int
    assert type(canonical(MyFloat(2.5))) is float
    assert (
        encode_record((0.0, "k", "w", (MyInt(5), MyFloat(2.5), MyStr("s"))))
        == b'[0.0,"k","w",[5,2.5,"s"]]'
    )


def test_composite_flag_without_a_name() -> None:
    value = canonical(Perm.R | Perm.W)
    # 3.11 names composite flags ("R|W"); either way the result is deterministic.
    assert value in ({"$enum": "Perm.R|W"}, {"$enum": "Perm.W|R"}, {"$enum": "Perm", "value": 6})
    assert canonical(Perm.R | Perm.W) == value


def test_negative_zero_is_distinct_from_zero() -> None:
    """-0.0 == 0.0, but 1/x and copysign tell them apart: a run producing the other diverged."""
    assert encode_record((0.0, "k", "w", -0.0)) != encode_record((0.0, "k", "w", 0.0))
    assert math.copysign(1.0, json.loads(encode_record((0.0, "k", "w", -0.0)))[3]) == -1.0


def test_int_and_float_payloads_are_distinct() -> None:
    assert encode_record((0.0, "k", "w", 1)) != encode_record((0.0, "k", "w", 1.0))


def test_int_time_encodes_like_the_equal_float() -> None:
    assert encode_record((3, "k", "w", None)) == encode_record((3.0, "k", "w", None))


def test_floats_round_trip_with_shortest_repr() -> None:
    assert encode_record((0.1 + 0.2, "k", "w", 0.1)) == b'[0.30000000000000004,"k","w",0.1]'


def test_non_ascii_is_written_as_utf8() -> None:
    assert "ü→😀".encode() in encode_record((0.0, "k", "w", "ü→😀"))


def test_lone_surrogate_does_not_crash() -> None:
    line = encode_record((0.0, "k", "w", "\ud800"))
    assert json.loads(line.decode("utf-8", "surrogatepass"))[3] == "\ud800"


def test_set_order_does_not_depend_on_insertion() -> None:
    words = [f"w{i}" for i in range(50)]
    forward, backward = set(), set()
    for w in words:
        forward.add(w)
    for w in reversed(words):
        backward.add(w)
    assert canonical(forward) == canonical(backward) == sorted(words)


def test_mixed_type_set_and_dict_keys_sort_without_comparing_values() -> None:
    """Elements of different types (unorderable in Python) sort by their JSON text."""
    mixed = {1, "a", (1, 2), None, frozenset({"x"}), 2.5}
    assert canonical(mixed) == [
        "a",
        1,
        2.5,
        ["x"],  # '"' sorts before '1'
        [1, 2],
        None,
    ]
    assert canonical({None: 1, 1: 2, "a": 3}) == {"$dict": [["a", 3], [1, 2], [None, 1]]}


def test_equal_texts_in_a_set_do_not_raise() -> None:
    """Two distinct opaque objects encode alike; sorting must not compare them."""
    assert canonical({Opaque(), Opaque()}) == [{"$obj": "Opaque"}, {"$obj": "Opaque"}]
    assert canonical({Opaque(): {"a": 1}, Opaque(): {"a": 1}}) == {
        "$dict": [[{"$obj": "Opaque"}, {"a": 1}], [{"$obj": "Opaque"}, {"a": 1}]]
    }


def test_dollar_keys_in_user_dicts_stay_a_plain_object() -> None:
    """The canonical form is a fixed point, so tags read back from a file stay tags."""
    assert canonical({"$float": "inf"}) == canonical(math.inf)


def test_objects_with_addresses_in_repr_encode_identically() -> None:
    """Two live objects at different addresses: different reprs, same canonical value."""
    a, b = Opaque(), Opaque()
    assert repr(a) != repr(b)
    assert "0x" in repr(a)
    assert canonical(a) == canonical(b)
    rec_a = (1.0, "obj", "x", {"thing": a, "list": [a, b]})
    rec_b = (1.0, "obj", "x", {"thing": b, "list": [b, a]})
    assert encode_record(rec_a) == encode_record(rec_b)
    assert b"0x" not in encode_record(rec_a)


def test_exception_with_unprintable_args_has_no_address() -> None:
    exc = RuntimeError(Opaque())
    assert canonical(exc) == {"$exc": "RuntimeError", "args": [{"$obj": "Opaque"}]}


def test_an_exception_quoting_an_object_has_no_address() -> None:
    # The kernel's messages quote the object at fault ("yielded [<Event ... at 0x7f...>]"):
    # the address differs from run to run, and so did the trace digest (found by a stranger).
    a, b = Opaque(), Opaque()
    first = canonical(ValueError(f"yielded {a!r}, not an event", 3))
    assert first == canonical(ValueError(f"yielded {b!r}, not an event", 3))
    assert "0x" in repr(a)
    assert first["args"][1] == 3
    assert " at 0x…>" in first["args"][0]
    assert "0x7" not in json.dumps(first)


def test_a_model_that_catches_a_kernel_error_traces_the_same_digest_every_run() -> None:
    import subprocess
    import sys

    script = (
        "import simulacra as sm\n"
        "sim = sm.Sim(seed=1, trace=True)\n"
        "def p(sim):\n"
        "    try:\n"
        "        yield [sim.delay(1)]\n"
        "    except sm.NotAnEvent:\n"
        "        pass\n"
        "    yield sim.delay(1)\n"
        "sim.spawn(p)\nsim.run()\nprint(sm.digest(sim))\n")
    digests = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              check=True, timeout=120).stdout for _ in range(3)}
    assert len(digests) == 1, digests


def test_trace_hook_wins_over_dataclass_and_enum() -> None:
    @dataclasses.dataclass
    class Hooked:
        x: int

        def __trace__(self) -> object:
            return ["hooked", self.x]

    assert canonical(Hooked(3)) == ["hooked", 3]


def test_trace_hook_on_a_class_is_not_called_on_the_class() -> None:
    assert canonical(Traced) == {"$type": "Traced"}


def test_reference_cycle_is_a_trace_error() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(TraceError, match="cycle"):
        canonical(loop)
    d: dict[str, Any] = {}
    d["self"] = d
    with pytest.raises(TraceError, match="cycle"):
        encode_record((0.0, "k", "w", d))

    class SelfTraced:
        def __trace__(self) -> object:
            return self

    with pytest.raises(TraceError, match="cycle"):
        canonical(SelfTraced())


def test_shared_but_acyclic_references_are_fine() -> None:
    shared = [1, 2]
    assert canonical([shared, shared, {"a": shared}]) == [[1, 2], [1, 2], {"a": [1, 2]}]


# ---------------------------------------------------------------------------
# Properties.
# ---------------------------------------------------------------------------

hashable_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=6)
    | st.binary(max_size=4)
    | st.sampled_from([Color.RED, Color.GREEN, Level.LOW])
)
hashables = st.recursive(
    hashable_leaves,
    lambda kids: st.tuples(kids, kids) | st.frozensets(kids, max_size=3),
    max_leaves=6,
)
payloads = st.recursive(
    hashable_leaves,
    lambda kids: (
        st.lists(kids, max_size=4)
        | st.tuples(kids, kids)
        | st.dictionaries(st.text(max_size=4), kids, max_size=4)
        | st.dictionaries(hashables, kids, max_size=3)
        | st.sets(hashables, max_size=4)
        | st.builds(
            Order, st.text(max_size=4), st.integers(), st.sets(st.text(max_size=3), max_size=3)
        )
    ),
    max_leaves=20,
)


@given(payloads)
def test_canonical_is_a_fixed_point(payload: object) -> None:
    once = canonical(payload)
    assert json.dumps(once, sort_keys=True) == json.dumps(canonical(once), sort_keys=True)


@given(payloads)
def test_canonical_value_survives_json_round_trip(payload: object) -> None:
    line = encode_record((0.0, "k", "w", payload))
    back = tuple(json.loads(line))
    assert line == encode_record(back)


@given(st.lists(st.text(max_size=5), max_size=30), st.randoms(use_true_random=False))
def test_set_encoding_ignores_construction_order(items: list[str], rnd: Any) -> None:
    shuffled = list(items)
    rnd.shuffle(shuffled)
    assert encode_record((0.0, "k", "w", set(items))) == encode_record(
        (0.0, "k", "w", set(shuffled))
    )
    assert encode_record((0.0, "k", "w", dict.fromkeys(items, 1))) == encode_record(
        (0.0, "k", "w", dict.fromkeys(shuffled, 1))
    )
