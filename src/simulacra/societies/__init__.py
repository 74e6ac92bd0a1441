"""Societies: how a society of LLM agents advances, and everything its runs write (layer 5).

LLM agents as processes of a keyed kernel ``Sim`` (:class:`LLMRuntime`: an
agent yields model calls, resource requests, timeouts and conditions on one
clock). Two society engines: the round-based :class:`RoundEngine` (observe/act agents and a
world, flow batches, deterministic resolution) and the event-driven
:class:`EventEngine` (a virtual clock, wake-ups, simulated model latency).
Around them: run configs (:func:`load_config`), :func:`run_society`,
:func:`resume_society` and :func:`replay_run`, run directories
(:class:`RunDirectory`, ``manifest.json``), checkpoints, the provider's
preflight and guard, budgets and the stop control (:class:`RunControl`), and
scenarios on runs (a world's ``change()``, :class:`Interview`).
See ``docs/social.md`` and ``docs/events.md``.

Imports: the standard library, layers 0-4 through their public surfaces, and
pydantic and PyYAML (lazily, when configs are read).
"""

from simulacra._util import claim_public_module

from ._config import DEFAULTS as DEFAULTS
from ._config import RunConfig as RunConfig
from ._config import apply_overrides as apply_overrides
from ._config import load_config as load_config
from ._config import parse_config as parse_config
from ._endpoints import preflight_run as preflight_provider
from ._events import EVENT_MODES as EVENT_MODES
from ._events import EVENTS_SCHEME as EVENTS_SCHEME
from ._events import EventEngine as EventEngine
from ._events import EventResult as EventResult
from ._events import WindowReport as WindowReport
from ._events_blocking import BlockingAgent as BlockingAgent
from ._events_blocking import BlockingContext as BlockingContext
from ._kernel_agents import KERNEL_AGENT_MODES as KERNEL_AGENT_MODES
from ._kernel_agents import LLMContext as LLMContext
from ._kernel_agents import LLMRuntime as LLMRuntime
from ._provider import ProviderGuard as ProviderGuard
from ._provider import check_server as check_server
from ._rounds import MODES as MODES
from ._rounds import RESOLUTIONS as RESOLUTIONS
from ._rounds import ROUNDS_SCHEME as ROUNDS_SCHEME
from ._rounds import RoundEngine as RoundEngine
from ._rounds import RoundResult as RoundResult
from ._rounds import StepReport as StepReport
from ._run import RESUMABLE as RESUMABLE
from ._run import ReplayReport as ReplayReport
from ._run import RunControl as RunControl
from ._run import SocietyRun as SocietyRun
from ._run import StepEngine as StepEngine
from ._run import build_model as build_model
from ._run import build_society as build_society
from ._run import load_factory as load_factory
from ._run import register_step_engine as register_step_engine
from ._run import replay_run as replay_run
from ._run import resume_society as resume_society
from ._run import run_society as run_society
from ._run import step_engine_names as step_engine_names
from ._rundir import RUN_FILES as RUN_FILES
from ._rundir import RunDirectory as RunDirectory
from ._rundir import default_run_dir as default_run_dir
from ._scenario import SCENARIO_FILE as SCENARIO_FILE
from ._scenario import Interview as Interview

__all__ = [
    "EventEngine", "EventResult", "WindowReport", "EVENT_MODES", "EVENTS_SCHEME",
    "BlockingAgent", "BlockingContext", "LLMRuntime", "LLMContext", "KERNEL_AGENT_MODES",
    "RoundEngine", "RoundResult", "StepReport", "MODES",
    "RESOLUTIONS", "ROUNDS_SCHEME", "RunConfig", "load_config", "parse_config",
    "apply_overrides", "DEFAULTS", "run_society", "resume_society", "replay_run",
    "preflight_provider", "check_server", "RESUMABLE",
    "ProviderGuard", "SocietyRun", "ReplayReport", "RunControl",
    "build_model", "build_society", "load_factory", "register_step_engine", "step_engine_names",
    "StepEngine", "RunDirectory", "RUN_FILES", "default_run_dir", "Interview", "SCENARIO_FILE",
]

claim_public_module(__name__, globals())
del claim_public_module
