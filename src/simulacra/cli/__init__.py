"""The ``simulacra`` command line (layer 7).

This layer sits on top of everything else and eats its own dog food: it uses
only the public front door ``simulacra`` (imported lazily, inside the commands
that need it) and the standard library. ``simulacra --version`` therefore stays
cheap, and nothing here can depend on a private module of a lower layer.

Commands:
    ``simulacra --version``
        Print ``simulacra <version>``.
    ``simulacra run TARGET [--seed N] [--set KEY=VALUE ...] [--json]``
        Call a model function and print the KPIs it returns.
    ``simulacra experiment STUDY [--output DIR] [--backend NAME] [--resume] ...``
        Run a study of replications described in a TOML or JSON file; print
        the mean and confidence interval of every KPI per config and write
        the results table (see ``simulacra.cli._experiment``).
    ``simulacra report PATH [-o FILE]``
        Write a self-contained HTML report of a run directory, a study
        directory or a monitor file; ``simulacra run CONFIG.yaml --report``
        writes the run's when it ends (see ``simulacra.cli._report``).
    ``simulacra scenarios generate DOCS... --target MODULE:KNOBS --out DIR``
        Ask a language model (or the scripted stand-in) for scenarios grounded
        in documents, record or replay its replies, and write the artifacts;
        ``simulacra scenarios check DIR --docs DOCS...`` re-validates them
        (see ``simulacra.cli._scenarios``).
"""

from simulacra.cli._main import main as main

__all__ = ["main"]
