"""Tests for Streams: named random streams owned by one simulation."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import simulacra.rng
from simulacra._util import install_hint
from simulacra.errors import ConfigError
from simulacra.rng import SeedTree, Streams

ROOT = SeedTree(20250611).config(3).replication(17)


def _draws(streams: Streams, name: str, n: int = 5) -> list[float]:
    rng = streams.rng(name)
    return [rng.random() for _ in range(n)]


def test_root_and_cache() -> None:
    """rng(name) is created on first use and the same object afterwards."""
    streams = Streams(ROOT)
    assert streams.root is ROOT
    assert streams.names() == []
    first = streams.rng("arrivals")
    assert streams.rng("arrivals") is first
    assert streams.names() == ["arrivals"]


def test_stream_equals_seed_tree_stream() -> None:
    """Streams.rng(name) draws exactly what root.stream(name) draws."""
    expected = ROOT.stream("service")
    assert _draws(Streams(ROOT), "service") == [expected.random() for _ in range(5)]


def test_creation_order_does_not_change_draws() -> None:
    """Creating "a" then "b" or "b" then "a" gives the same draws for each."""
    ab = Streams(ROOT)
    a1 = _draws(ab, "a")
    b1 = _draws(ab, "b")
    ba = Streams(ROOT)
    b2 = _draws(ba, "b")
    a2 = _draws(ba, "a")
    assert a1 == a2
    assert b1 == b2
    assert a1 != b1


@given(st.lists(st.text(min_size=1, max_size=5), unique=True, min_size=1, max_size=8), st.data())
def test_any_creation_order_gives_same_draws(names: list[str], data: st.DataObject) -> None:
    """Property: the draws of each stream do not depend on creation or interleaving order."""
    reference = {name: _draws(Streams(ROOT), name, 3) for name in names}
    order = data.draw(st.permutations(names))
    streams = Streams(ROOT)
    got = {name: _draws(streams, name, 3) for name in order}
    assert got == reference
    assert streams.names() == sorted(names)


def test_adding_a_stream_does_not_shift_another() -> None:
    """Drawing from a new stream in the middle does not change an existing stream."""
    plain = Streams(ROOT)
    expected = _draws(plain, "a", 10)
    mixed = Streams(ROOT)
    got = _draws(mixed, "a", 4)
    _draws(mixed, "new", 7)
    got += _draws(mixed, "a", 6)
    assert got == expected


def test_different_roots_differ() -> None:
    """Different replications give different streams of the same name."""
    a = Streams(SeedTree(1).replication(0))
    b = Streams(SeedTree(1).replication(1))
    assert _draws(a, "x") != _draws(b, "x")


def test_np_rng_reproducible_and_cached() -> None:
    """np_rng(name) is cached, reproducible across Streams, and order-independent."""
    one = Streams(ROOT)
    gen = one.np_rng("noise")
    assert one.np_rng("noise") is gen
    first = gen.normal(size=4).tolist()
    two = Streams(ROOT)
    two.np_rng("other").random(3)
    assert two.np_rng("noise").normal(size=4).tolist() == first
    assert ROOT.np_rng("noise").normal(size=4).tolist() == first


def test_names_covers_both_kinds() -> None:
    """names() is the sorted union of random and numpy stream names."""
    streams = Streams(ROOT)
    streams.rng("zeta")
    streams.np_rng("alpha")
    streams.rng("mid")
    streams.np_rng("mid")
    assert streams.names() == ["alpha", "mid", "zeta"]


def test_same_name_in_both_kinds_is_independent() -> None:
    """rng(name) and np_rng(name) are separate streams with separately tagged seeds."""
    streams = Streams(ROOT)
    py_draws = _draws(streams, "x")
    streams.np_rng("x").random(100)
    assert _draws(Streams(ROOT), "x") == py_draws


def _snapshot_and_continue(streams: Streams) -> tuple[dict[str, object], list[object]]:
    state = streams.getstate()
    return state, _continuation(streams)


def _continuation(streams: Streams) -> list[object]:
    a, b = streams.rng("a"), streams.rng("b")
    return [
        a.random(),
        a.gauss(0.0, 1.0),  # gauss caches a second value: part of the state
        b.randint(0, 10**9),
        streams.np_rng("n").normal(size=3).tolist(),
        a.random(),
    ]


def _warmed_up() -> Streams:
    streams = Streams(ROOT)
    streams.rng("a").gauss(0.0, 1.0)  # leaves a cached gauss value in the state
    streams.rng("b").random()
    streams.np_rng("n").random(7)
    return streams


def test_getstate_setstate_round_trip() -> None:
    """setstate(getstate()) makes the same Streams replay its continuation."""
    streams = _warmed_up()
    state, expected = _snapshot_and_continue(streams)
    streams.setstate(state)
    assert _continuation(streams) == expected


def test_setstate_on_a_fresh_streams() -> None:
    """A checkpoint restores onto a new Streams (after pickling) and continues identically."""
    streams = _warmed_up()
    state, expected = _snapshot_and_continue(streams)
    restored = Streams(ROOT)
    restored.setstate(pickle.loads(pickle.dumps(state)))  # noqa: S301  (our own bytes)
    assert restored.names() == ["a", "b", "n"]
    assert _continuation(restored) == expected


def test_getstate_keys_are_tagged() -> None:
    """Keys carry the kind of stream, so equal names never clash."""
    streams = Streams(ROOT)
    streams.rng("x")
    streams.np_rng("x")
    assert sorted(streams.getstate()) == ["numpy:x", "random:x"]


def test_getstate_is_a_snapshot() -> None:
    """The returned state does not follow later draws."""
    streams = Streams(ROOT)
    streams.np_rng("n")
    streams.rng("a")
    state = streams.getstate()
    again = pickle.dumps(state)
    streams.np_rng("n").random(5)
    streams.rng("a").random()
    assert pickle.dumps(state) == again


def test_setstate_keeps_references_valid() -> None:
    """Generators held by model code are restored in place."""
    streams = Streams(ROOT)
    held = streams.rng("a")
    held_np = streams.np_rng("n")
    state = streams.getstate()
    expected = (held.random(), held_np.random())
    streams.setstate(state)
    assert (held.random(), held_np.random()) == expected
    assert streams.rng("a") is held
    assert streams.np_rng("n") is held_np


def test_setstate_resets_streams_created_after_the_checkpoint() -> None:
    """A stream absent from the checkpoint restarts from its beginning."""
    streams = Streams(ROOT)
    streams.rng("a")
    state = streams.getstate()
    late = streams.rng("late")
    late_np = streams.np_rng("late")
    first = late.random()
    first_np = late_np.random()
    late.random()
    late_np.random()
    streams.setstate(state)
    assert late.random() == first
    assert late_np.random() == first_np


@pytest.mark.parametrize(
    ("state", "field"),
    [
        ({"a": (3, (1,) * 625, None)}, "'a'"),
        ({"random:": (3, (1,) * 625, None)}, "'random:'"),
        ({"random:a": "nonsense"}, "random:a"),
        ({"numpy:n": {"bit_generator": "MT19937"}}, "numpy:n"),
        ({"numpy:n": 5}, "numpy:n"),
        ({1: 2}, "1"),
    ],
)
def test_setstate_rejects_bad_state_and_changes_nothing(state: object, field: str) -> None:
    """A malformed checkpoint is a ConfigError naming the key; no stream changes."""
    streams = Streams(ROOT)
    a = streams.rng("a")
    n = streams.np_rng("n")
    a.random()
    before = pickle.dumps(streams.getstate())
    good = {"random:a": Streams(ROOT).rng("a").getstate()}  # would reset "a" if applied
    with pytest.raises(ConfigError, match=field):
        streams.setstate({**good, **state})  # type: ignore[dict-item]
    assert pickle.dumps(streams.getstate()) == before
    assert streams.rng("a") is a
    assert streams.np_rng("n") is n


def test_setstate_rejects_non_mapping() -> None:
    """The state must be the mapping getstate() returned."""
    with pytest.raises(ConfigError, match="state"):
        Streams(ROOT).setstate([("random:a", None)])  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", None, 3, b"a", ["a"]])
def test_bad_stream_name(bad: object) -> None:
    """An empty or non-str name is a ConfigError naming `name`; nothing is created."""
    streams = Streams(ROOT)
    with pytest.raises(ConfigError, match="name"):
        streams.rng(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="name"):
        streams.np_rng(bad)  # type: ignore[arg-type]
    assert streams.names() == []


@pytest.mark.parametrize("bad", [42, "seed", None])
def test_root_must_be_a_seed_tree(bad: object) -> None:
    """Streams needs a SeedTree; the message names `root` and points to as_seed_tree."""
    with pytest.raises(ConfigError, match=r"root.*as_seed_tree"):
        Streams(bad)  # type: ignore[arg-type]


def test_repr() -> None:
    """The repr shows the root and the stream names."""
    streams = Streams(SeedTree(1))
    streams.rng("b")
    streams.np_rng("a")
    assert repr(streams) == "Streams(SeedTree(1), names=['a', 'b'])"


def test_slots() -> None:
    """Streams and SeedTree are slotted (no per-instance __dict__)."""
    assert not hasattr(Streams(ROOT), "__dict__")
    assert not hasattr(ROOT, "__dict__")


# --------------------------------------------------------------------------------------
# numpy stays optional and lazy.
# --------------------------------------------------------------------------------------


def _run_isolated(code: str) -> subprocess.CompletedProcess[str]:
    src = Path(simulacra.rng.__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )


def test_import_does_not_import_numpy() -> None:
    """`import simulacra.rng` and making python streams never import numpy."""
    result = _run_isolated(
        "import sys\n"
        "import simulacra.rng as r\n"
        "r.Streams(r.SeedTree(1)).rng('a').random()\n"
        "print('numpy' in sys.modules)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_missing_numpy_is_a_config_error() -> None:
    """Without numpy, np_rng raises ConfigError with the install hint; python streams work."""
    result = _run_isolated(
        "import sys\n"
        "sys.modules['numpy'] = None  # makes `import numpy` raise ImportError\n"
        "import simulacra.rng as r\n"
        "from simulacra.errors import ConfigError\n"
        "s = r.Streams(r.SeedTree(1))\n"
        "s.rng('a').random()\n"
        "for make in (s.np_rng, r.SeedTree(1).np_rng):\n"
        "    try:\n"
        "        make('a')\n"
        "    except ConfigError as exc:\n"
        "        print(exc)\n"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    assert all(install_hint("numpy") in line for line in lines)
