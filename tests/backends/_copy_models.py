"""Agents whose state or payloads cannot be copied or pickled (for test_uncopyable.py).

Module-level, so worker processes import them by name; the local class that
will not pickle is made inside a function on purpose.
"""

from __future__ import annotations

import threading
from typing import Any

from simulacra import Agent, Context


def _make_local_class() -> type:
    class Note:
        """Deep-copies (by class reference), but cannot be pickled: a local class."""

        def __init__(self, n: int) -> None:
            self.n = n

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Note) and other.n == self.n

        __hash__ = None  # type: ignore[assignment]

    return Note


#: A class that copies but does not pickle.
Note = _make_local_class()


class Locker(Agent):
    """Holds a lock from ``__init__`` (*lock_at* ``-1``) or takes one at step *lock_at*."""

    def __init__(self, id: int, *, lock_at: int | None = None) -> None:
        super().__init__(id)
        self.count = 0
        self.lock_at = lock_at
        if lock_at == -1:
            self.lock = threading.Lock()

    def act(self, ctx: Context) -> None:
        self.count += 1
        if ctx.step == self.lock_at:
            self.lock = threading.Lock()


class Sender(Agent):
    """Sends a list to the next agent every step; at step *sends_at*, also something odd.

    *kind* ``"note"``: an instance of a local class (copies, does not pickle);
    ``"lock"``: a dict holding a lock (does not copy); ``"broadcast"``: a
    list holding a lock, broadcast to agents 0 and 1.
    """

    def __init__(self, id: int, *, sends_at: int | None = None, kind: str = "note") -> None:
        super().__init__(id)
        self.got = 0
        self.sends_at = sends_at
        self.kind = kind

    def act(self, ctx: Context) -> None:
        self.got += len(ctx.inbox())
        after = (self.id + 1) % 6
        ctx.send(after, "plain", [self.id])
        if ctx.step != self.sends_at:
            return
        if self.kind == "note":
            ctx.send(after, "note", Note(self.id))
        elif self.kind == "lock":
            ctx.send(after, "guard", {"guard": threading.Lock()})
        else:
            ctx.broadcast("guards", [threading.Lock()], to=[0, 1])


class Holder(Agent):
    """Takes an instance of a local class into its state at step *at*."""

    def __init__(self, id: int, *, at: int | None = None) -> None:
        super().__init__(id)
        self.at = at
        self.notes: list[Any] = []

    def act(self, ctx: Context) -> None:
        if ctx.step == self.at:
            self.notes.append(Note(self.id))


class Keeper(Agent):
    """Keeps the list it was given, and appends to it every step."""

    def __init__(self, id: int, *, items: list[Any]) -> None:
        super().__init__(id)
        self.items = items

    def act(self, ctx: Context) -> None:
        self.items.append(len(self.items) + ctx.rng.randrange(10))
