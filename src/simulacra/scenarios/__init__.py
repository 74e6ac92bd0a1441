"""Scenarios (layer 2): knobs a model declares, interventions in virtual time, artifacts.

A model declares its knobs (:class:`Knobs` of :class:`Knob`); a run keeps their
values on a :class:`KnobBoard`; a :class:`Scenario` is a validated, content-
hashed list of :class:`Intervention` s that :func:`apply_scenario` schedules on
a :class:`~simulacra.Sim`. Scenarios are data: JSON artifacts named
``<name>-<hash>.json`` (:meth:`Scenario.save`, :func:`load_scenario`,
:func:`load_scenarios`). See ``docs/scenarios.md``.
"""

from simulacra._util import claim_public_module

from ._apply import apply_scenario as apply_scenario
from ._apply import schedule as schedule
from ._knobs import KNOB_TYPES as KNOB_TYPES
from ._knobs import Knob as Knob
from ._knobs import KnobBoard as KnobBoard
from ._knobs import Knobs as Knobs
from ._knobs import KnobValue as KnobValue
from ._schema import SCENARIO_FORMAT as SCENARIO_FORMAT
from ._schema import Citation as Citation
from ._schema import Intervention as Intervention
from ._schema import Scenario as Scenario
from ._schema import canonical_json as canonical_json
from ._schema import load_scenario as load_scenario
from ._schema import load_scenarios as load_scenarios

__all__ = [
    "KNOB_TYPES", "SCENARIO_FORMAT", "Citation", "Intervention", "Knob", "KnobBoard", "KnobValue",
    "Knobs", "Scenario", "apply_scenario", "canonical_json", "load_scenario", "load_scenarios",
    "schedule",
]

claim_public_module(__name__, globals())
