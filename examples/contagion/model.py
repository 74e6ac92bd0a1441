"""Gai-Kapadia interbank contagion: how one bank's failure cascades through a lending network.

The network
    ``banks`` banks; each ordered pair (i, j), i != j, is a loan from i to j
    with probability ``degree / (banks - 1)`` (a directed Erdos-Renyi graph,
    drawn from the seed tree's ``"network"`` stream, so the same seed gives the
    same network everywhere). A bank's *borrowers* are the banks it lent to
    (its exposures); its *lenders* are the banks that lent to it.

Balance sheets (Gai and Kapadia, 2010)
    Every bank has total assets of 100. A bank with borrowers holds
    ``interbank_share`` of them as interbank loans, spread evenly over its
    borrowers; the rest are external assets. Its capital buffer is
    ``capital_ratio`` of total assets.

The shock and the cascade
    One bank, drawn from the ``"shock"`` stream, fails at the start. Each step
    has two phases:

    1. ``Bank.send_state``: every bank tells its lenders whether it has
       failed (a message along each of its links);
    2. ``Bank.check_solvency`` (only banks that received messages run): a
       solvent bank adds up its losses on loans to failed borrowers,
       ``(1 - recovery) * exposure`` each, and fails when they exceed its
       capital buffer.

    The cascade stops when a step changes nothing: :func:`run` runs until the
    state digest of the last step equals that of the step before.

Gai and Kapadia find contagion (a cascade reaching more than 5% of banks) only
for average degrees in a window, roughly 1 to 8 at these parameters: below it
the network is too sparse to carry a shock, above it each exposure is too
small to bring a lender down. Within the window, contagion is rare but, when
it happens, it usually takes most of the system with it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

from simulacra import (
    Agent,
    ConfigError,
    Context,
    ExecutionBackend,
    Model,
    Phase,
    RunResult,
    SeedTree,
    Sequence,
)

TOTAL_ASSETS = 100.0
#: A cascade larger than this share of the banks counts as contagion (Gai and Kapadia).
CONTAGION_THRESHOLD = 0.05


class Bank(Agent):
    """A bank: its loans, its capital buffer and whether it has failed."""

    def __init__(self, id: int, *, borrowers: tuple[int, ...], lenders: tuple[int, ...],
                 interbank_assets: float, capital: float, failed: bool = False) -> None:
        super().__init__(id)
        self.borrowers = borrowers
        self.lenders = lenders
        self.interbank_assets = interbank_assets
        self.capital = capital
        self.failed = failed
        #: The step at whose end the bank failed (0 for the initial shock).
        self.failed_at: int | None = 0 if failed else None
        self.losses = 0.0

    def send_state(self, ctx: Context) -> None:
        """Tell the banks that lent to this one whether it has failed."""
        ctx.broadcast("state", self.failed, to=self.lenders)

    def check_solvency(self, ctx: Context) -> None:
        """Count losses on loans to failed borrowers; fail if they exceed the buffer."""
        if self.failed:
            return
        world = ctx.world
        assert world is not None
        failed_borrowers = sum(1 for failed in ctx.payloads("state") if failed)
        exposure = self.interbank_assets / len(self.borrowers)
        self.losses = failed_borrowers * exposure * (1.0 - world["recovery"])
        if self.losses > self.capital:
            self.failed = True
            self.failed_at = ctx.step + 1


STEP = Sequence(Bank.send_state, Phase(Bank.check_solvency, receivers_only=True))


def network(seed: int | str, banks: int, degree: float) -> list[tuple[int, ...]]:
    """Each bank's borrowers: a directed Erdos-Renyi graph from the seed's ``"network"`` stream."""
    rng = SeedTree(seed).stream("network")
    p = degree / (banks - 1)
    return [tuple(j for j in range(banks) if j != i and rng.random() < p) for i in range(banks)]


def build(seed: int | str = 0, *, banks: int = 100, degree: float = 4.0,
          capital_ratio: float = 0.04, interbank_share: float = 0.2, recovery: float = 0.0,
          backend: str | ExecutionBackend | None = None) -> tuple[Model, int]:
    """Build the model; return it and the id of the bank the shock hits.

    Raises:
        ConfigError: A parameter is out of range; the message names it.
    """
    given: dict[str, object] = {"banks": banks, "degree": degree,
                                "capital_ratio": capital_ratio,
                                "interbank_share": interbank_share, "recovery": recovery}
    count = given["banks"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 2:
        raise ConfigError(f"banks must be an int >= 2, got {count!r}")
    for name, value in given.items():
        high = count - 1 if name == "degree" else 1.0
        if name != "banks" and not (isinstance(value, int | float) and math.isfinite(value)
                                    and 0.0 <= value <= high):
            raise ConfigError(f"{name} must be a number in [0, {high:g}], got {value!r}")
    borrowers = network(seed, banks, degree)
    lenders: list[list[int]] = [[] for _ in range(banks)]
    for i, loans in enumerate(borrowers):
        for j in loans:
            lenders[j].append(i)
    shocked = SeedTree(seed).stream("shock").randrange(banks)
    model = Model(seed=seed, backend=backend, world={"recovery": recovery})
    for i in range(banks):
        model.add(Bank, i, borrowers=borrowers[i], lenders=tuple(lenders[i]),
                  interbank_assets=interbank_share * TOTAL_ASSETS if borrowers[i] else 0.0,
                  capital=capital_ratio * TOTAL_ASSETS, failed=i == shocked)
    return model, shocked


def simulate(seed: int | str = 0, *, banks: int = 100, degree: float = 4.0,
             capital_ratio: float = 0.04, interbank_share: float = 0.2, recovery: float = 0.0,
             backend: str | ExecutionBackend | None = None) -> tuple[RunResult, int]:
    """Run one cascade until a step changes nothing; return the run and the shocked bank.

    A model run is a pure function of its inputs, so when *steps* turns out too
    short the run is simply repeated with twice as many.
    """
    model, shocked = build(seed, banks=banks, degree=degree, capital_ratio=capital_ratio,
                           interbank_share=interbank_share, recovery=recovery, backend=backend)
    steps = 8
    while True:
        result = model.run(STEP, steps=steps)
        if result.state_digests[-1] == result.state_digests[-2]:
            return result, shocked
        steps *= 2


def failed_banks(result: RunResult) -> list[int]:
    """The ids of the banks that have failed at the end of *result*."""
    return [int(bank) for bank, (_, state) in result.agents.items() if state["failed"]]


def run(seed: int | str = 0, *, banks: int = 100, degree: float = 4.0,
        capital_ratio: float = 0.04, interbank_share: float = 0.2, recovery: float = 0.0,
        backend: str | ExecutionBackend | None = None) -> dict[str, Any]:
    """Run one cascade to its end and report its size (KPIs for ``simulacra run``).

    Returns:
        ``seed``, ``banks``, ``degree``, ``shocked`` (the bank the shock hit),
        ``failures`` (banks failed at the end, the shocked one included),
        ``cascade_size`` (failures / banks), ``rounds`` (the step in which the
        last bank failed), ``steps`` (steps run), ``digest`` (the run digest:
        the same on every backend).
    """
    result, shocked = simulate(seed, banks=banks, degree=degree, capital_ratio=capital_ratio,
                               interbank_share=interbank_share, recovery=recovery,
                               backend=backend)
    failed = failed_banks(result)
    return {
        "seed": seed,
        "banks": banks,
        "degree": degree,
        "shocked": shocked,
        "failures": len(failed),
        "cascade_size": len(failed) / banks,
        "rounds": max(result.state(bank)["failed_at"] for bank in failed),
        "steps": result.steps,
        "digest": result.digest,
    }


def cascade_distribution(seeds: Iterable[int | str] = range(20), **params: Any) -> dict[str, Any]:
    """Run one cascade per seed and summarise the distribution of cascade sizes.

    Args:
        seeds: One run per seed (the seed draws both the network and the shock).
        **params: Parameters of :func:`run` (``banks``, ``degree``, ...).

    Returns:
        ``sizes`` (cascade size per seed, in seed order), ``mean``, ``median``,
        ``contagion_frequency`` (share of seeds whose cascade exceeds 5% of the
        banks), ``extent_given_contagion`` (mean size of those cascades, or
        ``None``), and ``histogram``: counts in the bins 0-5%, 5-25%, 25-50%,
        50-75% and 75-100%.
    """
    runs = [run(seed, **params) for seed in seeds]
    if not runs:
        raise ConfigError("seeds must not be empty")
    sizes = [r["cascade_size"] for r in runs]
    contagious = [s for s in sizes if s > CONTAGION_THRESHOLD]
    edges = (CONTAGION_THRESHOLD, 0.25, 0.5, 0.75)
    histogram = {"0-5%": 0, "5-25%": 0, "25-50%": 0, "50-75%": 0, "75-100%": 0}
    for size in sizes:
        histogram[list(histogram)[sum(size > edge for edge in edges)]] += 1
    return {
        "sizes": sizes,
        "mean": statistics.fmean(sizes),
        "median": statistics.median(sizes),
        "contagion_frequency": len(contagious) / len(sizes),
        "extent_given_contagion": statistics.fmean(contagious) if contagious else None,
        "histogram": histogram,
    }
