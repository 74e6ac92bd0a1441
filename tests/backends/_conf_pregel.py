"""PregelBackend in the conformance suite (tests/backends/test_conformance.py picks this up).

The conformance model never votes to halt, so a PregelBackend must give the
LocalBackend reference's digests exactly; declared but unused combiners and
aggregators must change nothing either.
"""

from __future__ import annotations

from collections.abc import Callable

from simulacra import ExecutionBackend, PregelBackend

BACKENDS: list[tuple[str, Callable[[], ExecutionBackend]]] = [
    ("pregel", PregelBackend),
    ("pregel-unused-reducers",
     lambda: PregelBackend(10_000, combiners={"unused": "sum"}, aggregators={"total": "max"})),
]
