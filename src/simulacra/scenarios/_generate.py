"""Scenarios from documents, at design time: ask a language model, keep what checks out.

:func:`generate_scenarios` shows a model the knobs of a target model
(:meth:`Knobs.describe`) and the passages of some documents (with their ids,
see :mod:`simulacra.scenarios`), and asks for one scenario at a time, as JSON.
A reply is accepted only when it is a valid :class:`Scenario`, fits the knobs
(:meth:`Scenario.check`), cites at least one of the passages with a quote
that appears in it verbatim (whitespace aside), and grounds every
intervention's ``value``, ``at`` and ``duration``: words of one of its quotes
that state it (:func:`check_grounding` re-reads them), or an assumption with
its reason. A reply that does not is rejected with the reason, which the
next request tells the model, within a bounded number of tries.

Every call is made at a call site ``scenario-<i>/<try>`` with temperature 0,
a bound on the tokens generated (*max_tokens*) and the reply's JSON schema
(:func:`reply_schema`, sent as the request's ``response_schema_json``: a
server that honours schemas constrains its model to it), so a
:class:`~simulacra.llm.RecordingModel` records the run and a strict
:class:`~simulacra.llm.ReplayModel` over those recordings gives the same
scenarios, byte for byte, with no model call. Each scenario's ``provenance``
says how it was made: the model, the SHA-256 of the prompt, the passages
cited with their SHA-256, and the recording (file name and the calls' sites
and request keys).

:func:`check_artifacts` re-validates a directory of artifacts: schema, hash,
file name, knobs (when given) and citations against the current documents.

The language model works here, at design time, only: a run with a scenario
never calls one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from simulacra.errors import ScenarioError
from simulacra.llm import CallSite, ChatMessage, Completion, CompletionRequest, LanguageModel

from ._documents import Document, Passage, normalize_space, parse_passage_id
from ._grounding import grounds
from ._knobs import Knobs
from ._schema import Scenario, canonical_json, load_scenario

__all__ = ["DEFAULT_MAX_TOKENS", "GENERATOR", "GENERATE_TASK", "check_artifacts",
           "check_grounding", "generate_scenarios", "reply_schema", "scenario_prompt"]

#: The ``provenance.generator`` of every generated scenario; it changes with the prompt.
#: v2 asks for (and accepts only) grounded values, with a bound on tokens and a schema.
GENERATOR: Final = "simulacra.scenarios.generate.v2"

#: The generator of artifacts made before grounding existed (check lets them through
#: with a note unless grounding is required).
GENERATOR_V1: Final = "simulacra.scenarios.generate.v1"

#: The most tokens a reply may take unless told otherwise: a grounded scenario of one
#: intervention takes about 250 tokens, of three with their assumptions about 500; a model
#: that rambles (a base model writes until its context is full) is cut off, not waited for.
DEFAULT_MAX_TOKENS: Final = 1024

#: The first line of every generation prompt (a scripted responder looks for it).
GENERATE_TASK: Final = f"TASK: propose one scenario ({GENERATOR})"

_SYSTEM = (
    "You design fault-injection scenarios for a discrete-event simulation, from the "
    "documents of the system it models: hardware specifications, operating procedures, "
    "failure-mode reports. A scenario changes the model's knobs at virtual times. Every "
    "scenario is grounded: it cites at least one passage of the documents by its id, "
    "with a quote copied from that passage word for word, and every value and time it "
    "sets states where it comes from: the words of a quote that state it, or an "
    "assumption with its reason. Reply with one JSON object and nothing else."
)

_REPLY_FORM = (
    '{"name": "a-lower-case-slug", "description": "what happens and why, in a sentence or two", '
    '"interventions": [{"knob": "<a knob name>", "at": <time>, "value": <a value of the '
    'knob\'s type, within its range>, "duration": <time, or null to keep the value>, '
    '"note": "why, in words", "grounding": {"value": <GROUND>, "at": <GROUND>, '
    '"duration": <GROUND, or null when duration is null>}}], "citations": [{"passage": '
    '"<a passage id, exactly as in brackets>", "quote": "<words copied verbatim from that '
    'passage>"}]}'
)

#: How a value is grounded: the lines after the reply form.
_GROUND_RULES = (
    'GROUND is {"citation": <the index of one of your citations, from 0>, "text": "<words '
    'inside that citation\'s quote that state the number with its unit, e.g. \"15 '
    'patients/h\", \"four hours\", \"02:00\", \"60 %\", \"t=180\", or the on/off word, '
    'e.g. \"down\", \"fails\", \"restored\">"} or, when no quote states it, {"assumption": '
    '"<why you chose it, in words>"}.',
    "A grounded number must be one of its words' numbers, units converted: 60 % is 60 or "
    "0.6; four hours is 4 or 240 (minutes); 02:00 is 120 (minutes) or 2; 15 patients/h is 15 "
    "or 0.25 per minute; a duration may also be the span between two clock times or t= times "
    "of its words. false is grounded by an off word (down, fails, closed, outage), true by "
    "an on word (up, restored, open); a text by words that contain it.",
)

_FIELDS = frozenset({"name", "description", "interventions", "citations"})

#: Sections of the prompt, in order (the scripted responder reads them back).
KNOBS_HEADER: Final = "=== KNOBS (JSON, one per line: set only these, within type and range) ==="
PASSAGES_HEADER: Final = "=== PASSAGES (cite one by the id in brackets) ==="
REPLY_HEADER: Final = "=== REPLY with one JSON object of this form ==="


def scenario_prompt(knobs: Knobs, passages: Sequence[Passage], *, index: int, count: int,
                    taken: Sequence[str] = (), until: float | None = None) -> str:
    """The user message that asks for scenario *index* (from 0) of *count*.

    It holds the knob declarations, the passages with their ids, the names
    already taken, the time span and the form of the reply; it is a pure
    function of its arguments.
    """
    span = (f"virtual time runs from 0 to {until!r} (the model's time units); interventions "
            f"start within it" if until is not None else
            "virtual time starts at 0 (the model's time units); interventions start at 0 or later")
    lines = [
        GENERATE_TASK,
        f"SCENARIO: {index + 1} of {count}",
        f"TIME: {span}",
        f"TAKEN NAMES: {', '.join(taken) if taken else 'none'} (choose a name not taken)",
        KNOBS_HEADER,
        *(canonical_json(item) for item in knobs.describe()),
        PASSAGES_HEADER,
    ]
    for passage in passages:
        lines.extend((f"[{passage.id}]", passage.text, ""))
    lines.extend((REPLY_HEADER, _REPLY_FORM, *_GROUND_RULES))
    return "\n".join(lines)


#: The most interventions and citations the reply schema lets a reply hold (a reply
#: is only held to them by a server that honours the schema).
MAX_INTERVENTIONS: Final = 4
MAX_CITATIONS: Final = 3


def _ground_schema() -> dict[str, Any]:
    return {"anyOf": [
        {"type": "object", "properties": {"citation": {"type": "integer", "minimum": 0},
                                          "text": {"type": "string"}},
         "required": ["citation", "text"], "additionalProperties": False},
        {"type": "object", "properties": {"assumption": {"type": "string"}},
         "required": ["assumption"], "additionalProperties": False},
    ]}


def reply_schema(knobs: Knobs, passages: Sequence[Passage]) -> dict[str, Any]:
    """The JSON schema of a reply (the request's ``response_schema_json``).

    It names the knobs and the passage ids as enums, and requires every field
    of the reply form, a ground for ``value`` and ``at`` and one (or null) for
    ``duration``; it uses only what OpenAI's strict structured outputs
    support. It bounds the lists (at most :data:`MAX_INTERVENTIONS`
    interventions and :data:`MAX_CITATIONS` citations): a small model held
    to a schema otherwise repeats an item until it runs out of tokens. A reply
    that follows it may still be rejected: a value out of range, a quote not
    in its passage, a number its words do not state.
    """
    ground = _ground_schema()
    intervention = {
        "type": "object",
        "properties": {
            "knob": {"type": "string", "enum": list(knobs)},
            "at": {"type": "number", "minimum": 0},
            "value": {"anyOf": [{"type": "number"}, {"type": "boolean"}, {"type": "string"}]},
            "duration": {"anyOf": [{"type": "number", "exclusiveMinimum": 0},
                                   {"type": "null"}]},
            "note": {"type": "string"},
            "grounding": {
                "type": "object",
                "properties": {"value": ground, "at": ground,
                               "duration": {"anyOf": [*ground["anyOf"], {"type": "null"}]}},
                "required": ["value", "at", "duration"],
                "additionalProperties": False,
            },
        },
        "required": ["knob", "at", "value", "duration", "note", "grounding"],
        "additionalProperties": False,
    }
    citation = {
        "type": "object",
        "properties": {"passage": {"type": "string", "enum": [p.id for p in passages]},
                       "quote": {"type": "string", "minLength": 1}},
        "required": ["passage", "quote"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "description": {"type": "string"},
            "interventions": {"type": "array", "items": intervention, "minItems": 1,
                              "maxItems": MAX_INTERVENTIONS},
            "citations": {"type": "array", "items": citation, "minItems": 1,
                          "maxItems": MAX_CITATIONS},
        },
        "required": ["name", "description", "interventions", "citations"],
        "additionalProperties": False,
    }


def _follow_up(reason: str) -> str:
    return (f"REJECTED: {reason}\nReply again with one corrected JSON object of the form "
            "asked for above, and nothing else.")


class _Rejected(Exception):
    """A reply that is not an acceptable scenario; the message is the reason."""


def _reply_json(text: str) -> dict[str, Any]:
    fenced = re.search(r"```(?:json)?\s*\n(.*?)```", text, re.DOTALL)
    body = fenced.group(1) if fenced else text
    first, last = body.find("{"), body.rfind("}")
    if first < 0 or last < first:
        raise _Rejected("the reply holds no JSON object; reply with one JSON object only")
    try:
        data = json.loads(body[first:last + 1])
    except json.JSONDecodeError as exc:
        raise _Rejected(f"the reply is not valid JSON ({exc}); reply with one JSON object "
                        "only") from None
    if not isinstance(data, dict):
        raise _Rejected("the reply must be a JSON object")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise _Rejected(f"unknown field(s) {', '.join(map(repr, unknown))}; a scenario has "
                        "only name, description, interventions and citations")
    items = data.get("interventions")
    if isinstance(items, list):  # the schema's nulls stand for "not given"
        data["interventions"] = [_without_nulls(item) for item in items]
    return data


def _without_nulls(item: object) -> object:
    """An intervention of a reply with its null ``duration`` and null grounds left out."""
    if not isinstance(item, dict):
        return item
    out = {k: v for k, v in item.items() if not (k == "duration" and v is None)}
    grounding = out.get("grounding")
    if isinstance(grounding, dict):
        out["grounding"] = {k: v for k, v in grounding.items() if v is not None}
    return out


@dataclass(frozen=True, slots=True)
class _Call:
    site: CallSite
    request: CompletionRequest
    completion: Completion


def _accept(data: dict[str, Any], *, knobs: Knobs, passages: dict[str, Passage], target: str,
            taken: Sequence[str], until: float | None) -> Scenario:
    try:
        scenario = Scenario(**data, target=target)
        scenario.check(knobs, end=until)
    except ScenarioError as exc:
        raise _Rejected(str(exc)) from None
    if not scenario.citations:
        raise _Rejected(f"scenario {scenario.name!r} cites no passage; cite at least one "
                        "passage by its id, with a quote copied from it")
    for number, citation in enumerate(scenario.citations):
        passage = passages.get(citation.passage)
        if passage is None:
            raise _Rejected(f"citation {number} names passage {citation.passage!r}, which is "
                            "not one of the passages given; copy an id exactly as it appears "
                            "in brackets")
        if not passage.quotes(citation.quote):
            raise _Rejected(f"citation {number}: the quote {citation.quote!r} does not appear "
                            f"in passage {passage.id} word for word; copy the words exactly")
    if scenario.name in taken:
        raise _Rejected(f"the name {scenario.name!r} is taken; choose another")
    for number, item in enumerate(scenario.interventions):
        fields = {"value": item.value, "at": item.at, "duration": item.duration,
                  "ramp": item.ramp}
        missing = [f for f, v in fields.items()
                   if v is not None and (item.grounding or {}).get(f) is None]  # type: ignore[call-overload]
        if missing:
            wanted = ", ".join(f'"{field}": GROUND' for field in missing)
            raise _Rejected(
                f"intervention {number} (knob {item.knob!r}) does not ground its "
                f"{' and '.join(missing)}: give \"grounding\": {{{wanted}}}, each GROUND "
                "{\"citation\": <the index of a citation>, \"text\": \"<words of its quote "
                "that state it>\"} or {\"assumption\": \"<why it was chosen>\"}")
    try:  # every value and time is grounded, and truly: a value its words do not state fails
        check_grounding(scenario, f"scenario {scenario.name!r}", require=True)
    except ScenarioError as exc:
        raise _Rejected(str(exc)) from None
    return scenario


def _describe_set(documents: Sequence[Document]) -> str:
    names = [d.file for d in documents]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"documents {shown}"


def generate_scenarios(
    documents: Sequence[Document],
    knobs: Knobs,
    model: LanguageModel,
    *,
    target: str,
    model_name: str,
    count: int = 3,
    tries: int = 3,
    until: float | None = None,
    recording: str | None = None,
    on_reject: Callable[[int, int, str], None] | None = None,
    max_tokens: int | None = DEFAULT_MAX_TOKENS,
    schema: bool = True,
) -> list[Scenario]:
    """Ask *model* for *count* scenarios that fit *knobs*, grounded in *documents*.

    Nothing is written: save the scenarios (:meth:`Scenario.save`) once all
    of them were accepted.

    Args:
        documents: The source documents (:func:`read_documents`).
        knobs: The target model's knobs.
        model: The language model (a recording, replaying or scripted one...).
        target: How the target is named (``path.py:KNOBS``); each scenario's ``target``.
        model_name: The model name sent in every request (part of its key).
        count: How many scenarios to make (>= 1).
        tries: The most requests per scenario (>= 1); after a rejected reply
            the model is asked again, told why.
        until: The end of the run, if known: an intervention after it is rejected.
        recording: The file name of the recordings, for ``provenance.recording``.
        on_reject: ``on_reject(index, try, reason)`` for each rejected reply.
        max_tokens: The most tokens a reply may take (sent with every request,
            part of its key; None sends no bound). A reply cut off there is
            rejected, saying so.
        schema: Send the reply's JSON schema (:func:`reply_schema`) with every
            request, for servers that constrain their model to it.

    Returns:
        The scenarios, in the order they were made.

    Raises:
        ScenarioError: The model gave no acceptable reply within *tries* for
            one of the scenarios; the message names the documents, the target
            and the last reason. Also for bad arguments.
        ProviderError: The model could not be called (a ReplayMiss when a
            replay lacks a call).
    """
    if type(count) is not int or count < 1:
        raise ScenarioError(f"count must be an int >= 1, got {count!r}")
    if type(tries) is not int or tries < 1:
        raise ScenarioError(f"tries must be an int >= 1, got {tries!r}")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        raise ScenarioError(f"max_tokens must be an int >= 1 or None, got {max_tokens!r}")
    if not documents:
        raise ScenarioError("no documents given")
    passages = [p for document in documents for p in document.passages()]
    by_id = {p.id: p for p in passages}
    schema_json = canonical_json(reply_schema(knobs, passages)) if schema else None
    system = ChatMessage("system", _SYSTEM)
    scenarios: list[Scenario] = []
    for index in range(count):
        taken = [s.name for s in scenarios]
        prompt = scenario_prompt(knobs, passages, index=index, count=count, taken=taken,
                                 until=until)
        messages = [system, ChatMessage("user", prompt)]
        prompt_hash = hashlib.sha256(
            canonical_json([m.to_dict() for m in messages]).encode("utf-8")).hexdigest()
        calls: list[_Call] = []
        reason = ""
        accepted: Scenario | None = None
        for attempt in range(tries):
            request = CompletionRequest(tuple(messages), model=model_name, temperature=0.0,
                                        max_tokens=max_tokens, response_schema_json=schema_json)
            site = CallSite(f"scenario-{index}", attempt)
            completion = model.complete(request, site=site)
            calls.append(_Call(site, request, completion))
            try:
                accepted = _accept(_reply_json(completion.text), knobs=knobs, passages=by_id,
                                   target=target, taken=taken, until=until)
                break
            except _Rejected as exc:
                reason = str(exc)
                if completion.finish_reason == "length":
                    reason = (f"the reply was cut off at max_tokens={max_tokens} tokens "
                              f"(finish_reason 'length'); write a shorter one: {reason}")
                if on_reject is not None:
                    on_reject(index, attempt, reason)
                messages += [ChatMessage("assistant", completion.text),
                             ChatMessage("user", _follow_up(reason))]
        if accepted is None:
            raise ScenarioError(
                f"{_describe_set(documents)} (target {target}): the model gave no valid "
                f"scenario {index + 1} of {count} in {tries} tr{'y' if tries == 1 else 'ies'}; "
                f"the last reply was rejected: {reason}")
        cited = list(dict.fromkeys(c.passage for c in accepted.citations))
        provenance = {
            "generator": GENERATOR,
            "model": model_name,
            "reported_model": calls[-1].completion.model,
            "prompt_sha256": prompt_hash,
            "passages": [{"id": pid, "sha256": by_id[pid].sha256} for pid in cited],
            "recording": {"file": recording,
                          "calls": [{"site": str(c.site), "key": c.request.key()}
                                    for c in calls]},
            "tries": len(calls),
            "max_tokens": max_tokens,
            "response_schema": schema,
        }
        scenarios.append(Scenario(**{**accepted.content(), "provenance": provenance}))
    return scenarios


# -- checking artifacts -------------------------------------------------------------------


def _check_citations(scenario: Scenario, where: str,
                     documents: dict[str, Document] | None) -> None:
    if not scenario.citations:
        raise ScenarioError(f"{where}: the scenario cites no passage; expected at least one "
                            "citation of a source document")
    recorded = {}
    for item in scenario.provenance.get("passages", ()) or ():
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            recorded[item["id"]] = item.get("sha256")
    for number, citation in enumerate(scenario.citations):
        label = f"{where}: citation {number} ({citation.passage})"
        try:
            file, start, end, prefix = parse_passage_id(citation.passage)
        except ScenarioError as exc:
            raise ScenarioError(f"{where}: citation {number}: {exc}") from None
        full = recorded.get(citation.passage)
        if isinstance(full, str) and not full.startswith(prefix):
            raise ScenarioError(f"{label}: provenance gives the passage SHA-256 {full[:12]}..., "
                                f"but its id says {prefix}")
        if documents is None:
            continue
        document = documents.get(file)
        if document is None:
            known = ", ".join(sorted(documents)) or "none"
            raise ScenarioError(f"{label}: cites document {file!r}, which is not among the "
                                f"documents given ({known})")
        passage = document.passage(start, end)
        if passage.sha256[:12] != prefix:
            moved = next((p for p in document.passages() if p.sha256.startswith(prefix)), None)
            where_now = (f" (its text is now at {moved.start}-{moved.end}: the document "
                         "changed before it)" if moved is not None else "")
            raise ScenarioError(
                f"{label}: expected {file}[{start}:{end}] to have SHA-256 {prefix}..., but it "
                f"has {passage.sha256[:12]}...: the passage changed since generation"
                f"{where_now}")
        if not passage.quotes(citation.quote):
            raise ScenarioError(f"{label}: expected the quote {citation.quote!r} in the "
                                "passage, word for word; it is not there")


def check_grounding(scenario: Scenario, where: str, *,
                    require: bool = False) -> list[str] | None:
    """Check that each intervention's value and times are grounded; return the assumptions.

    Every ``value``, ``at`` and (when given) ``duration`` and ``ramp`` must
    state where it comes from: words inside the quote of one of the
    scenario's citations that state it (re-read here: the value must be one
    of their numbers, units and clock times normalised, or their on/off
    word), or an assumption with its reason. A scenario made by the prompt of
    ``simulacra.scenarios.generate.v1`` that grounds nothing was written
    before grounding existed: it is let through (None is returned) unless
    *require*.

    Returns:
        One line per assumption (``intervention I (knob K): FIELD V assumed: REASON``),
        or None for an ungrounded artifact of generator v1.

    Raises:
        ScenarioError: One line naming the artifact, the knob and the quote.
    """
    items = scenario.interventions
    if all(item.grounding is None for item in items) and not require and \
            scenario.provenance.get("generator") == GENERATOR_V1:
        return None
    assumed: list[str] = []
    for index, item in enumerate(items):
        label = f"{where}: intervention {index} (knob {item.knob!r})"
        if item.draw is not None:  # a modelling choice: no document states a distribution
            for field, dist in (("delay", item.draw.delay), ("duration", item.draw.duration)):
                if dist is not None:
                    assumed.append(f"intervention {index} (knob {item.knob!r}): {field} drawn "
                                   f"from {dist.describe()} (not checked against the "
                                   "documents)")
        if item.when is not None:
            assumed.append(f"intervention {index} (knob {item.knob!r}): fires when "
                           f"{item.when.describe()} (not checked against the documents)")
        fields = {"value": item.value, "at": item.at, "duration": item.duration,
                  "ramp": item.ramp}
        for field, value in fields.items():
            if value is None:
                continue
            ground = (item.grounding or {}).get(field)  # type: ignore[call-overload]
            if ground is None:
                version = scenario.provenance.get("generator", "no generator")
                raise ScenarioError(
                    f"{label}: {field} {value!r} states no grounding (expected words of its "
                    f"quote or an assumption; made by {version}: regenerate it)")
            if ground.assumption is not None:
                assumed.append(f"intervention {index} (knob {item.knob!r}): {field} {value!r} "
                               f"assumed: {ground.assumption}")
                continue
            if ground.citation >= len(scenario.citations):
                raise ScenarioError(f"{label}: {field} {value!r} is grounded in citation "
                                    f"{ground.citation}, which the scenario does not have")
            quote = scenario.citations[ground.citation].quote
            text = ground.text or ""
            if normalize_space(text) not in normalize_space(quote):
                raise ScenarioError(f"{label}: {field} {value!r} is grounded in {text!r}, which "
                                    f"is not in its quote {quote!r}")
            if not grounds(value, text, field=field):
                raise ScenarioError(f"{label}: {field} {value!r} matches nothing in its quote "
                                    f"{quote!r} (grounded in {text!r})")
    return assumed


def check_artifacts(directory: str | os.PathLike[str], *,
                    documents: Sequence[Document] | None = None,
                    knobs: Knobs | None = None, until: float | None = None,
                    notes: list[str] | None = None,
                    require_grounding: bool = False) -> list[Scenario]:
    """Re-validate every artifact (``*.json``) of *directory*; stop at the first that fails.

    Each artifact must fit the schema, carry the hash of its content and be
    called ``<name>-<hash prefix>.json``; with *knobs*, fit them; and cite at
    least one passage by a well-formed id. With *documents*, each cited
    passage's file, offsets and SHA-256 must match the document's current
    text, and the quote must be in it. Each intervention's value and times
    must be grounded (:func:`check_grounding`); the assumptions, and each
    artifact of generator v1 that grounds nothing (an error with
    *require_grounding*), are added to *notes*.

    Returns:
        The scenarios, in file-name order.

    Raises:
        ScenarioError: The first artifact that fails, named, with what was expected.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise ScenarioError(f"{str(folder)!r} is not a directory of scenario artifacts")
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise ScenarioError(f"{str(folder)!r} holds no scenario artifact (*.json)")
    table = None if documents is None else {d.file: d for d in documents}
    names: dict[str, Path] = {}
    scenarios = []
    for path in paths:
        scenario = load_scenario(path)
        where = str(path)
        if path.name != scenario.filename:
            raise ScenarioError(f"{where}: expected the file to be called {scenario.filename} "
                                "(<name>-<first 12 hex digits of its hash>.json)")
        if scenario.name in names:
            raise ScenarioError(f"{where}: another artifact, {names[scenario.name].name}, is "
                                f"also called {scenario.name!r}; expected one artifact per "
                                "name (remove the stale one)")
        names[scenario.name] = path
        if knobs is not None:
            try:
                scenario.check(knobs, end=until, dynamic=True)
            except ScenarioError as exc:
                raise ScenarioError(f"{where}: {exc}") from None
        _check_citations(scenario, where, table)
        assumed = check_grounding(scenario, where, require=require_grounding)
        if notes is not None:
            if assumed is None:
                notes.append(f"{where}: not grounded: made by {GENERATOR_V1}, before values were "
                             "grounded; its values and times are not checked (regenerate it)")
            else:
                notes.extend(f"{where}: {line}" for line in assumed)
        scenarios.append(scenario)
    return scenarios
