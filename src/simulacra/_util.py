"""Small helpers shared by every layer (standard library only)."""

from __future__ import annotations

from typing import Any

__all__ = ["claim_public_module"]


def claim_public_module(module_name: str, namespace: dict[str, Any]) -> None:
    """Rewrite ``__module__`` of the public names in *namespace* to *module_name*.

    Reprs, tracebacks and pickles then show ``simulacra.Sim`` rather than the
    private module that defines it. Only classes and functions defined inside
    simulacra are touched.
    """
    for name in namespace.get("__all__", ()):
        obj = namespace.get(name)
        mod = getattr(obj, "__module__", None)
        if (
            isinstance(mod, str)
            and mod.startswith("simulacra")
            and (isinstance(obj, type) or callable(obj))
        ):
            try:
                obj.__module__ = module_name
            except (AttributeError, TypeError):  # builtins and slots-only objects
                pass
