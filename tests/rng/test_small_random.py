"""SmallRandom: xoshiro256++ as written, the compiled class equal to the pure one, streams.

The oracle for the generator itself is a third implementation written here
from the published algorithm with numpy's wrapping uint64 arithmetic; the
compiled class (``simulacra.core._ckernel``) is held to the pure one
(``simulacra.rng._small``) on generated programs of calls, errors included.
"""

from __future__ import annotations

import copy
import math
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra import ConfigError, SeedTree, Sim, Streams
from simulacra.rng._small import PySmallRandom

try:
    from simulacra.core._ckernel import SmallRandom as CSmallRandom
except ImportError:  # the pure-kernel install: nothing compiled to compare
    CSmallRandom = None

IMPLEMENTATIONS = [PySmallRandom] + ([CSmallRandom] if CSmallRandom is not None else [])
needs_compiled = pytest.mark.skipif(CSmallRandom is None, reason="the compiled kernel is not built")
U64 = np.uint64


def _reference(seed: int, count: int) -> list[int]:
    """xoshiro256++ from its paper, in numpy uint64 (wrapping), seeded by SplitMix64."""
    with np.errstate(over="ignore"):
        def splitmix(x: np.uint64) -> tuple[np.uint64, np.uint64]:
            x = U64(x + U64(0x9E3779B97F4A7C15))
            z = x
            z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
            return x, z ^ (z >> U64(31))

        def rotl(x: np.uint64, k: int) -> np.uint64:
            return U64((x << U64(k)) | (x >> U64(64 - k)))

        hi, a = splitmix(U64(seed >> 64))
        hi, b = splitmix(hi)
        lo, c = splitmix(U64(seed & (2**64 - 1)))
        lo, d = splitmix(lo)
        s = [a, b, c, d]
        out = []
        for _ in range(count):
            out.append(int(U64(rotl(U64(s[0] + s[3]), 23) + s[0])))
            t = U64(s[1] << U64(17))
            s[2] ^= s[0]
            s[3] ^= s[1]
            s[1] ^= s[2]
            s[0] ^= s[3]
            s[2] ^= t
            s[3] = rotl(s[3], 45)
        return out


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda c: c.__module__)
@pytest.mark.parametrize("seed", [0, 1, 2**64 - 1, 2**64, 2**128 - 1, 0x1234_5678_9ABC_DEF0_0FED])
def test_the_words_are_xoshiro256pp_as_published(impl: Any, seed: int) -> None:
    rng = impl(seed)
    assert [rng.getrandbits(64) for _ in range(50)] == _reference(seed, 50)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda c: c.__module__)
def test_the_draws_have_their_documented_definitions(impl: Any) -> None:
    words = iter(_reference(99, 400))
    rng = impl(99)
    assert rng.random() == (next(words) >> 11) * 2.0**-53
    assert rng.expovariate(2.5) == -math.log(1.0 - (next(words) >> 11) * 2.0**-53) / 2.5
    assert rng.uniform(-3.0, 5.0) == -3.0 + 8.0 * ((next(words) >> 11) * 2.0**-53)
    assert rng.getrandbits(7) == next(words) >> 57
    draw = rng.randrange(10, 20)  # bit_length(10) = 4: the top 4 bits until one is below 10
    below = next(w >> 60 for w in words if w >> 60 < 10)
    assert draw == 10 + below


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda c: c.__module__)
def test_randrange_is_uniform(impl: Any) -> None:
    rng = impl(2024)
    counts = [0] * 10
    for _ in range(50_000):
        counts[rng.randrange(10)] += 1
    expected = 5_000
    chi2 = sum((c - expected) ** 2 / expected for c in counts)
    assert chi2 < 40, counts  # 9 degrees of freedom: p < 1e-5 beyond 40


def _program() -> st.SearchStrategy[list[tuple[str, tuple[Any, ...], dict[str, Any]]]]:
    ints = st.one_of(st.integers(-5, 40), st.integers(-(2**63), 2**63 - 1),
                     st.sampled_from([2**63, -(2**63) - 1, 2**64, True]))
    floats = st.one_of(st.floats(-1e6, 1e6), st.sampled_from([0.0, -1.0, 1e-300]))
    calls = st.one_of(
        st.tuples(st.just("random"), st.just(())),
        st.tuples(st.just("uniform"), st.tuples(floats, floats)),
        st.tuples(st.just("uniform"), st.tuples(ints, floats)),
        st.tuples(st.just("expovariate"), st.one_of(st.just(()), st.tuples(floats),
                                                    st.tuples(st.integers(-3, 3)))),
        st.tuples(st.just("getrandbits"), st.tuples(st.integers(-2, 70))),
        st.tuples(st.just("randrange"), st.one_of(st.tuples(ints), st.tuples(ints, ints),
                                                  st.tuples(ints, ints, st.integers(-4, 4)))),
        st.tuples(st.just("randint"), st.tuples(ints, ints)),
        st.tuples(st.just("choice"), st.tuples(st.one_of(
            st.lists(st.integers(), max_size=6), st.tuples(st.integers(), st.integers()),
            st.text(max_size=5), st.just(range(0, 30, 3))))),
        st.tuples(st.just("shuffle"), st.tuples(st.lists(st.integers(), max_size=9))),
        st.tuples(st.just("setstate"), st.tuples(st.one_of(
            st.tuples(*[st.integers(0, 2**64 - 1)] * 4), st.just((0, 0, 0, 0)),
            st.just((1, 2, 3)), st.just((1, 2, 3, 2**64)), st.just("nope"),
            st.lists(st.integers(0, 9), min_size=4, max_size=4)))),
    )
    # By keyword, as random.Random takes them, and with arguments a method does not take.
    keywords = st.one_of(
        st.tuples(st.just("choice"), st.just(()), st.fixed_dictionaries(
            {"seq": st.lists(st.integers(), min_size=1, max_size=4)})),
        st.tuples(st.just("shuffle"), st.just(()), st.fixed_dictionaries(
            {"x": st.lists(st.integers(), max_size=5)})),
        st.tuples(st.just("getrandbits"), st.just(()),
                  st.fixed_dictionaries({"k": st.integers(0, 64)})),
        st.tuples(st.just("setstate"), st.just(()), st.fixed_dictionaries(
            {"state": st.tuples(*[st.integers(1, 2**64 - 1)] * 4)})),
        st.tuples(st.just("expovariate"), st.just(()),
                  st.fixed_dictionaries({"lambd": st.floats(0.1, 10.0)})),
        st.tuples(st.just("randrange"), st.just(()), st.fixed_dictionaries(
            {"start": st.integers(0, 5), "stop": st.integers(6, 50)})),
        st.tuples(st.just("uniform"), st.just(()),
                  st.fixed_dictionaries({"a": st.floats(0, 1), "b": st.floats(1, 2)})),
        st.tuples(st.sampled_from(["random", "getstate", "choice", "shuffle", "setstate",
                                   "getrandbits"]),
                  st.sampled_from([(), (1,), (1, 2)]),
                  st.sampled_from([{}, {"bogus": 1}])),
    )
    return st.lists(st.one_of(calls.map(lambda c: (c[0], c[1], {})), keywords), max_size=25)


def _run(impl: Any, seed: int,
         program: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
    rng = impl(seed)
    seen: list[Any] = []
    for name, args, kwargs in program:
        args, kwargs = copy.deepcopy((args, kwargs))
        try:
            seen.append(("ok", getattr(rng, name)(*args, **kwargs), args, kwargs))
        except Exception as exc:  # the same error, type and words, from both
            seen.append(("raised", type(exc).__name__, str(exc)))
        seen.append(rng.getstate())
    return seen


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**128 - 1), program=_program())
def test_the_compiled_class_draws_what_the_pure_one_draws(
        seed: int, program: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> None:
    assert _run(CSmallRandom, seed, program) == _run(PySmallRandom, seed, program)


@pytest.mark.parametrize("bad", [-1, 2**128, 1.5, "7", None, True])
@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda c: c.__module__)
def test_a_bad_seed_is_one_clear_error(impl: Any, bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match=r"SmallRandom seed must be an int in"):
        impl(bad)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda c: c.__module__)
def test_it_pickles_and_copies_where_it_was(impl: Any) -> None:
    rng = impl(5)
    rng.random()
    def pickled(r: Any) -> Any:
        return pickle.loads(pickle.dumps(r))  # noqa: S301  (our own bytes)

    for make in (pickled, copy.deepcopy, copy.copy):
        twin = make(rng)
        assert twin is not rng
        assert type(twin).__name__ == "SmallRandom"
        assert [twin.random() for _ in range(5)] == [rng.random() for _ in range(5)]


def test_the_front_door_serves_the_compiled_class_when_the_kernel_is_compiled() -> None:
    import simulacra
    import simulacra.core
    import simulacra.rng

    expected = CSmallRandom if simulacra.core.KERNEL == "compiled" else PySmallRandom
    assert simulacra.SmallRandom is expected
    assert simulacra.rng.SmallRandom is expected
    assert type(Sim(seed=1).small_rng("x")) is expected


def test_streams_are_named_seeded_and_apart_from_the_random_stream() -> None:
    tree = SeedTree(11)
    first = Streams(tree)
    later = Streams(tree)
    later.small_rng("other").random()  # another stream first: no effect on "a"
    assert first.small_rng("a").random() == later.small_rng("a").random()
    assert first.small_rng("a") is first.small_rng("a")
    assert SeedTree(11).small_rng("b").random() == SeedTree(11).small_rng("b").random()
    assert SeedTree(11).small_rng("b").random() != SeedTree(12).small_rng("b").random()
    assert tree.small_rng("a").random() != tree.stream("a").random()
    with pytest.raises(ConfigError):
        first.small_rng("")


def test_a_checkpoint_holds_small_streams() -> None:
    streams = Streams(SeedTree(3))
    a = streams.small_rng("a")
    a.random()
    saved = streams.getstate()
    assert saved["small:a"] == a.getstate()
    then = [a.random() for _ in range(3)]
    b = streams.small_rng("b")  # made after the checkpoint: reset by setstate
    b_first = b.random()
    streams.setstate(saved)
    assert [a.random() for _ in range(3)] == then
    assert b.random() == b_first
    assert "small:a" in pickle.loads(pickle.dumps(saved))  # noqa: S301


@pytest.mark.parametrize("value", [(0, 0, 0, 0), (1, 2, 3), "x", (1, 2, 3, -1)])
def test_a_bad_small_state_changes_nothing_and_names_the_key(value: Any) -> None:
    streams = Streams(SeedTree(3))
    a = streams.small_rng("a")
    before = a.getstate()
    with pytest.raises(ConfigError, match=r"state\['small:a'\] must be a SmallRandom state"):
        streams.setstate({"random:r": random_state(), "small:a": value})
    assert a.getstate() == before
    assert "r" not in streams.names()


def random_state() -> object:
    import random

    return random.Random(1).getstate()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda c: c.__module__)
def test_it_is_no_base_class_and_a_bare_object_is_never_all_zero(impl: Any) -> None:
    with pytest.raises(TypeError, match="not an acceptable base type"):
        type("Mine", (impl,), {})
    if impl is CSmallRandom:  # made without __init__: SmallRandom(0)'s state
        assert impl.__new__(impl).getstate() == PySmallRandom(0).getstate()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda c: c.__module__)
def test_a_state_of_int_subclasses_is_kept_as_ints(impl: Any) -> None:
    import enum

    class Word(enum.IntEnum):
        ONE = 1

    rng = impl(0)
    rng.setstate((Word.ONE, 2, 3, 4))
    assert [type(w) for w in rng.getstate()] == [int] * 4
