"""A small ferry terminal's knobs: the target of the scenario-generation fixtures.

Only the declarations matter to ``simulacra scenarios generate``; the tests
never run a ferry.
"""

from simulacra.scenarios import Knob, Knobs

KNOBS = Knobs(
    Knob("berths_open", "int", 3, low=0, high=4, doc="berths open for loading vehicles",
         unit="berths"),
    Knob("crossing_time", "float", 40.0, low=10.0, high=200.0,
         doc="minutes one crossing of the strait takes", unit="minutes"),
    Knob("sea_state", "str", "calm", choices=("calm", "swell", "storm"),
         doc="the sea state the crossings sail in"),
    Knob("ticket_gate", "bool", True, doc="the automatic ticket gate works"),
)
