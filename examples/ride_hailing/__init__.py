"""A robotaxi fleet serving trip requests on a ring of city zones.

``model.py`` holds the model (:func:`model.build` sets it up on a given Sim,
:func:`model.run` runs it once and returns its KPIs); ``python examples/ride_hailing``
runs the demo and prints a KPI table. ``simulacra run examples/ride_hailing`` calls
``model.run`` through the command line.
"""
