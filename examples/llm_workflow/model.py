"""An LLM-serving system running agentic tasks: no model is ever called, only simulated.

Tasks
    Tasks arrive at an orchestrator as a Poisson process of rate
    ``arrival_rate`` (stream ``"arrivals"``) until ``horizon``; the run then
    drains. The orchestrator admits at most ``concurrency`` tasks at a time (a
    :class:`~simulacra.Resource`); the others wait in line. Each admitted task
    becomes an *agent* process that alternates think steps and act steps: it
    takes ``min_steps`` to ``max_steps`` think steps, with an act step between
    two think steps (the last think step writes the answer).

Think: batched LLM inference
    A think step puts an inference request into the shared request queue (a
    :class:`~simulacra.Store`) and waits for it. The prompt is the task's
    whole context so far: a first prompt of about ``prompt_tokens`` tokens,
    plus every output and tool result since. The output length is lognormal
    with mean ``output_tokens`` and shape ``token_sigma``, capped at
    ``max_output_tokens``. ``servers`` LLM servers serve the queue; each is a
    process that takes the oldest request (waiting for one if the queue is
    empty), then up to ``batch_size - 1`` more that are already queued, and
    serves the batch in ``prefill + decode_per_token * longest output`` (static
    batching: the batch is done when its longest sequence is).

Plan: the offloaded policy
    After every think step but the last, the agent ranks ``candidates``
    candidate plans (a tool, a relevance, an expected length, drawn from the
    task's stream) with :func:`planner.score_plans`, a CPU-heavy pure-Python
    score whose cost is set by ``planner_work``. It runs through
    :func:`simulacra.offload` in strict mode with the simulated duration
    ``planner_delay``: on the inline pool (the default) or on threads or
    processes (``run(backend=..., workers=...)``), with the same trace.

Act: tool calls
    The chosen plan's tool is called: latency exponential with mean
    ``tool_latency`` times the tool's multiplier, failure with probability
    ``tool_failure`` times the tool's multiplier. A failed call is retried
    after ``retry_backoff * 2**attempt``, at most ``max_retries`` times; a call
    that still fails fails the task.

Random streams
    ``"arrivals"``, and one stream per task (``"task/<index>"``) for its step
    count, token lengths, plans and tool outcomes. Per-task streams make the
    tasks' draws the same whatever the capacity: configurations of a sweep are
    compared on common random numbers.

KPIs (:meth:`Workflow.kpis`)
    ``tasks`` (arrived), ``completed``, ``failed``, ``mean_latency`` and
    ``p95_latency`` (arrival to answer, completed tasks, seconds),
    ``mean_queue_depth`` and ``max_queue_depth`` (inference requests waiting
    for a server, time-averaged and peak), ``mean_batch_size``,
    ``server_utilisation``, ``cost_per_task`` (``tokens * price_per_1k_tokens /
    1000 + tool calls * tool_call_price``, over finished tasks),
    ``serving_cost_per_task`` (the servers' time from start to the last
    answer, at ``server_price_per_hour``, over finished tasks: what capacity
    costs), ``tokens_per_task``, ``tool_calls_per_task``, ``tool_failures`` (failed
    calls, retried or not) and ``planner_calls``.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Any

from simulacra import (
    ConfigError,
    Event,
    Offloader,
    ProcessGenerator,
    Resource,
    Sim,
    Store,
    offload,
    use_pool,
)

if __package__:
    from .planner import TOOLS, Plan, score_plans
else:  # model.py loaded as a top-level module (python examples/llm_workflow, simulacra run)
    from planner import (  # type: ignore[no-redef,import-not-found,unused-ignore]
        TOOLS,
        Plan,
        score_plans,
    )

__all__ = ["KPIS", "InferenceRequest", "Params", "Task", "Workflow", "build", "run"]

#: The KPIs :func:`run` returns, in order.
KPIS: tuple[str, ...] = (
    "tasks", "completed", "failed", "mean_latency", "p95_latency", "mean_queue_depth",
    "max_queue_depth", "mean_batch_size", "server_utilisation", "cost_per_task",
    "serving_cost_per_task", "tokens_per_task", "tool_calls_per_task", "tool_failures",
    "planner_calls",
)


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True, slots=True)
class Params:
    """The parameters of the model (seconds, tokens, dollars); validated when made.

    Raises:
        ConfigError: a parameter is out of range; the message names the field,
            the value given and what was expected.
    """

    #: LLM servers serving the shared request queue.
    servers: int = 2
    #: The most requests a server serves in one batch.
    batch_size: int = 8
    #: The most tasks the orchestrator runs at once.
    concurrency: int = 16
    #: Tasks per second (Poisson).
    arrival_rate: float = 0.25
    #: Tasks arrive until this time; the run then drains.
    horizon: float = 3600.0
    #: Think steps per task: uniform from min_steps to max_steps.
    min_steps: int = 2
    max_steps: int = 5
    #: Mean length of a task's first prompt.
    prompt_tokens: float = 600.0
    #: Mean output length of an inference request.
    output_tokens: float = 120.0
    #: Lognormal shape of token lengths.
    token_sigma: float = 0.6
    #: Output lengths are capped here.
    max_output_tokens: int = 1024
    #: Tokens a tool result adds to the context.
    tool_result_tokens: int = 200
    #: Time to start a batch.
    prefill: float = 0.25
    #: Decode time per output token of the longest sequence in a batch.
    decode_per_token: float = 0.02
    #: Candidate plans ranked per act step.
    candidates: int = 4
    #: Rollout steps per candidate in the planner's score (its CPU cost).
    planner_work: int = 500
    #: Simulated duration of one planning call.
    planner_delay: float = 0.5
    #: Mean tool-call latency (times the tool's multiplier).
    tool_latency: float = 1.0
    #: Failure probability of a tool call (times the tool's multiplier, at most 0.95).
    tool_failure: float = 0.08
    #: Retries of a failed tool call before the task fails.
    max_retries: int = 2
    #: Wait before retry k: retry_backoff * 2**k.
    retry_backoff: float = 0.5
    #: Price of 1000 tokens (prompt and output alike).
    price_per_1k_tokens: float = 0.002
    #: Price of one tool call (each attempt).
    tool_call_price: float = 0.0005
    #: Price of one LLM server for an hour (3600 time units), busy or idle.
    server_price_per_hour: float = 2.0

    def __post_init__(self) -> None:
        _validate(self)


def _fail(name: str, value: object, expected: str) -> ConfigError:
    return ConfigError(f"llm_workflow: {name} must be {expected}, got {value!r}")


def _check_int(params: Params, name: str, least: int) -> None:
    value = getattr(params, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise _fail(name, value, f"an int >= {least}")


def _check_number(params: Params, name: str, *, positive: bool) -> None:
    value = getattr(params, name)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (value > 0 if positive else value >= 0):
        raise _fail(name, value, "a finite number > 0" if positive else "a finite number >= 0")


def _validate(params: Params) -> None:
    for name in ("servers", "batch_size", "concurrency", "min_steps", "max_steps",
                 "max_output_tokens", "candidates", "planner_work"):
        _check_int(params, name, 1)
    for name in ("tool_result_tokens", "max_retries"):
        _check_int(params, name, 0)
    for name in ("arrival_rate", "horizon", "prompt_tokens", "output_tokens",
                 "decode_per_token", "tool_latency"):
        _check_number(params, name, positive=True)
    for name in ("token_sigma", "prefill", "planner_delay", "retry_backoff",
                 "price_per_1k_tokens", "tool_call_price", "server_price_per_hour",
                 "tool_failure"):
        _check_number(params, name, positive=False)
    if params.max_steps < params.min_steps:
        raise _fail("max_steps", params.max_steps, f"an int >= min_steps={params.min_steps}")
    if not params.tool_failure < 1:
        raise _fail("tool_failure", params.tool_failure, "a probability in [0, 1)")


# --------------------------------------------------------------------------- entities


class Task:
    """One agentic task and what became of it."""

    __slots__ = ("arrived", "finished", "index", "outcome", "steps", "tokens", "tool_calls")

    def __init__(self, index: int, arrived: float) -> None:
        self.index = index
        self.arrived = arrived
        self.steps = 0
        self.tokens = 0
        self.tool_calls = 0
        self.finished: float | None = None
        #: None while running, then "completed" or "failed".
        self.outcome: str | None = None

    def __repr__(self) -> str:
        return f"<Task {self.index} {self.outcome}>"

    def __trace__(self) -> object:
        return {"task": self.index}


class InferenceRequest:
    """One think step's LLM call: its token counts and the event that says it is served."""

    __slots__ = ("done", "output_tokens", "prompt_tokens", "queued", "task")

    def __init__(self, sim: Sim, task: Task, prompt_tokens: int, output_tokens: int) -> None:
        self.task = task
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.queued = sim.now
        #: Succeeds when the batch holding this request is served.
        self.done: Event[None] = sim.event()

    def __trace__(self) -> object:
        return {"task": self.task.index, "prompt": self.prompt_tokens,
                "output": self.output_tokens}


class Workflow:
    """The model's state on one Sim: queues, servers, tasks and counters."""

    def __init__(self, sim: Sim, params: Params) -> None:
        self.sim = sim
        self.params = params
        #: Inference requests waiting for a server, oldest first.
        self.requests: Store[InferenceRequest] = Store(sim)
        #: Admission: at most `concurrency` tasks run at once.
        self.slots = Resource(sim, capacity=params.concurrency)
        self.tasks: list[Task] = []
        self.batches = 0
        self.batched_requests = 0
        self.busy_time = 0.0
        self.tool_failures = 0
        self.planner_calls = 0
        self.started = sim.now

    def tokens(self, rng: random.Random, mean: float) -> int:
        """A lognormal token count with this mean (and the model's shape), at least 1."""
        sigma = self.params.token_sigma
        return max(1, round(rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)))

    def kpis(self) -> dict[str, float | int]:
        """The KPIs so far (see the module docstring)."""
        params = self.params
        now = self.sim.now
        finished = [task for task in self.tasks if task.outcome is not None]
        latencies = sorted(task.finished - task.arrived for task in finished
                           if task.outcome == "completed" and task.finished is not None)
        queue = self.requests.statistics()
        tokens = sum(task.tokens for task in finished)
        calls = sum(task.tool_calls for task in finished)
        cost = tokens * params.price_per_1k_tokens / 1000 + calls * params.tool_call_price
        span = now - self.started
        count = len(finished)
        return {
            "tasks": len(self.tasks),
            "completed": len(latencies),
            "failed": sum(task.outcome == "failed" for task in finished),
            "mean_latency": math.fsum(latencies) / len(latencies) if latencies else 0.0,
            "p95_latency": _percentile(latencies, 0.95),
            "mean_queue_depth": queue.mean_level,
            "max_queue_depth": int(queue.max_level),
            "mean_batch_size": self.batched_requests / self.batches if self.batches else 0.0,
            "server_utilisation": (self.busy_time / (span * params.servers)
                                   if span > 0 else 0.0),
            "cost_per_task": cost / count if count else 0.0,
            "serving_cost_per_task": (span / 3600 * params.servers * params.server_price_per_hour
                                      / count if count else 0.0),
            "tokens_per_task": tokens / count if count else 0.0,
            "tool_calls_per_task": calls / count if count else 0.0,
            "tool_failures": self.tool_failures,
            "planner_calls": self.planner_calls,
        }


def _percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank *q* quantile of an ascending list (0.0 if empty)."""
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# --------------------------------------------------------------------------- processes


def server_process(sim: Sim, flow: Workflow) -> ProcessGenerator[None]:
    """One LLM server: take a batch of queued requests, serve it, repeat."""
    params = flow.params
    queue = flow.requests
    while True:
        first: InferenceRequest = yield queue.get()
        batch = [first]
        while len(batch) < params.batch_size and queue.items:
            batch.append((yield queue.get()))
        longest = max(request.output_tokens for request in batch)
        duration = params.prefill + params.decode_per_token * longest
        flow.batches += 1
        flow.batched_requests += len(batch)
        yield sim.delay(duration)
        flow.busy_time += duration
        for request in batch:
            request.done.succeed()


def agent_process(sim: Sim, flow: Workflow, task: Task) -> ProcessGenerator[None]:
    """One task: think (LLM), plan (offloaded), act (tool with retries), until the answer."""
    params = flow.params
    rng = sim.rng(f"task/{task.index}")
    who = f"task-{task.index}"
    steps = rng.randint(params.min_steps, params.max_steps)
    context = flow.tokens(rng, params.prompt_tokens)
    for step in range(steps):
        # Think: one inference request with the whole context as its prompt.
        output = min(params.max_output_tokens, flow.tokens(rng, params.output_tokens))
        request = InferenceRequest(sim, task, context, output)
        yield flow.requests.put(request)
        yield request.done
        task.steps += 1
        task.tokens += context + output
        context += output
        if step == steps - 1:
            break  # the last think step writes the answer
        # Plan: rank candidate plans on the worker pool, at a deterministic slot.
        plans: tuple[Plan, ...] = tuple(
            (rng.randrange(len(TOOLS)), rng.random(), rng.random())
            for _ in range(params.candidates)
        )
        flow.planner_calls += 1
        best: int = yield offload(sim, score_plans, plans, params.planner_work,
                                  delay=params.planner_delay)
        tool = TOOLS[plans[best][0]]
        sim.record("plan", who, {"step": step, "tool": tool.name})
        # Act: call the tool, retrying failures with exponential backoff.
        failure = min(0.95, params.tool_failure * tool.failure)
        for attempt in range(params.max_retries + 1):
            task.tool_calls += 1
            yield sim.delay(rng.expovariate(1.0 / (params.tool_latency * tool.latency)))
            if rng.random() >= failure:
                break
            flow.tool_failures += 1
            if attempt < params.max_retries:
                yield sim.delay(params.retry_backoff * 2**attempt)
        else:
            task.outcome = "failed"
            task.finished = sim.now
            sim.record("failed", who, {"step": step, "tool": tool.name})
            return
        context += params.tool_result_tokens
    task.outcome = "completed"
    task.finished = sim.now
    sim.record("completed", who, {"latency": sim.now - task.arrived})


def task_process(sim: Sim, flow: Workflow, task: Task) -> ProcessGenerator[None]:
    """Admission: wait for a concurrency slot, then run the agent in it."""
    with flow.slots.request() as slot:
        yield slot
        yield from agent_process(sim, flow, task)


def orchestrator_process(sim: Sim, flow: Workflow) -> ProcessGenerator[None]:
    """Poisson task arrivals until the horizon."""
    params = flow.params
    rng = sim.rng("arrivals")
    while True:
        gap = rng.expovariate(params.arrival_rate)
        if sim.now + gap >= params.horizon:
            return
        yield sim.delay(gap)
        task = Task(len(flow.tasks), sim.now)
        flow.tasks.append(task)
        sim.spawn(task_process, flow, task)


# --------------------------------------------------------------------------- entry points


def build(sim: Sim, **params: Any) -> Workflow:
    """Set the model up on *sim* and return its state; run it with ``sim.run()``.

    The planner offloads to the pool bound to *sim* with
    :func:`simulacra.use_pool` (inline if none).

    Args:
        sim: The simulation to build on; its seed drives every random draw.
        **params: Fields of :class:`Params`; the rest keep their defaults.

    Raises:
        ConfigError: an unknown or invalid parameter.
    """
    known = {field.name for field in dataclasses.fields(Params)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ConfigError(
            f"llm_workflow: unknown parameter {unknown[0]!r}; expected one of {sorted(known)}"
        )
    flow = Workflow(sim, Params(**params))
    for index in range(flow.params.servers):
        sim.spawn(server_process, flow, name=f"server-{index}")
    sim.spawn(orchestrator_process, flow, name="orchestrator")
    return flow


def run(seed: int = 7, *, backend: str = "inline", workers: int | None = None,
        **params: Any) -> dict[str, float | int]:
    """Run the model once, until every task has finished, and return its KPIs.

    Args:
        seed: The master seed.
        backend: Where the planner's scoring runs: ``"inline"``, ``"threads"``
            or ``"processes"``. It changes the wall-clock time, never the KPIs.
        workers: Workers of a threads or processes pool (default: one per CPU).
        **params: Fields of :class:`Params`.

    Raises:
        ConfigError: a parameter is invalid (the message names it).
    """
    sim = Sim(seed=seed)
    flow = build(sim, **params)
    with Offloader(backend, workers) as pool:
        use_pool(sim, pool)
        sim.run()
    kpis = flow.kpis()
    return {name: kpis[name] for name in KPIS}
