"""Gai-Kapadia interbank contagion on the phased agent engine.

``model.py`` holds the model (:func:`model.run` runs one cascade,
:func:`model.cascade_distribution` summarises cascades over seeds);
``python examples/contagion`` prints the distribution for a few average degrees.
"""
