"""Pausable agents: blocking agent functions that pause for a human, on virtual time.

``newsroom.py`` holds the example; ``python examples/pausable`` runs it.
"""
