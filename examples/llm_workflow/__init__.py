"""An LLM-serving system running agentic tasks (no real model is ever called).

``model.py`` holds the model (:func:`model.build` sets it up on a given Sim,
:func:`model.run` runs it once and returns its KPIs), ``planner.py`` the
CPU-heavy planning policy that the agents offload, and ``sweep.py`` the
capacity sweep (servers x batch size x concurrency) and its plot.
``python examples/llm_workflow`` runs the model and prints a KPI table;
``simulacra run examples/llm_workflow`` calls ``model.run`` from the command line.
"""
