"""Scenarios (layer 2): knobs a model declares, interventions in virtual time, artifacts.

A model declares its knobs (:class:`Knobs` of :class:`Knob`); a run keeps their
values on a :class:`KnobBoard`; a :class:`Scenario` is a validated, content-
hashed list of :class:`Intervention` s that :func:`apply_scenario` schedules on
a :class:`~simulacra.Sim`. Scenarios are data: JSON artifacts named
``<name>-<hash>.json`` (:meth:`Scenario.save`, :func:`load_scenario`,
:func:`load_scenarios`). See ``docs/scenarios.md``.

At design time, :func:`generate_scenarios` asks a language model (layer 1,
:mod:`simulacra.llm`) for scenarios grounded in documents
(:func:`read_documents`, split into :class:`Passage` s with stable ids), and
:func:`check_artifacts` re-validates the artifacts against the documents;
:func:`scripted_scenario_model` is a deterministic stand-in for the model.
A run never calls a model. This package imports the standard library,
pydantic, :mod:`simulacra.errors`, :mod:`simulacra.llm` and, for ``Sim`` types
only, :mod:`simulacra.core`; ``pypdf`` (the ``pdf`` extra) when a PDF is read.

Names load on first use (PEP 562), each with the module that defines it:
``Knobs`` costs no pydantic, and a replication worker that never touches a
scenario imports none of this package's dependencies (pydantic's extension
module refuses sub-interpreters).
"""

from typing import TYPE_CHECKING

from simulacra._util import lazy_names

if TYPE_CHECKING:  # the type checker sees every name; at run time they load lazily
    from ._apply import apply_scenario as apply_scenario
    from ._documents import DOCUMENT_SUFFIXES as DOCUMENT_SUFFIXES
    from ._documents import Document as Document
    from ._documents import Passage as Passage
    from ._documents import normalize_space as normalize_space
    from ._documents import parse_passage_id as parse_passage_id
    from ._documents import read_documents as read_documents
    from ._documents import split_passages as split_passages
    from ._extract import EXTRACTOR as EXTRACTOR
    from ._extract import extract_scenarios as extract_scenarios
    from ._generate import DEFAULT_MAX_TOKENS as DEFAULT_MAX_TOKENS
    from ._generate import GENERATE_TASK as GENERATE_TASK
    from ._generate import GENERATOR as GENERATOR
    from ._generate import check_artifacts as check_artifacts
    from ._generate import check_grounding as check_grounding
    from ._generate import generate_scenarios as generate_scenarios
    from ._generate import reply_schema as reply_schema
    from ._generate import scenario_prompt as scenario_prompt
    from ._grounding import Quantity as Quantity
    from ._grounding import find_quantities as find_quantities
    from ._grounding import grounds as grounds
    from ._knobs import KNOB_TYPES as KNOB_TYPES
    from ._knobs import Knob as Knob
    from ._knobs import KnobBoard as KnobBoard
    from ._knobs import Knobs as Knobs
    from ._knobs import KnobValue as KnobValue
    from ._schema import DISTRIBUTIONS as DISTRIBUTIONS
    from ._schema import SCENARIO_FORMAT as SCENARIO_FORMAT
    from ._schema import Citation as Citation
    from ._schema import Distribution as Distribution
    from ._schema import Draw as Draw
    from ._schema import Ground as Ground
    from ._schema import Intervention as Intervention
    from ._schema import Scenario as Scenario
    from ._schema import Trigger as Trigger
    from ._schema import canonical_json as canonical_json
    from ._schema import load_scenario as load_scenario
    from ._schema import load_scenarios as load_scenarios
    from ._scripted import scenario_rules as scenario_rules
    from ._scripted import scripted_scenario_model as scripted_scenario_model

__all__ = [
    "KNOB_TYPES", "SCENARIO_FORMAT", "Citation", "Intervention", "Knob", "KnobBoard", "KnobValue",
    "Knobs", "Scenario", "apply_scenario", "canonical_json", "load_scenario", "load_scenarios",
    # drawn times and triggers
    "DISTRIBUTIONS", "Distribution", "Draw", "Trigger",
    # scenarios from documents, at design time
    "DEFAULT_MAX_TOKENS", "DOCUMENT_SUFFIXES", "EXTRACTOR", "GENERATE_TASK", "GENERATOR",
    "Document", "Ground", "Passage", "Quantity", "check_artifacts", "check_grounding",
    "extract_scenarios", "find_quantities", "grounds",
    "generate_scenarios", "normalize_space", "parse_passage_id", "read_documents",
    "reply_schema", "scenario_prompt", "scenario_rules", "scripted_scenario_model",
    "split_passages",
]

#: Each public name -> the private module that defines it.
_LAZY: dict[str, str] = {
    "apply_scenario": "._apply",
    **dict.fromkeys(("DOCUMENT_SUFFIXES", "Document", "Passage", "normalize_space",
                     "parse_passage_id", "read_documents", "split_passages"), "._documents"),
    **dict.fromkeys(("DEFAULT_MAX_TOKENS", "GENERATE_TASK", "GENERATOR", "check_artifacts",
                     "check_grounding", "generate_scenarios", "reply_schema",
                     "scenario_prompt"), "._generate"),
    **dict.fromkeys(("EXTRACTOR", "extract_scenarios"), "._extract"),
    **dict.fromkeys(("Quantity", "find_quantities", "grounds"), "._grounding"),
    **dict.fromkeys(("KNOB_TYPES", "Knob", "KnobBoard", "Knobs", "KnobValue"), "._knobs"),
    **dict.fromkeys(("SCENARIO_FORMAT", "Citation", "Ground", "Intervention", "Scenario",
                     "canonical_json", "load_scenario", "load_scenarios", "DISTRIBUTIONS",
                     "Distribution", "Draw", "Trigger"), "._schema"),
    **dict.fromkeys(("scenario_rules", "scripted_scenario_model"), "._scripted"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
