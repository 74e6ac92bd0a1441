"""SIR epidemic on a seeded contact network, on the phased agent engine.

``model.py`` holds the model (:func:`model.run` runs one epidemic and returns
its S/I/R curve); ``python examples/sir`` prints the curve and the final size
on the backend of your choice (the numbers do not change).
"""
