"""A walk-in clinic whose patients are LLM agents: one clock for the queue and the models.

Patients arrive at random and queue for a ``Resource`` of doctors. While they
wait, every ``check_every`` minutes each one looks around -- its place in the
queue, how long it has waited, what the nurse announced and what the others
in the waiting room said -- and asks its language model whether to stay or
leave, and what to say. A patient who leaves withdraws its request (reneging,
SimPy's ``req | sim.delay(patience)`` pattern); what it says goes on the
waiting room's board for the others to read. The nurse is a plain SimPy-style
process that announces the delay every half hour.

Every patient is a process of one keyed :class:`simulacra.Sim`, run by
:class:`simulacra.societies.LLMRuntime`: model calls are kernel events that
take simulated time, so the trace -- arrivals, requests, model calls, what
was said, who left -- is the same in every mode (sequential, threads,
asyncio) and at every concurrency.

The default model is scripted (no server): :func:`clinic_rule` answers the
clinic's prompt from what it shows (the longer the wait and the queue ahead,
the likelier a patient leaves). Any OpenAI-compatible server answers the
same prompt, which asks for JSON that follows :data:`SCHEMA`.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from simulacra import ConfigError, Resource, Sim
from simulacra.llm import (
    Completion,
    CompletionRequest,
    LanguageModel,
    LatencyModel,
    ScriptedModel,
    ScriptedRule,
    default_rules,
)
from simulacra.societies import LLMContext, LLMRuntime
from simulacra.trace import digest

__all__ = ["SCHEMA", "SYSTEM", "Clinic", "Params", "clinic_rule", "run", "scripted_model"]

SYSTEM = ("You are a patient in the waiting room of a walk-in clinic. Decide, as that patient "
          "would, whether to keep waiting or leave, and say one short sentence to the room. "
          "Answer with the JSON object asked for, nothing else.")
#: What the model must answer.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"decision": {"type": "string", "enum": ["stay", "leave"]},
                   "say": {"type": "string"}},
    "required": ["decision", "say"],
}
_SCHEMA_JSON = json.dumps(SCHEMA, sort_keys=True, separators=(",", ":"))
#: The clinic's clock counts minutes, and LatencyModel's numbers are in the Sim's
#: unit: a reply takes 2-10 s of a patient's time (0.03-0.17 min), never under 1 s.
LATENCY = LatencyModel(base=0.5 / 60, prefill_per_token=0.002 / 60,
                       decode_per_token=0.03 / 60, noise_sigma=0.2, min_duration=1.0 / 60)
_MARKER = "CLINIC WAITING ROOM"


@dataclass(frozen=True)
class Params:
    """The clinic's parameters (minutes).

    Attributes:
        patients: Patients who arrive (then the doors close).
        doctors: Doctors seeing patients at once.
        arrival_mean: Mean time between arrivals.
        consult_mean: Mean consultation (exponential).
        check_every: A waiting patient reconsiders this often.
        announce_every: The nurse announces the delay this often.
        seed: The master seed.
        model: The model name sent with each request.
    """

    patients: int = 40
    doctors: int = 2
    arrival_mean: float = 4.0
    consult_mean: float = 10.0
    check_every: float = 5.0
    announce_every: float = 30.0
    seed: int = 0
    model: str = "scripted"

    def __post_init__(self) -> None:
        for name in ("patients", "doctors", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or (
                    value < (0 if name == "seed" else 1)):
                raise ConfigError(f"{name} must be an int >= {0 if name == 'seed' else 1}, "
                                  f"got {value!r}")
        for name in ("arrival_mean", "consult_mean", "check_every", "announce_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{name} must be a number > 0 (minutes), got {value!r}")


@dataclass
class Clinic:
    """The shared world: the doctors, the board of remarks, the tallies."""

    sim: Sim
    params: Params
    doctors: Resource
    board: list[tuple[float, str, str]] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    reneged: list[str] = field(default_factory=list)
    announcement: str = "The doctors are seeing patients in order of arrival."

    def say(self, who: str, text: str) -> None:
        """Put *text* on the board (what the others will read), in the trace too."""
        self.board.append((self.sim.now, who, text))
        self.sim.record("said", who, text)

    def prompt(self, agent: str, waited: float, ahead: int) -> CompletionRequest:
        """What *agent* sees when it reconsiders: its wait, the queue, the room."""
        others = [f"- {who}: {text}" for _, who, text in self.board[-4:] if who != agent]
        lines = [
            _MARKER,
            f"You are {agent}. You have waited {waited:.0f} minutes.",
            f"Patients ahead of you: {ahead}. Doctors on duty: {self.params.doctors}.",
            f"Nurse: {self.announcement}",
            "Others in the room said:",
            *(others or ["- (nobody has said anything)"]),
            'Reply with JSON: {"decision": "stay"|"leave", "say": str}',
        ]
        return CompletionRequest.chat("\n".join(lines), system=SYSTEM, model=self.params.model,
                                      temperature=0.7, max_tokens=60,
                                      response_schema_json=_SCHEMA_JSON)


def parse_decision(completion: Completion) -> tuple[str, str]:
    """``(decision, say)`` from a reply; anything unreadable is ``("stay", "")``."""
    text = completion.text.strip()
    start, end = text.find("{"), text.rfind("}")
    try:
        data = json.loads(text[start:end + 1]) if start >= 0 < end else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return "stay", ""
    decision = data.get("decision")
    say = data.get("say")
    return ("leave" if decision == "leave" else "stay",
            say.strip()[:200] if isinstance(say, str) else "")


def patient(sim: Sim, ctx: LLMContext, clinic: Clinic, index: int) -> Any:
    """One patient: queue, reconsider every ``check_every`` minutes, leave or be seen."""
    arrived = sim.now
    params = clinic.params
    with clinic.doctors.request() as req:
        while True:
            got = yield req | sim.delay(params.check_every)
            if req in got:
                break
            ahead = list(clinic.doctors.queue).index(req) if req in clinic.doctors.queue else 0
            reply = yield ctx.complete(clinic.prompt(ctx.agent, sim.now - arrived, ahead))
            if req.triggered:  # called in while the model was thinking
                yield req
                break
            decision, say = parse_decision(reply)
            if say:
                clinic.say(ctx.agent, say)
            if decision == "leave":
                req.cancel()
                clinic.reneged.append(ctx.agent)
                ctx.record("reneged", round(sim.now - arrived, 6))
                return
        clinic.waits.append(sim.now - arrived)
        ctx.record("seen", round(sim.now - arrived, 6))
        yield sim.delay(sim.rng(f"consult/{index}").expovariate(1.0 / params.consult_mean))


def arrivals(sim: Sim, clinic: Clinic, llm: LLMRuntime) -> Any:
    """The door: patients arrive at exponential intervals (a plain SimPy-style process)."""
    draw = sim.rng("arrivals")
    for index in range(clinic.params.patients):
        yield sim.delay(draw.expovariate(1.0 / clinic.params.arrival_mean))
        llm.spawn(patient, clinic, index, agent=f"patient{index:03d}")


def nurse(sim: Sim, clinic: Clinic) -> Any:
    """The nurse announces the expected delay (a plain SimPy-style process, no model)."""
    params = clinic.params
    while True:
        yield sim.delay(params.announce_every)
        waiting = len(clinic.doctors.queue)
        minutes = waiting * params.consult_mean / params.doctors
        clinic.announcement = (f"About {minutes:.0f} minutes of wait for the last in line "
                               f"({waiting} waiting).")
        sim.record("announce", "nurse", clinic.announcement)
        if len(clinic.waits) + len(clinic.reneged) >= params.patients:
            return


def clinic_rule() -> ScriptedRule:
    """The scripted model's answer to the clinic prompt, from what the prompt shows.

    The chance to leave grows with the wait, the queue ahead and the others'
    leaving; what the patient says follows its decision. A pure function of
    the prompt and the seeded stream, like every scripted reply.
    """
    waited_re = re.compile(r"waited (\d+) minutes")
    ahead_re = re.compile(r"ahead of you: (\d+)")

    def responder(request: CompletionRequest, rng: random.Random) -> str:
        prompt = request.prompt
        waited = int(m.group(1)) if (m := waited_re.search(prompt)) else 0
        ahead = int(m.group(1)) if (m := ahead_re.search(prompt)) else 0
        gloom = prompt.count("leaving") + prompt.count("give up")
        chance = min(0.9, 0.02 * ahead + 0.004 * waited + 0.08 * gloom)
        if rng.random() < chance:
            say = rng.choice(["I can't wait any longer, I'm leaving.",
                              "This is taking forever. I give up.",
                              (f"{ahead} people still ahead of me? I'm leaving." if ahead
                               else "Next in line and still waiting? I'm leaving."),
                              "I'll come back tomorrow, I'm leaving."])
            decision = "leave"
        else:
            say = rng.choice(["I'll wait, it can't be much longer.",
                              "Still here. Anyone know how long it takes?",
                              "The nurse says it's moving. I'll stay.",
                              f"Only {ahead} ahead of me now.", ""])
            decision = "stay"
        return json.dumps({"decision": decision, "say": say})

    return ScriptedRule("clinic", lambda request: _MARKER in request.prompt, responder)


def scripted_model(seed: int = 0) -> ScriptedModel:
    """The scripted model that understands the clinic (and everything the defaults do)."""
    return ScriptedModel(seed=seed, rules=[clinic_rule(), *default_rules()])


def run(params: Params | None = None, *, model: LanguageModel | None = None,
        mode: str = "sequential", concurrency: int = 16) -> dict[str, Any]:
    """Run the clinic; return its KPIs and the trace digest.

    Args:
        params: The clinic (default :class:`Params`).
        model: The language model (default :func:`scripted_model` of the seed).
        mode: Where model calls run: sequential, threads or asyncio.
        concurrency: Model calls in flight at once (threads, asyncio).
    """
    params = params if params is not None else Params()
    sim = Sim(seed=params.seed, ordering="keyed", trace=True)
    clinic = Clinic(sim, params, Resource(sim, capacity=params.doctors))
    with LLMRuntime(sim, model if model is not None else scripted_model(params.seed),
                    latency=LATENCY, mode=mode, concurrency=concurrency) as llm:
        sim.spawn(arrivals, clinic, llm, name="door")
        sim.spawn(nurse, clinic, name="nurse")
        sim.run()
    records = sim.trace_records
    assert records is not None
    served = len(clinic.waits)
    return {
        **{f.name: getattr(params, f.name) for f in fields(params) if f.name != "model"},
        "served": served,
        "reneged": len(clinic.reneged),
        "mean_wait": sum(clinic.waits) / served if served else 0.0,
        "remarks": len(clinic.board),
        "model_calls": llm.calls,
        "closed_at": sim.now,
        "records": len(records),
        "digest": digest(records),
        "board": clinic.board[-3:],
    }


def params_from(**overrides: Any) -> Params:
    """:class:`Params` with *overrides* (an unknown name is a ConfigError naming it)."""
    known = {f.name for f in fields(Params)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown clinic parameter {unknown[0]!r}; expected one of "
                          f"{', '.join(sorted(known))}")
    return Params(**{**asdict(Params()), **overrides})


def study(seed: int, patients: int = 40, doctors: int = 2, mode: str = "sequential",
          concurrency: int = 8) -> dict[str, Any]:
    """One replication for :class:`simulacra.Experiment` (the ``run`` convention).

    ``Experiment.from_run("examples/clinic/model.py:study", config_grid(doctors=[2, 3]),
    master_seed=1)`` runs the clinic per config and replication, on any backend,
    with the same KPIs: the replication's seed drives the arrivals, the
    consultations and the scripted patients alike.
    """
    result = run(params_from(patients=patients, doctors=doctors, seed=seed), mode=mode,
                 concurrency=concurrency)
    return {"served": result["served"], "reneged": result["reneged"],
            "mean_wait": result["mean_wait"], "model_calls": result["model_calls"],
            "digest": result["digest"]}
