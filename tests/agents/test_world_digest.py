"""World.state_digest: the one-pass encoding of a PLAIN_STATE world is the canonical one."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra.agents import World

_SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
_PLAIN = st.recursive(_SCALARS, lambda inner: (
    st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=6), inner, max_size=4)), max_leaves=30)


class _Canonical(World):
    def __init__(self, state: dict[str, Any]) -> None:
        super().__init__()
        self.__dict__.update(state)


class _Plain(_Canonical):
    PLAIN_STATE = True


_Plain.__qualname__ = _Canonical.__qualname__  # the digest names the class: the same one


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=6).filter(lambda k: k != "lock"), _PLAIN,
                       max_size=5))
def test_a_plain_state_digests_as_the_canonical_walk_does(state: dict[str, Any]) -> None:
    assert _Plain(state).state_digest() == _Canonical(state).state_digest()


def test_a_state_that_is_not_plain_falls_back_to_the_walk() -> None:
    for odd in ({"tags": {"b", "a"}}, {"x": float("nan")}, {"blob": b"\x00\x01"},
                {"nested": [{"s": frozenset({3, 1})}]}):
        assert _Plain(odd).state_digest() == _Canonical(odd).state_digest()
    # ...and the digest still tells states apart.
    assert _Plain({"tags": {"a"}}).state_digest() != _Plain({"tags": {"b"}}).state_digest()
