"""The encoding does not depend on the process: PYTHONHASHSEED changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from simulacra.trace import Trace, encode_record

SRC = Path(__file__).resolve().parents[2] / "src"

# Built the same way in this process and in the subprocesses. Sets of strings iterate in
# hash order, which depends on PYTHONHASHSEED; the opaque object's repr holds an address.
BUILD = """
from simulacra.trace import Trace, encode_record

class Opaque:
    pass

names = {f"agent-{i}" for i in range(40)}
records = [
    (0.0, "spawn", "world", {"names": names, "frozen": frozenset(names)}),
    (0.5, "msg", "a", {("x", 1): sorted(names)[:3], 2: {"k", "j"}, "nested": [{"s": {"a", "b"}}]}),
    (1.0, "obj", "b", Opaque()),
    (1.0, "mixed", "c", {frozenset({"p", "q"}), frozenset({"r"}), ("t", 1)}),
    # A dict built in set order: insertion order differs, contents do not.
    (1.0, "keys", "d", {name: len(name) for name in names}),
]
"""

REPORT = """
import json
print(json.dumps({
    "digest": Trace(records).digest(),
    "lines": [encode_record(r).decode() for r in records],
    "order": list(names),
    "repr": repr(records[2][3]),
}))
"""


def _run(hashseed: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONHASHSEED": hashseed}
    done = subprocess.run(
        [sys.executable, "-c", BUILD + REPORT],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_digest_is_identical_across_hash_seeds() -> None:
    one, two = _run("1"), _run("2")

    # The test only means something if the seeds really reorder the sets.
    assert one["order"] != two["order"]
    assert one["lines"] == two["lines"]
    assert one["digest"] == two["digest"]

    namespace: dict[str, Any] = {}
    exec(BUILD, namespace)  # noqa: S102  (the same builder, in this process)
    records = namespace["records"]
    assert one["digest"] == Trace(records).digest()
    assert one["lines"] == [encode_record(r).decode() for r in records]
