"""Every exception simulacra raises on purpose.

This is a leaf module: it imports nothing from simulacra, so every layer may
import it. Each leaf also subclasses the builtin it behaves like, so code that
catches ``ValueError`` or ``RuntimeError`` keeps working::

    SimError
    ├── ScheduleError
    │   ├── EmptySchedule          no events left (also RuntimeError, as in SimPy)
    │   ├── InvalidDelay           a negative, NaN or non-numeric delay (also ValueError)
    │   └── UntilInPast            run(until=t) with t <= now (also ValueError)
    ├── EventError
    │   ├── AlreadyTriggered       succeed()/fail() on a triggered event (also RuntimeError)
    │   ├── EventNotReady          .value/.ok of a pending event (also AttributeError)
    │   ├── NotAnEvent             a process yielded something else (also TypeError)
    │   └── ForeignEvent           an event of another Sim (also ValueError)
    ├── ProcessError
    │   ├── DeadProcess            interrupting a finished process (also RuntimeError)
    │   └── SelfInterrupt          a process interrupting itself (also RuntimeError)
    ├── ResourceError
    │   ├── CapacityExceeded       more than a container can ever hold (also ValueError)
    │   └── ForeignRequest         releasing another resource's request (also ValueError)
    ├── ConfigError                a bad argument or setting (also ValueError)
    │   ├── ScenarioError          a scenario or intervention that does not fit its model
    │   └── UnknownEndpoint        a call routed to an undeclared model endpoint
    ├── ThreadOwnershipError       a Sim driven from a second thread (also RuntimeError)
    ├── DeterminismError           two runs that must match did not
    ├── TraceError                 an unreadable or malformed trace (also ValueError)
    ├── BackendError               running units of work on a backend (executors)
    │   ├── BackendUnavailable     a backend this Python cannot provide (also RuntimeError)
    │   ├── WorkerLost             a unit's worker died too often (also RuntimeError)
    │   ├── RemoteError            a worker's exception that could not travel as itself
    │   └── PoolError              a WorkerPool closed, or lent to another run (also RuntimeError)
    │       ├── PoolClosed         a WorkerPool used after close()
    │       └── PoolBusy           a WorkerPool asked for by a second run while one holds it
    ├── ExperimentError            a study of replications could not complete
    │   ├── ReplicationFailed      the model raised for one replication (also RuntimeError)
    │   └── SpoolError             another study's directory, or a damaged one (also ValueError)
    ├── OffloadError               an offloaded payload could not run or lost its worker
    │   └── OffloadTimeout         an offloaded payload hung past the pool's timeout
    ├── PartitionError             a sharded model or its partition is invalid (also ValueError)
    │   ├── UnknownEntity          a message or channel names an entity the model lacks
    │   ├── LookaheadViolation     a send with a delay below its channel's lookahead
    │   ├── PayloadNotData         a message payload that does not pickle (also TypeError)
    │   └── ShardTypeError         a partition maps an entity to a non-int shard (also TypeError)
    ├── ShardError                 a shard failed outside the model (also RuntimeError)
    │   └── ShardCrashed           a shard's worker died or stopped answering
    ├── AgentError                 an agent model is misused, or one of its agents failed
    │   ├── AgentActionError       an agent's action raised: agent, phase, step (also RuntimeError)
    │   ├── UnknownRecipient       a message to an agent the model lacks (also LookupError)
    │   ├── ContextClosed          a Context used after its action returned (also RuntimeError)
    │   ├── UncopyableState        state or a payload that will not copy or pickle (also TypeError)
    │   └── InvalidAction          an agent's action cannot be read or resolved (also ValueError)
    ├── LLMError                   a language-model call or recording went wrong
    │   ├── ProviderError          a provider failed or did not answer (also RuntimeError)
    │   │   ├── RateLimited        HTTP 429 on every attempt
    │   │   ├── ProviderTimeout    every attempt timed out (also TimeoutError)
    │   │   └── ProviderUnavailable  the provider cannot serve the run: the run stops
    │   ├── ReplayMiss             strict replay: no recording for a call site (also LookupError)
    │   └── RecordingError         a recording store that cannot be used (also ValueError)
    │       └── RecordingDamaged   a stored text that does not read back: the file was damaged
    ├── AgentStateError            AgentError: a pausable agent driven against its status
    ├── ChannelClosed              AgentError: a closed Channel sent to, or drained
    ├── AgentTimeout               AgentError: an async wait timed out (also TimeoutError)
    ├── CheckpointError            a checkpoint that cannot be read or resumed (also ValueError)
    ├── RunStopped                 a society run stopped at a safe point: a signal or a budget
    └── Interrupt                  thrown into a process by Process.interrupt()
    KernelBug                      an invariant inside simulacra broke; please report it

    OversubscribedWarning          (a UserWarning) more worker processes than CPUs
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlreadyTriggered",
    "CapacityExceeded",
    "ConfigError",
    "ScenarioError",
    "UnknownEndpoint",
    "DeadProcess",
    "DeterminismError",
    "EmptySchedule",
    "EventError",
    "EventNotReady",
    "ForeignEvent",
    "ForeignRequest",
    "Interrupt",
    "InvalidDelay",
    "KernelBug",
    "NotAnEvent",
    "ProcessError",
    "ResourceError",
    "ScheduleError",
    "SelfInterrupt",
    "SimError",
    "ThreadOwnershipError",
    "TraceError",
    "UntilInPast",
    # executors and parallel replications
    "BackendError",
    "BackendUnavailable",
    "WorkerLost",
    "RemoteError",
    "PoolError",
    "PoolClosed",
    "PoolBusy",
    "OversubscribedWarning",
    "ExperimentError",
    "ReplicationFailed",
    "SpoolError",
    # in-run offload
    "OffloadError",
    "OffloadTimeout",
    # PDES
    "PartitionError",
    "UnknownEntity",
    "LookaheadViolation",
    "PayloadNotData",
    "ShardTypeError",
    "ShardError",
    "ShardCrashed",
    # agents and engines
    "AgentError",
    "AgentActionError",
    "UnknownRecipient",
    "ContextClosed",
    "UncopyableState",
    # pausable agents
    "AgentStateError",
    "ChannelClosed",
    "AgentTimeout",
    "CheckpointError",
    # language models
    "LLMError",
    "ProviderError",
    "ProviderUnavailable",
    "RunStopped",
    "RateLimited",
    "ProviderTimeout",
    "ReplayMiss",
    "RecordingDamaged",
    "RecordingError",
]


class SimError(Exception):
    """Base class for every error simulacra raises deliberately."""


class ScheduleError(SimError):
    """Something is wrong with when an event was asked to happen."""


class EmptySchedule(ScheduleError, RuntimeError):
    """No events are left.

    Raised by ``step()`` on an empty schedule, and by ``run(until=event)`` when
    the events ran out before *event* was triggered.
    """


class InvalidDelay(ScheduleError, ValueError):
    """A delay was negative, NaN or not a number."""


class UntilInPast(ScheduleError, ValueError):
    """``run(until=t)`` was given a time that is not after ``now``."""


class EventError(SimError):
    """An event was used in a way its state does not allow."""


class AlreadyTriggered(EventError, RuntimeError):
    """``succeed()`` or ``fail()`` on an event that was already triggered."""


class EventNotReady(EventError, AttributeError):
    """The value or outcome of an event that has not been triggered yet was read."""


class NotAnEvent(EventError, TypeError):
    """A process yielded (or awaited) something that is not an event."""


class ForeignEvent(EventError, ValueError):
    """An event that belongs to another ``Sim`` was yielded or combined."""


class ProcessError(SimError):
    """A process was used in a way its state does not allow."""


class DeadProcess(ProcessError, RuntimeError):
    """A process that has already finished was interrupted."""


class SelfInterrupt(ProcessError, RuntimeError):
    """A process tried to interrupt itself."""


class ResourceError(SimError):
    """A resource, container or store was misused."""


class CapacityExceeded(ResourceError, ValueError):
    """A put can never fit: it asks for more than the capacity."""


class ForeignRequest(ResourceError, ValueError):
    """A request was released on a resource it does not belong to."""


class ConfigError(SimError, ValueError):
    """A bad argument or setting: the message names the field, value and expectation."""


class ScenarioError(ConfigError):
    """A scenario, intervention or knob that does not fit its model, or a damaged artifact.

    The message names the scenario, the intervention (by index) and the knob.
    """


class UnknownEndpoint(ConfigError, LookupError):
    """A call could not be routed (an undeclared endpoint, or the routing function raised).

    It stops the run: the routing is the config's mistake, no turn's.
    """


class ThreadOwnershipError(SimError, RuntimeError):
    """A ``Sim`` was driven from a thread other than the one running it."""


class DeterminismError(SimError):
    """Two runs that must give the same trace did not."""


class TraceError(SimError, ValueError):
    """A trace file or record could not be read or is malformed."""


# -- executors (layer 1) and parallel replications (layer 4) -----------------


class BackendError(SimError):
    """Running units of work on a backend (threads, processes, Dask...) went wrong."""


class BackendUnavailable(BackendError, RuntimeError):
    """The backend asked for cannot run here: the message says why and what would work.

    For example ``"interpreters"`` on a Python without
    ``concurrent.futures.InterpreterPoolExecutor``, or ``"dask"`` without
    ``dask.distributed`` installed.
    """


class WorkerLost(BackendError, RuntimeError):
    """A unit's worker died (a killed process, a lost Dask worker) more often than allowed.

    Raised once the unit has been retried ``retries`` times. Attributes (``None``
    when not known): :attr:`unit` names the unit (for an ``Experiment``, its
    ``(config_index, replication)``); :attr:`crashes` is how many times a
    worker died while running it.
    """

    unit: object = None
    crashes: int | None = None


class RemoteError(BackendError):
    """Stands in for an exception raised in a worker that could not be pickled back.

    The message holds the original type, message and the worker's traceback.
    """


class PoolError(BackendError, RuntimeError):
    """A ``WorkerPool`` was used in a way its state does not allow."""


class PoolClosed(PoolError):
    """A ``WorkerPool`` was asked for work after ``close()``: make a new one."""


class PoolBusy(PoolError):
    """A ``WorkerPool`` was asked for by a run while another run held it.

    One pool serves one run at a time (an ``Experiment.run``, a
    ``ShardedSim`` until it is closed); the message names the holder.
    """


class OversubscribedWarning(UserWarning):
    """More CPU-bound workers (processes, sub-interpreters) were asked for than there are CPUs.

    They take turns on the CPUs there are, so a study runs no faster and each
    worker costs its start-up and memory. The message gives both counts.
    """


class ExperimentError(SimError):
    """A study of replications (``Experiment``) could not complete."""


class ReplicationFailed(ExperimentError, RuntimeError):
    """The model function raised for one ``(config_index, replication)``.

    The model's own exception is chained as ``__cause__``. It is not retried: an
    exception is a bug in the model, not a crash. Results finished before it are
    kept in the study directory, if there is one. Attributes: :attr:`config_index`,
    :attr:`replication`.
    """

    config_index: int | None = None
    replication: int | None = None


class SpoolError(ExperimentError, ValueError):
    """A study directory cannot be used: it holds another study, or it is damaged."""


# -- in-run offload (layer 4) --------------------------------------------------


class OffloadError(SimError, RuntimeError):
    """An offloaded payload could not run, could not send its result back, or its worker died.

    A payload that raises an exception of its own fails its event with that
    exception, not with this one.
    """


class OffloadTimeout(OffloadError, TimeoutError):
    """An offloaded payload did not finish within its pool's timeout, even when run alone."""


# -- PDES (layer 4) -----------------------------------------------------------


class PartitionError(SimError, ValueError):
    """A sharded model or its partition is invalid.

    For example an entity mapped to a shard that does not exist, an unnamed
    top-level process (whose identity would depend on the partition), or a
    builder that declared different entities on different shards.
    """


class UnknownEntity(PartitionError):
    """A message or a channel names an entity that the model never declared."""


class LookaheadViolation(PartitionError):
    """A message was sent with a delay below its channel's lookahead (its minimum delay)."""


class PayloadNotData(PartitionError, TypeError):
    """A message payload is not data: it does not pickle (a lambda, a lock, a generator).

    Payloads are pickled between shard processes, so every mode (unpartitioned,
    inline, threads) checks them at ``send``, and the model fails the same way
    on one Sim. The message names the sender, the destination and the
    payload's type.
    """


class ShardTypeError(PartitionError, TypeError):
    """A partition maps an entity to something that is not an integer shard index (``'1'``)."""


class ShardError(SimError, RuntimeError):
    """A shard of a ``ShardedSim`` failed outside the model.

    Its worker raised an exception that could not travel back as itself (the
    message holds its type, text and traceback), or the shard died.
    """


class ShardCrashed(ShardError):
    """A shard's worker process died, or did not answer within the timeout."""


class Interrupt(SimError):
    """Thrown into a process by ``Process.interrupt(cause)``.

    The cause is available as :attr:`cause`.
    """

    @property
    def cause(self) -> Any:
        """The *cause* given to ``Process.interrupt()``, or ``None``."""
        return self.args[0] if self.args else None

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.cause!r})"


class KernelBug(Exception):  # deliberately outside SimError
    """An invariant inside simulacra broke. This should never happen: please report it."""


# -- agents (layer 3) and engines (layer 5) ------------------------------------


class AgentError(SimError):
    """An agent model is misused, or one of its agents failed while it ran."""


class AgentActionError(AgentError, RuntimeError):
    """An agent's phase action (or its constructor) raised an exception.

    The agent's own exception is chained as ``__cause__``, also when the agent
    ran in a worker process: the exception then travels back pickled (or as a
    :class:`RemoteError` when it cannot) and its traceback text in the worker
    is kept in :attr:`remote_traceback`. Attributes (``None`` when not known):
    :attr:`agent` (the agent id), :attr:`phase` (the phase name, or
    ``"__init__"`` when building the agent failed), :attr:`step`.
    """

    agent: object = None
    phase: str | None = None
    step: int | None = None
    remote_traceback: str | None = None


class UnknownRecipient(AgentError, LookupError):
    """A message was sent to an agent id that the model does not hold.

    Attributes: :attr:`sender`, :attr:`recipient`, :attr:`step`, :attr:`phase`.
    """

    sender: object = None
    recipient: object = None
    step: int | None = None
    phase: str | None = None


class ContextClosed(AgentError, RuntimeError):
    """A phase ``Context`` was used to send after the action that received it returned."""


class UncopyableState(AgentError, TypeError):
    """Agent state, an initial state argument or a message payload cannot be copied or pickled.

    Agent state is deep-copied for every snapshot, initial state when it is
    added to a model, and a mutable payload when it is sent; whatever leaves a
    worker process (state, payloads, initial state) is pickled as well. A lock,
    an open file or an instance of a class defined inside a function fails
    there. The message names the agent and its class, the attribute, argument
    or message, the phase and the step, and what would work; the exception of
    the copy or pickle is chained as ``__cause__``. Attributes (``None`` when
    not known or not applicable): :attr:`agent` (the id of the agent whose
    state it is, or of the sender), :attr:`attribute` (the state attribute or
    initial state argument), :attr:`recipient` and :attr:`topic` (of a
    message), :attr:`phase`, :attr:`step`.
    """

    agent: object = None
    attribute: str | None = None
    recipient: object = None
    topic: str | None = None
    phase: str | None = None
    step: int | None = None


# -- language models (layer 1) -------------------------------------------------


class LLMError(SimError):
    """A language-model call, or a recording of one, went wrong."""


class ProviderError(LLMError, RuntimeError):
    """A provider answered with an error, a malformed reply, or not at all.

    The message names the URL, the HTTP status (if any) and the number of
    attempts. Attributes (``None`` when not known): :attr:`url`,
    :attr:`status`, :attr:`attempts`.
    """

    url: str | None = None
    status: int | None = None
    attempts: int | None = None


class RateLimited(ProviderError):
    """The provider answered HTTP 429 (too many requests) to every attempt."""


class ProviderTimeout(ProviderError, TimeoutError):
    """Every attempt of a call ran past the provider's timeout."""


class ProviderUnavailable(ProviderError):
    """The provider cannot serve this run at all, so the run stops instead of failing turns.

    Raised by the preflight before step 0 (its package is not installed, the
    server does not answer, refuses the credentials or does not serve the
    model) and during a run when a call's error means every call would fail
    (connection refused, HTTP 401, 403 or 404) or when
    ``run.max_consecutive_provider_failures`` calls in a row failed.
    """


class ReplayMiss(LLMError, LookupError):
    """A strict replay found no recording for a call.

    The message names the call site (agent and that agent's n-th call) and the
    request key, and says whether the store holds the same request under other
    call sites or the same call site under another request (the prompt
    changed). Attributes: :attr:`site` (``"agent/n"`` or ``None``),
    :attr:`request_key`.
    """

    site: str | None = None
    request_key: str | None = None


class RecordingError(LLMError, ValueError):
    """A recording store cannot be used: unreadable, damaged or of another format version."""


class RecordingDamaged(RecordingError):
    """A completion, request or message of a recording store does not read back as written.

    The file was changed or damaged after it was written (its rows no longer
    inflate, parse or hash to their keys). The command line treats it as bad
    input (exit 2), wherever in a replay or resume it is found.
    """


class InvalidAction(AgentError, ValueError):
    """An agent's action could not be read (bad JSON, unknown kind) or resolved by its world.

    In a round or event-driven run this fails one turn, which is recorded as a
    ``turn_failed`` event, unless the run is configured to stop on failures.
    Attributes (``None`` when not known): :attr:`agent`, :attr:`step`.
    """

    agent: object = None
    step: int | None = None


# -- pausable agents (layer 5) ---------------------------------------------------


class AgentStateError(AgentError, RuntimeError):
    """A pausable agent was driven in a way its status does not allow.

    For example resuming an agent that is not paused, starting one twice,
    calling ``ctx.pause()`` from outside the agent, or driving a host from a
    thread that does not own it. The message names the agent and its status.
    """


class ChannelClosed(AgentError, RuntimeError):
    """A ``Channel`` was sent to after ``close()``, or received from once closed and drained."""


class AgentTimeout(AgentError, TimeoutError):
    """A blocking call of an async agent, a ``Channel`` or an ``AgentLock`` timed out."""


# -- checkpoints (layer 5) ---------------------------------------------------------


class RunStopped(SimError):
    """A run stopped early at a safe point (the end of a step), with a checkpoint to resume.

    Raised by ``run_society`` when it was asked to stop (SIGINT, SIGTERM) or
    when the next step would exceed ``run.budget``. The message says what was
    spent and how to continue; :attr:`reason` is ``"signal"`` or ``"budget"``,
    :attr:`step` the steps done, :attr:`run_dir` the run directory.
    """

    reason: str = "signal"
    step: int = 0
    run_dir: str | None = None


class CheckpointError(SimError, ValueError):
    """A checkpoint could not be written, read or resumed.

    An unknown format version, a truncated or corrupted file (its checksum
    does not match), a checkpoint of another engine or config, or a run
    directory with no checkpoint to resume from. The message names the file
    and what was expected; nothing in the run directory is changed.
    """
