"""PageRank and connected components (min-label propagation) as Pregel vertex programs.

Each is written twice: as an agent action on the per-vertex API
(``run_pregel``) and as an array function on the vectorised API
(``run_vectorized``). Both give bit-identical results, and networkx
agrees (``tests/examples/test_pregel_examples.py``). ``python examples/pregel`` runs
both on a seeded random graph and prints the comparison.
"""
