"""Digests of agent state and of messages: what "the same result" means for agent models.

Both are SHA-256 over a versioned header line and then one canonical JSON line
per item (``simulacra.trace.canonical``: sorted keys, floats written exactly,
sets sorted, no memory addresses), so equal runs give equal digests in every
process, on every backend and with every ``PYTHONHASHSEED``:

* state: one line ``[id, class qualname, vars(agent)]`` per agent, in id order;
* messages: one line ``[phase, sender, seq, recipient, topic, payload]`` per
  message, in total order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final, final

from simulacra.trace import canonical

from ._agent import AgentId
from ._context import Message

__all__ = ["STATE_SCHEME", "MESSAGE_SCHEME", "MessageDigest", "canonical_line", "state_digest"]

#: Header of the state digest; a change of encoding must come with a new name.
STATE_SCHEME: Final = "simulacra.agents.state.v1"
#: Header of the message digest.
MESSAGE_SCHEME: Final = "simulacra.agents.messages.v1"

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                            allow_nan=False)


def canonical_line(value: object) -> bytes:
    """The canonical JSON encoding of *value*, as UTF-8 bytes, plus a newline."""
    return (_ENCODER.encode(canonical(value)) + "\n").encode("utf-8", "surrogatepass")


def state_digest(snapshot: Mapping[AgentId, tuple[str, Mapping[str, Any]]]) -> str:
    """Return the hex SHA-256 state digest of an agents snapshot.

    Args:
        snapshot: ``{id: (class qualname, state)}``, as backends' ``snapshot()``
            return it (any key order: the digest sorts by id).
    """
    h = hashlib.sha256((STATE_SCHEME + "\n").encode("ascii"))
    for agent_id in sorted(snapshot):  # ids of one model share a type
        qualname, state = snapshot[agent_id]
        h.update(canonical_line([agent_id, qualname, state]))
    return h.hexdigest()


@final
class MessageDigest:
    """An incremental SHA-256 digest of messages in total order (e.g. one step's)."""

    __slots__ = ("_count", "_hash")

    def __init__(self) -> None:
        self._hash = hashlib.sha256((MESSAGE_SCHEME + "\n").encode("ascii"))
        self._count = 0

    def update(self, messages: Iterable[Message]) -> None:
        """Add *messages*, which must come in total order."""
        update = self._hash.update
        for message in messages:
            update(canonical_line(list(message)))
            self._count += 1

    @property
    def count(self) -> int:
        """How many messages were added."""
        return self._count

    def hexdigest(self) -> str:
        """The hex digest of the messages added so far."""
        return self._hash.hexdigest()
