"""Tests for the seed tree: derive_seed, SeedTree and as_seed_tree."""

from __future__ import annotations

import copy
import hashlib
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulacra.rng
from simulacra.errors import ConfigError
from simulacra.rng import SEED_SCHEME, SeedTree, as_seed_tree, derive_seed

# --------------------------------------------------------------------------------------
# Known-answer tests.
#
# These values were computed once with the implementation and are hard-coded ON PURPOSE:
# every stored study, checkpoint and published result depends on the derivation. If one
# of these fails, the derivation changed; that is a breaking change that needs a new
# SEED_SCHEME, never an update of the numbers below.
# --------------------------------------------------------------------------------------

KATS: list[tuple[tuple[int | str | bytes, ...], int]] = [
    ((42,), 111940227783678749180670513866763670519),
    ((42, "config", 3, "replication", 17), 322935480873697152396020917927849394827),
    (("study-a", "x"), 131392821989621984193398585943072231932),
    ((b"\x00\xff", -5, ""), 315380718981264604353813729289098787607),
    ((0,), 92090164664837690606199249864263593580),
    ((-1,), 322692489959514967427430642900473548629),
]


def test_seed_scheme_is_pinned() -> None:
    """The scheme tag is part of every derivation and must not drift."""
    assert SEED_SCHEME == "simulacra.seed.v1"


@pytest.mark.parametrize(("args", "expected"), KATS)
def test_derive_seed_known_answers(args: tuple[int | str | bytes, ...], expected: int) -> None:
    """derive_seed gives the pinned value for each known input."""
    master, *path = args
    assert derive_seed(master, *path) == expected  # type: ignore[arg-type]


def test_seed_tree_known_answer() -> None:
    """SeedTree.seed is derive_seed of its path (pinned)."""
    node = SeedTree(42).config(3).replication(17)
    assert node.seed == 322935480873697152396020917927849394827


def test_stream_known_answer() -> None:
    """The first draws of SeedTree(7).stream("arrivals") are pinned."""
    stream = SeedTree(7).stream("arrivals")
    assert [stream.random() for _ in range(3)] == [
        0.4521117325346885,
        0.02142625970451595,
        0.47301179864426757,
    ]


def test_stream_seed_is_child_seed_known_answer() -> None:
    """stream(name) is seeded by child("stream", name).seed (pinned)."""
    seed = SeedTree(7).child("stream", "arrivals").seed
    assert seed == 146869558479752341006263781964876187513
    expected = random.Random(seed)
    actual = SeedTree(7).stream("arrivals")
    assert [expected.random() for _ in range(5)] == [actual.random() for _ in range(5)]


def test_np_rng_known_answer() -> None:
    """The numpy stream is seeded by a separately tagged path; its first draws are pinned."""
    assert SeedTree(7).child("np_stream", "arrivals").seed == (
        290580373801037176554821976761061721971
    )
    generator = SeedTree(7).np_rng("arrivals")
    assert generator.random(3).tolist() == [
        0.31430810397170705,
        0.7311827165072711,
        0.3800670681890228,
    ]
    assert generator.integers(0, 2**62, 2).tolist() == [2761050074677533008, 2387547947002611292]


# --------------------------------------------------------------------------------------
# The KATs checked against the documented encoding, recomputed independently here.
# --------------------------------------------------------------------------------------


def _spec_item(value: int | str | bytes) -> bytes:
    """One item of the documented encoding: tag, 8-byte big-endian length, payload."""
    if isinstance(value, int):
        sign = b"\x01" if value < 0 else b"\x00"
        magnitude = abs(value)
        tag, payload = b"i", sign + magnitude.to_bytes((magnitude.bit_length() + 7) // 8, "big")
    elif isinstance(value, str):
        tag, payload = b"s", value.encode("utf-8")
    else:
        tag, payload = b"b", value
    return tag + len(payload).to_bytes(8, "big") + payload


def _spec_derive(master: int | str | bytes, *path: int | str) -> int:
    message = b"".join(_spec_item(v) for v in ("simulacra.seed.v1", master, *path))
    return int.from_bytes(hashlib.sha256(message).digest()[:16], "big")


@pytest.mark.parametrize(("args", "expected"), KATS)
def test_known_answers_match_the_documented_encoding(
    args: tuple[int | str | bytes, ...], expected: int
) -> None:
    """The pinned values follow from the spec, not only from the implementation."""
    master, *path = args
    assert _spec_derive(master, *path) == expected  # type: ignore[arg-type]


def test_first_kat_recomputed_byte_by_byte() -> None:
    """derive_seed(42) spelled out as literal bytes, as the module docstring describes."""
    message = (
        b"s" + (17).to_bytes(8, "big") + b"simulacra.seed.v1"
        + b"i" + (2).to_bytes(8, "big") + b"\x00\x2a"
    )  # fmt: skip
    assert derive_seed(42) == int.from_bytes(hashlib.sha256(message).digest()[:16], "big")


master_seeds = st.one_of(st.integers(), st.text(), st.binary())
elements = st.one_of(st.integers(min_value=-(2**200), max_value=2**200), st.text(max_size=8))
paths = st.lists(elements, max_size=6).map(tuple)


@given(master_seeds, paths)
def test_implementation_matches_spec(
    master: int | str | bytes, path: tuple[int | str, ...]
) -> None:
    """For any input, derive_seed equals the independent spec implementation."""
    assert derive_seed(master, *path) == _spec_derive(master, *path)


# --------------------------------------------------------------------------------------
# Properties.
# --------------------------------------------------------------------------------------


@given(master_seeds, paths)
def test_seed_is_128_bits(master: int | str | bytes, path: tuple[int | str, ...]) -> None:
    """Every seed is in [0, 2**128)."""
    assert 0 <= derive_seed(master, *path) < 2**128


@given(st.integers(), st.lists(paths, unique=True, min_size=2, max_size=30))
def test_distinct_paths_give_distinct_seeds(master: int, many: list[tuple[int | str, ...]]) -> None:
    """No two distinct paths under one master seed collide."""
    seeds = {derive_seed(master, *p) for p in many}
    assert len(seeds) == len(many)


@given(st.lists(master_seeds, unique_by=lambda m: (type(m), m), min_size=2, max_size=10), paths)
def test_distinct_masters_give_distinct_seeds(
    masters: list[int | str | bytes], path: tuple[int | str, ...]
) -> None:
    """The same path under distinct master seeds (of any type) never collides."""
    assert len({derive_seed(m, *path) for m in masters}) == len(masters)


@given(st.integers(), elements, elements)
def test_path_order_matters(master: int, a: int | str, b: int | str) -> None:
    """(a, b) and (b, a) are different paths unless a == b."""
    if a != b or type(a) is not type(b):
        assert derive_seed(master, a, b) != derive_seed(master, b, a)
    else:
        assert derive_seed(master, a, b) == derive_seed(master, b, a)


@given(master_seeds, paths, paths)
def test_child_composes(
    master: int | str | bytes, a: tuple[int | str, ...], b: tuple[int | str, ...]
) -> None:
    """child(a).child(b) is child(a, b): same node, same seed."""
    root = SeedTree(master)
    stepwise = root.child(*a).child(*b)
    at_once = root.child(*a, *b)
    assert stepwise == at_once
    assert stepwise.path == (*a, *b)
    assert stepwise.seed == at_once.seed == derive_seed(master, *a, *b)
    assert hash(stepwise) == hash(at_once)


@given(master_seeds, paths)
def test_pickle_round_trip(master: int | str | bytes, path: tuple[int | str, ...]) -> None:
    """A node pickles as plain data and comes back equal."""
    node = SeedTree(master).child(*path)
    back = pickle.loads(pickle.dumps(node))  # noqa: S301  (our own bytes)
    assert back == node
    assert back.seed == node.seed


def test_ambiguous_spellings_differ() -> None:
    """Type tags and length prefixes keep look-alike paths apart."""
    assert derive_seed(0, "1") != derive_seed(0, 1)
    assert derive_seed(0, "a", "bc") != derive_seed(0, "ab", "c")
    assert derive_seed(0, "") != derive_seed(0)
    assert derive_seed(0, 1) != derive_seed(0, -1)
    assert derive_seed(0, 0) != derive_seed(0, -0 - 1)
    assert derive_seed("x") != derive_seed(b"x")
    assert derive_seed("1") != derive_seed(1)
    assert derive_seed(1, 2) != derive_seed(12)


def test_seed_is_stable_across_processes() -> None:
    """Seeds and hashes do not depend on PYTHONHASHSEED or the process."""
    src = Path(simulacra.rng.__file__).resolve().parents[2]
    code = (
        "from simulacra.rng import SeedTree;"
        "t = SeedTree('study-a').child('x');"
        "print(t.seed, hash(t), hash(SeedTree(1, ('a', 2))))"
    )
    outputs = set()
    for hash_seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
        result = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(result.stdout)
    assert len(outputs) == 1
    seed, tree_hash, _ = outputs.pop().split()
    assert int(seed) == 131392821989621984193398585943072231932
    assert int(tree_hash) == hash(SeedTree("study-a").child("x"))


# --------------------------------------------------------------------------------------
# SeedTree behaviour.
# --------------------------------------------------------------------------------------


def test_root_and_accessors() -> None:
    """A root has an empty path; child extends it."""
    root = SeedTree(42)
    assert root.master_seed == 42
    assert root.path == ()
    assert root.seed == derive_seed(42)
    node = root.child("config", 3)
    assert node.master_seed == 42
    assert node.path == ("config", 3)
    assert root.child() == root


def test_replication_and_config() -> None:
    """replication(i) and config(i) are shorthands for tagged children."""
    root = SeedTree(42)
    assert root.replication(5) == root.child("replication", 5)
    assert root.config(2) == root.child("config", 2)
    assert root.config(3).replication(17).seed == derive_seed(42, "config", 3, "replication", 17)


@pytest.mark.parametrize("bad", [-1, True, 1.0, "3", None])
def test_replication_index_must_be_non_negative_int(bad: object) -> None:
    """A bad replication/config index names the field `index`."""
    with pytest.raises(ConfigError, match="index"):
        SeedTree(1).replication(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="index"):
        SeedTree(1).config(bad)  # type: ignore[arg-type]


def test_equality_and_hash() -> None:
    """Equality is on (master seed, path); hash follows."""
    assert SeedTree(1, ("a",)) == SeedTree(1).child("a")
    assert SeedTree(1, ["a", 2]) == SeedTree(1, ("a", 2))  # type: ignore[arg-type]
    assert SeedTree(1) != SeedTree(2)
    assert SeedTree(1) != SeedTree("1")
    assert SeedTree("x") != SeedTree(b"x")
    assert SeedTree(1).child(1) != SeedTree(1).child("1")
    assert SeedTree(1) != 1
    assert len({SeedTree(1), SeedTree(1, ()), SeedTree(1).child("a"), SeedTree(1, ("a",))}) == 2


def test_repr() -> None:
    """The repr shows the master seed and, below the root, the path."""
    assert repr(SeedTree(42)) == "SeedTree(42)"
    assert repr(SeedTree(42).config(3)) == "SeedTree(42, path=('config', 3))"
    assert repr(SeedTree("s").child(-1)) == "SeedTree('s', path=(-1,))"


def test_immutable() -> None:
    """Attributes cannot be set or deleted."""
    node = SeedTree(1)
    with pytest.raises(AttributeError):
        node.foo = 1
    with pytest.raises(AttributeError):
        node._path = ("x",)
    with pytest.raises(AttributeError):
        del node._master_seed
    assert node.path == ()


def test_copy_gives_equal_node() -> None:
    """copy and deepcopy work through __reduce__."""
    node = SeedTree(b"m").child("a", 1)
    assert copy.copy(node) == node
    assert copy.deepcopy(node) == node


def test_stream_is_new_each_call() -> None:
    """stream(name) returns a fresh generator at the start of the stream every time."""
    node = SeedTree(3).child("agent", 9)
    first = node.stream("s")
    second = node.stream("s")
    assert first is not second
    assert [first.random() for _ in range(4)] == [second.random() for _ in range(4)]
    assert node.stream("s").random() != node.stream("t").random()


def test_np_rng_is_reproducible_and_separate() -> None:
    """np_rng(name) is reproducible, fresh each call, and tagged apart from stream(name)."""
    node = SeedTree(3).child("agent", 9)
    a, b = node.np_rng("s"), node.np_rng("s")
    assert a is not b
    assert a.random(5).tolist() == b.random(5).tolist()
    assert node.np_rng("s").random() != node.np_rng("t").random()


def test_numpy_integers_are_accepted_as_ints() -> None:
    """numpy integers (e.g. from np.arange) are normalised to plain ints."""
    np = pytest.importorskip("numpy")
    node = SeedTree(np.int64(5)).child(np.int32(3))
    assert node == SeedTree(5).child(3)
    assert type(node.master_seed) is int
    assert type(node.path[0]) is int
    assert derive_seed(5, np.uint8(3)) == derive_seed(5, 3)
    with pytest.raises(ConfigError, match=r"path\[0\]"):
        derive_seed(5, np.bool_(True))
    with pytest.raises(ConfigError, match=r"path\[0\]"):
        derive_seed(5, np.float64(1.0))


def test_str_subclass_is_normalised() -> None:
    """A str subclass is stored and compared as a plain str."""

    class Name(str):
        __slots__ = ()

    node = SeedTree(Name("m")).child(Name("a"))
    assert node == SeedTree("m").child("a")
    assert type(node.master_seed) is str
    assert type(node.path[0]) is str


# --------------------------------------------------------------------------------------
# Bad input.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [True, False, 1.5, None, [1], (1,), bytearray(b"x"), object()])
def test_bad_master_seed(bad: object) -> None:
    """A master seed that is not int/str/bytes is a ConfigError naming the field and type."""
    with pytest.raises(ConfigError, match="master_seed") as info:
        derive_seed(bad)  # type: ignore[arg-type]
    assert type(bad).__name__ in str(info.value)
    with pytest.raises(ConfigError, match="master_seed"):
        SeedTree(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [True, False, 1.0, float("nan"), None, b"x", (1,), object()])
def test_bad_path_element(bad: object) -> None:
    """A bad path element is a ConfigError naming its position and type."""
    with pytest.raises(ConfigError, match=r"path\[2\]") as info:
        derive_seed(1, "a", 2, bad)  # type: ignore[arg-type]
    assert type(bad).__name__ in str(info.value)
    assert "int or a str" in str(info.value)
    with pytest.raises(ConfigError, match=r"path\[1\]"):
        SeedTree(1).child("a", bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"path\[0\]"):
        SeedTree(1, (bad,))  # type: ignore[arg-type]


def test_bool_message_explains_why() -> None:
    """The bool rejection says why: True == 1."""
    with pytest.raises(ConfigError, match="True == 1"):
        derive_seed(1, True)


def test_bad_path_container() -> None:
    """The internal _path must be a tuple (or list) of elements, not a str."""
    with pytest.raises(ConfigError, match="path"):
        SeedTree(1, "abc")  # type: ignore[arg-type]


def test_unencodable_str() -> None:
    """A lone surrogate cannot be encoded as UTF-8 and is a ConfigError."""
    with pytest.raises(ConfigError, match=r"path\[0\]"):
        derive_seed(1, "\ud800")
    with pytest.raises(ConfigError, match="master_seed"):
        derive_seed("\ud800")


@pytest.mark.parametrize("bad", ["", None, 1, b"x", ["a"]])
def test_bad_stream_name(bad: object) -> None:
    """An empty or non-str stream name is a ConfigError naming `name`."""
    with pytest.raises(ConfigError, match="name"):
        SeedTree(1).stream(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="name"):
        SeedTree(1).np_rng(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# as_seed_tree.
# --------------------------------------------------------------------------------------


def test_as_seed_tree_accepts_seeds_and_trees() -> None:
    """int/str/bytes become a root; a SeedTree passes through unchanged."""
    assert as_seed_tree(42) == SeedTree(42)
    assert as_seed_tree("s") == SeedTree("s")
    assert as_seed_tree(b"s") == SeedTree(b"s")
    node = SeedTree(1).child("config", 3)
    assert as_seed_tree(node) is node


def test_as_seed_tree_none_uses_os_entropy() -> None:
    """None gives a fresh, non-reproducible 128-bit master seed."""
    a, b = as_seed_tree(None), as_seed_tree(None)
    assert a.path == b.path == ()
    assert isinstance(a.master_seed, int)
    assert 0 <= a.master_seed < 2**128
    assert a != b
    assert SeedTree(a.master_seed) == a  # recording the master seed makes it reproducible


@pytest.mark.parametrize("bad", [True, 1.0, [1], object()])
def test_as_seed_tree_rejects_bad_seeds(bad: object) -> None:
    """bool/float/others are a ConfigError naming the field `seed`."""
    with pytest.raises(ConfigError, match="seed") as info:
        as_seed_tree(bad)  # type: ignore[arg-type]
    assert type(bad).__name__ in str(info.value)


def test_config_error_is_value_error() -> None:
    """Callers catching ValueError also catch bad seeds."""
    with pytest.raises(ValueError, match="master_seed"):
        derive_seed(1.5)  # type: ignore[arg-type]


_ELEMENT = st.integers(-2**70, 2**70) | st.text(max_size=6)


@settings(max_examples=200, deadline=None)
@given(master=st.integers(-2**70, 2**70) | st.text(max_size=6) | st.binary(max_size=6),
       path=st.lists(_ELEMENT, max_size=3), label=_ELEMENT,
       indices=st.lists(_ELEMENT, max_size=6), name=st.text(min_size=1, max_size=6))
def test_child_streams_are_the_streams_of_each_child(
        master: int | str | bytes, path: list[int | str], label: int | str,
        indices: list[int | str], name: str) -> None:
    node = SeedTree(master).child(*path)
    fast = [r.random() for r in node.child_streams(label, indices, name)]
    assert fast == [node.child(label, i).stream(name).random() for i in indices]


def test_child_streams_check_their_arguments_at_once() -> None:
    tree = SeedTree(1)
    with pytest.raises(ConfigError, match="name"):
        tree.child_streams("agent", range(3), "")
    with pytest.raises(ConfigError, match="path"):
        tree.child_streams(1.5, range(3), "persona")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"path\[1\]"):
        list(tree.child_streams("agent", [0, True], "persona"))
