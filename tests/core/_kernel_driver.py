"""Run pickled kernel models on the kernel SIMULACRA_KERNEL selects; write what they showed.

Used by ``test_compiled_kernel.py``: the same models run here once under
``SIMULACRA_KERNEL=python`` and once under ``compiled``, and the outputs must be
equal. Usage: ``python _kernel_driver.py MODELS.pickle OUT.pickle``. The output
is a pickled dict: ``kernel`` and, per model, one entry per variant (run, step
loop, run(until) then run, async processes, keyed ordering, traced), each the
repr of the :class:`Outcome` (or of the exception that escaped), plus the trace
digest and tie counts of the traced run.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _models import Model, SimulacraAdapter, execute

import simulacra.core
from simulacra.trace import Trace

VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("run", "run", {}),
    ("step", "step", {}),
    ("split", "split", {}),
    ("async", "async", {}),
    ("keyed", "run", {"ordering": "keyed"}),
    ("keyed-split", "split", {"ordering": "keyed"}),
    ("traced", "run", {"trace": True}),
]


RESOURCE_CLASSES = ("Resource", "PriorityResource", "PreemptiveResource", "Container", "Store",
                    "FilterStore", "PriorityStore")


class CapturingAdapter(SimulacraAdapter):
    """The simulacra adapter, keeping the last Sim and the resources it made.

    Their statistics (which SimPy does not have, so the SimPy suite does not
    compare them) are compared too.
    """

    last: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.made: list[Any] = []
        for name in RESOURCE_CLASSES:
            setattr(self, name, self._maker(getattr(self, name)))

    def _maker(self, cls: Any) -> Any:
        def make(*args: Any, **kw: Any) -> Any:
            obj = cls(*args, **kw)
            self.made.append(obj)
            return obj

        return make

    def new_env(self, **kw: Any) -> Any:
        self.made = []
        self.last = super().new_env(**kw)
        return self.last


def run_one(model: Model) -> dict[str, Any]:
    adapter = CapturingAdapter()
    shown: dict[str, Any] = {}
    for name, mode, env_kw in VARIANTS:
        try:
            shown[name] = repr(execute(adapter, model, mode, **env_kw))
        except BaseException as exc:
            shown[name] = f"escaped: {type(exc).__name__}: {exc}"
        sim = adapter.last
        sim._check_invariants()
        # (No reprs of events: they show addresses.)
        shown[name + "-resources"] = repr([
            (type(obj).__name__, obj.statistics(), len(getattr(obj, "users", ())),
             len(getattr(obj, "queue", ())), getattr(obj, "items", None))
            for obj in adapter.made
        ])
        if env_kw.get("trace"):
            shown[name + "-digest"] = Trace(sim.trace_records).digest()
            shown[name + "-ties"] = repr(sim.ties)
    return shown


def main() -> None:
    models: list[Model] = pickle.loads(Path(sys.argv[1]).read_bytes())  # noqa: S301 - ours
    out = {"kernel": simulacra.core.KERNEL, "models": [run_one(model) for model in models]}
    Path(sys.argv[2]).write_bytes(pickle.dumps(out))


if __name__ == "__main__":
    main()
