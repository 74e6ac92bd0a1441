"""A small social network of LLM agents on the round-based engine.

``world.py`` holds the game master that owns the feed, ``agents.py`` the
agents that read it and choose an action through a language model, and
``model.py`` the factory that ``config.yaml`` names. ``python examples/social``
(or ``simulacra run examples/social/config.yaml``) runs the demo with the
scripted model: no server, no key.
"""
