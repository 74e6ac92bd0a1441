"""The agents' digest, encoded a chunk at a time, is the digest of their lines one by one."""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from simulacra.societies._rounds import _SPLIT, _line, _lines, agents_digest

LEAF = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
        | st.sampled_from([_SPLIT, "\x00", "simulacra.split", ",", '"']))
VALUE = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=4) | st.sampled_from([_SPLIT]), inner,
                                       max_size=3)
                     | st.frozensets(st.integers(), max_size=2), max_leaves=10)


@settings(max_examples=400, deadline=None)
@given(st.lists(VALUE, min_size=1, max_size=8))
@example([[1, _SPLIT, 2], {"k": [_SPLIT, _SPLIT]}, _SPLIT])
def test_lines_are_the_lines_one_by_one(values: list[Any]) -> None:
    assert _lines(values) == b"".join(_line(v) for v in values)


class _Agent:
    def __init__(self, id: str, state: dict[str, Any]) -> None:
        self.id = id
        self.state = state

    def get_state(self) -> dict[str, Any]:
        return self.state


def test_agents_digest_is_the_hash_of_each_agents_line() -> None:
    agents = {f"a{i:04d}": _Agent(f"a{i:04d}", {"n": i, "x": [i / 3, _SPLIT, i] if i % 7 else {i}})
              for i in range(1500)}  # three chunks, some not plain JSON, some holding the marker
    h = hashlib.sha256(b"scheme:agents\n")
    for agent_id, agent in agents.items():
        h.update(_line([agent_id, "_Agent", agent.get_state()]))
    assert agents_digest("scheme", agents) == h.hexdigest()


def test_the_collector_is_paused_for_the_digests_and_left_as_it_was() -> None:
    import gc

    from simulacra.societies._rounds import gc_paused

    was = gc.isenabled()
    try:
        for before in (True, False):
            (gc.enable if before else gc.disable)()
            with gc_paused():
                assert not gc.isenabled()
            assert gc.isenabled() is before
    finally:
        (gc.enable if was else gc.disable)()
