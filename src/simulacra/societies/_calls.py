"""``calls.jsonl``: one line per model call of a society run, for the report's latency and failures.

Each call that reaches the model (not one a resumed run serves from
``llm_recordings.sqlite``) writes a line as it returns. The lines are flushed
at the end of every step and whenever half a second has passed since the last
flush, so a run that is killed keeps the lines of every step it finished (and
those of a slow step up to half a second before the kill)::

    {"agent": "ada00", "n": 3, "turn": 3, "step": 3, "t": 3.0, "latency_s": 0.41,
     "wall_s": 0.41, "at": 12.5, "prompt_tokens": 210, "completion_tokens": 24,
     "cost": 0.0000392, "ok": true, "key": "9f2c...", "session": 0}

- ``agent``, ``n``: the call site (the agent's n-th call);
- ``turn``: the turn the call was made in, as the turn's events name it in
  ``action_events.jsonl`` (their ``step``): the step of the round engine, the
  agent's turn number on the event-driven engine;
- ``step``: the step (round engine) or the window of virtual time (event
  engine) the call belongs to; ``t``: the step, or the virtual time its turn
  woke at;
- ``latency_s``: wall-clock seconds of the call (round engine) or its
  simulated latency (event engine; the virtual time the call takes);
  ``wall_s``: wall-clock seconds in both; ``at``: wall-clock seconds since this
  session started;
- ``prompt_tokens``, ``completion_tokens``, ``cost`` (``sim.llm.pricing``);
- ``ok``: false for a call that raised; then ``error`` (its type) and
  ``message``, and ``prompt`` (its last message, cut at 2,000 characters: a
  failed call's request is not recorded in the store);
- ``key``: the request's key (``CompletionRequest.key()``): what it saw is the
  request recorded under it in ``llm_recordings.sqlite``;
- ``session``: 0 for the first session, 1 for the first resume...;
- ``endpoint`` (a run over ``sim.llm.endpoints`` only): the endpoint that
  served the call, or failed it; ``fallback_from``: the endpoint it was routed
  to, when that one was down and the call moved to its fallback. ``cost`` is
  then at the serving endpoint's pricing.

The file is telemetry, never part of the run's digest, and nothing in it
changes what the run does: the same run writes other latencies each time.
A resumed run appends to it (the line a kill cut short is dropped first).
"""

from __future__ import annotations

import json
import math
import threading
import time as _time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from simulacra._util import ModelWrapper

if TYPE_CHECKING:
    from simulacra.llm import CallSite, Completion, CompletionRequest, LanguageModel

__all__ = ["CallLog", "CallLogModel"]

#: Seconds of lines a kill may lose in a step that is still running.
_FLUSH_S: Final = 0.5
#: How much of a failed call's prompt its line keeps.
_PROMPT_CHARS: Final = 2000

_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_encode_str: Callable[[str], str] = json.encoder.encode_basestring


def _num(value: object) -> str:
    """*value* as _ENCODE writes it: an int or a finite float straight, anything else encoded."""
    if type(value) is int:
        return int.__repr__(value)
    if type(value) is float and math.isfinite(value):
        return float.__repr__(value)
    return _ENCODE(value)


#: ``context(agent) -> (turn, step, t)`` of the call an agent is making now.
Context = Callable[[str], tuple[int, int, float]]
#: ``simulated(request, completion, site) -> seconds`` of virtual time (event engine).
Simulated = Callable[[Any, Any, Any], float]


def _cut_partial_line(path: Path) -> None:
    """Drop a last line a kill cut short, so that appended lines start on a line of their own."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with path.open("rb+") as file:
        file.seek(size - 1)
        if file.read(1) == b"\n":
            return
        # Find the last newline (reading back in blocks) and cut after it.
        end = size
        while end > 0:
            start = max(0, end - 65536)
            file.seek(start)
            at = file.read(end - start).rfind(b"\n")
            if at >= 0:
                file.truncate(start + at + 1)
                return
            end = start
        file.truncate(0)


class CallLog:
    """Writes ``calls.jsonl`` (thread-safe; flushed by :meth:`flush` and every half second).

    Args:
        path: The file (appended to: a resumed run continues it).
        session: The session number (0, then 1 for the first resume...).
        price: ``price(prompt_tokens, completion_tokens) -> cost``.
    """

    __slots__ = ("_file", "_flushed", "_lock", "_start", "context", "price", "priced",
                 "session", "simulated", "wall_of")

    def __init__(self, path: str | Path, *, session: int,
                 price: Callable[[int, int], float],
                 priced: Callable[[Completion], float | None] | None = None) -> None:
        where = Path(path)
        _cut_partial_line(where)
        self._file: IO[str] | None = where.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._start = _time.perf_counter()
        self._flushed = self._start
        self.session = session
        self.price = price
        #: ``priced(completion) -> cost`` of a run over several endpoints (each
        #: line then names its endpoint), or None.
        self.priced = priced
        #: Where the call belongs; set once the engine is built (None: step 0).
        self.context: Context | None = None
        #: The simulated latency of a call (the event-driven engine), or None.
        self.simulated: Simulated | None = None
        #: ``wall_of(site)``: the wall seconds a call took where it was made (a
        #: shard), or None: the time it takes to return here.
        self.wall_of: Callable[[CallSite], float | None] | None = None

    def took(self, site: CallSite | None, wall: float) -> float:
        """The wall seconds of the call at *site* that returned here after *wall*."""
        wall_of = self.wall_of
        if wall_of is None or site is None:
            return wall
        made = wall_of(site)
        return wall if made is None else made

    def _where(self, site: CallSite | None) -> tuple[int, int, float]:
        context = self.context
        if context is None or site is None:
            return 0, 0, 0.0
        try:
            return context(site.agent)
        except (KeyError, AttributeError, TypeError):  # an agent the engine does not know
            return 0, 0, 0.0

    def _write(self, record: dict[str, Any]) -> None:
        self._write_line(_ENCODE(record) + "\n")

    def _write_line(self, line: str) -> None:
        with self._lock:
            file = self._file
            if file is None:
                return  # closed: a call that outlived the run
            file.write(line)
            now = _time.perf_counter()
            if now - self._flushed >= _FLUSH_S:
                file.flush()
                self._flushed = now

    def flush(self) -> None:
        """Write out the lines so far (the engine calls it at the end of every step)."""
        with self._lock:
            if self._file is not None:
                self._file.flush()
                self._flushed = _time.perf_counter()

    def _head(self, site: CallSite | None, wall: float, started: float) -> dict[str, Any]:
        turn, step, t = self._where(site)
        return {"agent": "" if site is None else site.agent, "n": -1 if site is None else site.n,
                "turn": turn, "step": step, "t": t, "latency_s": round(wall, 6),
                "wall_s": round(wall, 6), "at": round(started - self._start, 6)}

    def done(self, request: CompletionRequest, site: CallSite | None, completion: Completion,
             wall: float, started: float) -> None:
        """Write the line of a call that returned *completion* after *wall* seconds."""
        simulated = self.simulated
        if simulated is None and site is not None and self.priced is None:
            # The common line, written straight (the same JSON as _ENCODE of the dict below).
            turn, step, t = self._where(site)
            prompt, done = completion.prompt_tokens, completion.completion_tokens
            took = float.__repr__(round(wall, 6))  # perf_counter differences: finite floats
            # The counts are ints (Completion and CallSite check theirs), written as _num would.
            self._write_line(
                f'{{"agent":{_encode_str(site.agent)},"n":{int.__repr__(site.n)},'
                f'"turn":{_num(turn)},"step":{_num(step)},"t":{_num(t)},"latency_s":{took},'
                f'"wall_s":{took},"at":{float.__repr__(round(started - self._start, 6))},'
                f'"prompt_tokens":{int.__repr__(prompt)},"completion_tokens":{int.__repr__(done)},'
                f'"cost":{_num(round(self.price(prompt, done), 12))},"ok":true,'
                f'"key":{_encode_str(request.key())},"session":{_num(self.session)}}}\n')
            return
        record = self._head(site, wall, started)
        if simulated is not None and site is not None:
            try:
                record["latency_s"] = round(float(simulated(request, completion, site)), 9)
            except Exception:  # telemetry must never fail a call
                record["latency_s"] = None
        prompt, done = completion.prompt_tokens, completion.completion_tokens
        cost = self.price(prompt, done)
        if self.priced is not None:
            from simulacra.llm import endpoint_of  # noqa: PLC0415  (loaded by then)

            endpoint, moved = endpoint_of(completion)
            cost = self.priced(completion) or 0.0
            record["endpoint"] = endpoint
            if moved is not None:
                record["fallback_from"] = moved
        record.update(prompt_tokens=prompt, completion_tokens=done,
                      cost=round(cost, 12), ok=True,
                      key=request.key(), session=self.session)
        self._write(record)

    def failed(self, request: CompletionRequest, site: CallSite | None, error: BaseException,
               wall: float, started: float) -> None:
        """Write the line of a call that raised *error* after *wall* seconds."""
        record = self._head(site, wall, started)
        if self.simulated is not None:
            record["latency_s"] = None  # a failed call takes no simulated time of its own
        if self.priced is not None:
            record["endpoint"] = getattr(error, "endpoint", None)
            moved = getattr(error, "fallback_from", None)
            if moved is not None:
                record["fallback_from"] = moved
        messages = request.messages
        prompt = messages[-1].content if messages else ""
        record.update(prompt_tokens=0, completion_tokens=0, cost=0.0, ok=False,
                      error=type(error).__name__, message=str(error)[:500],
                      prompt=prompt[:_PROMPT_CHARS], key=request.key(), session=self.session)
        self._write(record)

    def close(self) -> None:
        """Close the file (idempotent); later calls write nothing."""
        with self._lock:
            file, self._file = self._file, None
        if file is not None:
            file.close()


class CallLogModel(ModelWrapper):
    """A model wrapper that times every call and writes its line to a :class:`CallLog`."""

    __slots__ = ("inner", "log")

    inner: LanguageModel

    def __init__(self, inner: LanguageModel, log: CallLog) -> None:
        self.inner = inner
        self.log = log

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        clock = _time.perf_counter
        started = clock()
        try:
            completion = self.inner.complete(request, site=site)
        except Exception as exc:
            self.log.failed(request, site, exc, self.log.took(site, clock() - started), started)
            raise
        self.log.done(request, site, completion, self.log.took(site, clock() - started),
                      started)
        return completion

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        clock = _time.perf_counter
        started = clock()
        try:
            completion = await self.inner.acomplete(request, site=site)
        except Exception as exc:
            self.log.failed(request, site, exc, self.log.took(site, clock() - started), started)
            raise
        self.log.done(request, site, completion, self.log.took(site, clock() - started),
                      started)
        return completion

    def __getattr__(self, name: str) -> Any:
        # usage, calls_served...: whatever the wrapped model reports.
        return getattr(self.inner, name)
