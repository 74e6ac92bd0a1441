"""Tiny targets for the grounded-extraction tests: knobs only, never run."""

from simulacra.scenarios import Knob, Knobs

#: An emergency department (one time unit: a minute).
ED = Knobs(
    Knob("arrival_rate", "float", 6.0, low=0.0, high=60.0, unit="patients/h",
         doc="patients arriving per hour"),
    Knob("nurses", "int", 3, low=1, high=20, unit="nurses", doc="nurses on shift"),
    Knob("ct_up", "bool", True, doc="the CT scanner works"),
)

#: A warehouse (one time unit: a minute).
WAREHOUSE = Knobs(
    Knob("dock_open", "bool", True, doc="the loading dock is open"),
    Knob("pickers", "int", 10, low=0, high=40, unit="pickers", doc="pickers on the floor"),
    Knob("conveyor_speed", "float", 1.0, low=0.1, high=2.0,
         doc="multiplier on the conveyor's rated speed"),
)
