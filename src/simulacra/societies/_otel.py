"""OpenTelemetry spans of a society run (``run.trace.otel``): steps, turns and model calls.

Imported only when ``run.trace.otel`` is ``jsonl`` or ``otlp`` (the ``otel``
extra): a run with tracing off imports no ``opentelemetry`` module and does no
per-call or per-turn work. Three kinds of span, each the parent of the next:

- a step (round engine) or a window (event-driven engine): ``step 3`` /
  ``window 3``, a root span (one trace per step);
- a turn: ``invoke_agent {agent id}`` (OpenTelemetry's GenAI conventions);
- a model call: ``chat {model}``, with ``gen_ai.*`` attributes (operation,
  provider, model, usage) and simulacra's own (``simulacra.*``: seed, step,
  virtual time, agent, call number, request key).

A turn's span is found by its agent (an agent has one turn open at a time),
so a call finds its parent from its call site on whatever thread or task
makes it: no context has to travel with the call. On the event-driven
engine ``simulacra.step`` is the window (what ``calls.jsonl`` calls the
step), also given as ``simulacra.window``.

A call a resumed run serves from the recordings is no call span (as it is no
line of ``calls.jsonl``). Spans are telemetry: nothing here changes a run's
events or digest, and span and trace ids come from a generator of their own,
never from the global ``random`` stream.
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import INVALID_SPAN_ID, INVALID_TRACE_ID, Span, SpanKind, StatusCode
from opentelemetry.trace import set_span_in_context as _in_context

from simulacra._util import ModelWrapper

from ._calls import _cut_partial_line

if TYPE_CHECKING:
    from simulacra.llm import CallSite, Completion, CompletionRequest, LanguageModel

__all__ = ["JsonLinesSpanExporter", "RunTracer", "TracedModel", "start_tracing"]

#: The instrumentation scope of every span.
SCOPE: Final = "simulacra.societies"

_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                           default=str).encode


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def span_line(span: ReadableSpan) -> str:
    """The line of ``otel_spans.jsonl`` that holds *span* (without its line end)."""
    context = span.context
    parent = span.parent
    status = span.status
    record: dict[str, Any] = {
        "name": span.name,
        "trace_id": _hex(context.trace_id, 32) if context is not None else None,
        "span_id": _hex(context.span_id, 16) if context is not None else None,
        "parent_span_id": None if parent is None else _hex(parent.span_id, 16),
        "kind": span.kind.name,
        "start_time_unix_nano": span.start_time,
        "end_time_unix_nano": span.end_time,
        "status": status.status_code.name,
        "attributes": dict(span.attributes or {}),
    }
    if status.description:
        record["status_message"] = status.description
    return _ENCODE(record)


class JsonLinesSpanExporter(SpanExporter):
    """An OpenTelemetry span exporter that appends one JSON object a span to a file.

    Each line: ``name``, ``trace_id`` (32 hex digits), ``span_id`` (16),
    ``parent_span_id`` (16, or null for a root), ``kind``,
    ``start_time_unix_nano``, ``end_time_unix_nano``, ``status`` (``UNSET``,
    ``OK``, ``ERROR``; ``status_message`` with an error) and ``attributes``.
    Lines are buffered; :meth:`force_flush` writes them out. A resumed run
    appends (a last line a kill cut short is dropped first).

    Args:
        path: The file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        where = Path(path)
        _cut_partial_line(where)
        self._lock = threading.Lock()
        self._file: IO[str] | None = where.open("a", encoding="utf-8")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write *spans*, a line each."""
        text = "".join(span_line(span) + "\n" for span in spans)
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            self._file.write(text)
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Write the buffered lines to the file."""
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return True

    def shutdown(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            file, self._file = self._file, None
        if file is not None:
            file.close()


class _OwnIds(IdGenerator):
    """Random span and trace ids from a generator of the tracer's own.

    The SDK's default draws from the global ``random`` stream; a run must not
    leave any state it may read different for being traced.
    """

    def __init__(self) -> None:
        self._random = random.Random(os.urandom(16))

    def generate_span_id(self) -> int:
        while True:
            value = self._random.getrandbits(64)
            if value != INVALID_SPAN_ID:
                return value

    def generate_trace_id(self) -> int:
        while True:
            value = self._random.getrandbits(128)
            if value != INVALID_TRACE_ID:
                return value


def _value(value: int | str) -> int | str:
    """*value* as an attribute: an int that fits OTLP's int64, else its text."""
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return value
    return str(value)


class RunTracer:
    """The spans of one run: a :class:`~simulacra.societies.TurnTracer` and the call spans.

    Thread-safe: turns run on many threads or tasks at once; each agent has
    at most one turn in flight, so its open turn span is found by its id.

    Args:
        provider: The tracer provider (its processors export the spans).
        exporter: The JSON-lines exporter to flush after each step, or None.
        seed: The run's master seed.
        provider_name: ``sim.llm.provider`` (``gen_ai.provider.name``).
        unit: ``"step"`` (round engine) or ``"window"`` (event-driven engine).
    """

    def __init__(self, provider: TracerProvider, exporter: JsonLinesSpanExporter | None, *,
                 seed: int | str, provider_name: str, unit: str = "step") -> None:
        self._provider = provider
        self._exporter = exporter
        self._tracer = provider.get_tracer(SCOPE)
        self._seed = _value(seed)
        self.provider_name = provider_name
        self.unit = unit
        #: step (window) -> its open span.
        self._steps: dict[int, Span] = {}
        #: The step (window) whose turns start now: the parent of new turns.
        self._current: tuple[int, Span] | None = None
        #: agent -> (its open turn span, step, virtual time, turn)
        self._turns: dict[str, tuple[Span, int, float, int]] = {}
        #: ``simulacra.window`` beside ``simulacra.step`` (the event-driven engine).
        self._window = unit == "window"

    def _where(self, step: int) -> dict[str, Any]:
        """The step attribute(s) of a span of step (window) *step*."""
        if self._window:
            return {"simulacra.step": step, "simulacra.window": step}
        return {"simulacra.step": step}

    # -- the engine's hooks (TurnTracer) -------------------------------------------

    def step_started(self, step: int, time: float) -> None:
        """Open the span of step (window) *step*."""
        span = self._tracer.start_span(
            f"{self.unit} {step}", context=Context(),
            attributes={"simulacra.seed": self._seed, **self._where(step),
                        "simulacra.time": time})
        self._steps[step] = span
        self._current = (step, span)

    def step_ended(self, step: int, participants: int, failed: int, events: int) -> None:
        """Close the span of step (window) *step*."""
        span = self._steps.pop(step, None)
        if span is None:
            return
        span.set_attributes({"simulacra.turns": participants, "simulacra.turns_failed": failed,
                             "simulacra.events": events})
        span.end()
        if self._current is not None and self._current[0] == step:
            self._current = None

    def turn_started(self, agent: str, step: int, time: float, turn: int) -> None:
        """Open *agent*'s turn span, a child of step (window) *step*'s span.

        Of the step in progress if *step*'s span is not open (none is: a root).
        """
        parent = self._steps.get(step)
        if parent is None and self._current is not None:
            parent = self._current[1]
        span = self._tracer.start_span(
            f"invoke_agent {agent}",
            context=Context() if parent is None else _in_context(parent),
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": agent,
                        "gen_ai.agent.name": agent, "gen_ai.provider.name": self.provider_name,
                        "simulacra.seed": self._seed, **self._where(step),
                        "simulacra.time": time, "simulacra.agent": agent,
                        "simulacra.turn": turn})
        self._turns[agent] = (span, step, time, turn)

    def turn_ended(self, agent: str, ok: bool, error: BaseException | None) -> None:
        """Close *agent*'s turn span; a failed turn's status is ERROR."""
        entry = self._turns.pop(agent, None)
        if entry is None:
            return
        span = entry[0]
        if not ok:
            kind = type(error).__name__ if error is not None else "error"
            span.set_attribute("error.type", kind)
            span.set_status(StatusCode.ERROR, str(error)[:500] if error is not None else None)
        span.end()

    # -- calls ---------------------------------------------------------------------

    def call_started(self, request: CompletionRequest, site: CallSite | None) -> Span:
        """Open a call's span: a child of its agent's turn (of the step, outside a turn)."""
        agent = "" if site is None else str(site.agent)
        turn = self._turns.get(agent)
        current = self._current
        model = str(request.model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": self.provider_name,
            "gen_ai.request.model": model, "simulacra.seed": self._seed,
            "simulacra.agent": agent, "simulacra.call.n": -1 if site is None else site.n,
            "simulacra.request.key": request.key()}
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = float(request.temperature)
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = int(request.max_tokens)
        if turn is not None:
            parent: Span | None = turn[0]
            attributes.update({**self._where(turn[1]), "simulacra.time": turn[2],
                               "simulacra.turn": turn[3]})
        elif current is not None:  # a scenario's interview: no turn of the agent's own
            parent = current[1]
            attributes.update(self._where(current[0]))
        else:
            parent = None
        return self._tracer.start_span(
            f"chat {model}", context=Context() if parent is None else _in_context(parent),
            kind=SpanKind.CLIENT, attributes=attributes)

    @staticmethod
    def call_done(span: Span, completion: Completion) -> None:
        """Close a call's span with the tokens it used."""
        span.set_attributes({"gen_ai.usage.input_tokens": completion.prompt_tokens,
                             "gen_ai.usage.output_tokens": completion.completion_tokens})
        span.end()

    @staticmethod
    def call_failed(span: Span, error: BaseException) -> None:
        """Close a call's span as failed (``error.type``, status ERROR)."""
        span.set_attribute("error.type", type(error).__name__)
        span.set_status(StatusCode.ERROR, str(error)[:500])
        span.end()

    # -- the run ---------------------------------------------------------------------

    def flush(self) -> None:
        """After a step: the step's spans written out (the JSON-lines file)."""
        if self._exporter is not None:
            self._exporter.force_flush()

    def close(self) -> None:
        """Export what is left and shut the exporters down (idempotent).

        Spans still open are ended first, so that they are exported: an
        interrupted step's turns and the step itself, and on the event-driven
        engine a window that a turn at the run's very end opened (a run's cut
        includes its end, the next window's first instant).
        """
        for span in list(self._turns.values()):
            span[0].end()
        self._turns.clear()
        for step in sorted(self._steps):
            self._steps[step].end()
        self._steps.clear()
        self._current = None
        self._provider.shutdown()


class TracedModel(ModelWrapper):
    """A model wrapper that makes a span of every call (see :class:`RunTracer`)."""

    __slots__ = ("inner", "tracer")

    inner: LanguageModel

    def __init__(self, inner: LanguageModel, tracer: RunTracer) -> None:
        self.inner = inner
        self.tracer = tracer

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        span = self.tracer.call_started(request, site)
        try:
            completion = self.inner.complete(request, site=site)
        except BaseException as exc:
            self.tracer.call_failed(span, exc)
            raise
        self.tracer.call_done(span, completion)
        return completion

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        span = self.tracer.call_started(request, site)
        try:
            completion = await self.inner.acomplete(request, site=site)
        except BaseException as exc:
            self.tracer.call_failed(span, exc)
            raise
        self.tracer.call_done(span, completion)
        return completion

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _otlp_exporter() -> SpanExporter:
    """The OTLP exporter ``$OTEL_EXPORTER_OTLP_PROTOCOL`` asks for (http/protobuf by default).

    The endpoint, headers and timeout come from the standard
    ``OTEL_EXPORTER_OTLP_*`` variables, read by the exporter itself.
    """
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
            OTLPSpanExporter as GrpcExporter,
        )

        exporter: SpanExporter = GrpcExporter()
        return exporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )

    return OTLPSpanExporter()


def start_tracing(mode: str, *, path: Path | None, seed: int | str, run_name: str,
                  provider_name: str, unit: str = "step",
                  resource: Mapping[str, Any] | None = None) -> RunTracer:
    """A tracer exporting to *path* (``jsonl``) or to an OTLP collector (``otlp``).

    The resource is ``service.name`` ``simulacra`` (unless
    ``$OTEL_SERVICE_NAME`` says otherwise), ``simulacra.run.name`` and
    ``simulacra.seed``, plus ``$OTEL_RESOURCE_ATTRIBUTES``.
    """
    attributes: dict[str, Any] = {"simulacra.run.name": run_name,
                                  "simulacra.seed": _value(seed), **(resource or {})}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = "simulacra"
    provider = TracerProvider(resource=Resource.create(attributes), id_generator=_OwnIds())
    exporter: JsonLinesSpanExporter | None = None
    if mode == "jsonl":
        if path is None:
            msg = "run.trace.otel=jsonl needs a run directory"
            raise ValueError(msg)
        exporter = JsonLinesSpanExporter(path)
        # Synchronous: every span is in the file (a batch queue drops spans when full).
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
    return RunTracer(provider, exporter, seed=seed, provider_name=provider_name, unit=unit)
