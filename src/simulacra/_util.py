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


class ModelWrapper:
    """A base for models that wrap another (``inner``): closing reaches the wrapped model.

    Recording, metering and guarding wrappers own no connection; the model at
    the bottom of the chain does. ``close()`` and ``aclose()`` pass through to
    ``inner``, so whoever closes the outermost model closes them all.
    """

    __slots__ = ()

    inner: Any

    def close(self) -> None:
        """Close the wrapped model (if it can be closed)."""
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    async def aclose(self) -> None:
        """Close the wrapped model's asyncio connections (if it has any)."""
        aclose = getattr(self.inner, "aclose", None)
        if callable(aclose):
            await aclose()
