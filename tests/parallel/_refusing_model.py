"""A model whose module imports pydantic, whose extension module refuses sub-interpreters."""

from __future__ import annotations

from typing import Any

import pydantic  # noqa: F401  (the point: imported when the model is)


def model(stream: Any, config: dict[str, Any]) -> dict[str, Any]:
    """A replication that would be fine anywhere else."""
    return {"x": stream.stream("x").random()}
