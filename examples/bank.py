"""An M/M/c bank: simulated mean wait against the Erlang-C formula.

Customers arrive as a Poisson process of rate ``arrival_rate`` (exponential
inter-arrival times drawn from the ``"arrivals"`` stream) and queue in one line
for ``servers`` tellers (a :class:`simulacra.Resource` of that capacity). Each
service takes an exponential time of rate ``service_rate`` (drawn from the
``"service"`` stream when the service starts). The line is served first come,
first served; nobody leaves early.

For this queue the mean time in line has a closed form. With offered load
``a = arrival_rate / service_rate`` and per-teller load ``rho = a / servers``
(which must be below 1 for the queue to be stable), the probability that an
arriving customer has to wait is Erlang's C formula::

    C(c, a) = (a^c / c!) / (1 - rho)
              / (sum_{k<c} a^k / k!  +  (a^c / c!) / (1 - rho))

and the mean wait in line is ``Wq = C(c, a) / (c * service_rate - arrival_rate)``.

:func:`run` simulates ``customers`` arrivals (the bank starts empty and runs
until the last customer has left) and returns the simulated mean wait beside
``Wq``. Near saturation (the default load is 0.9) successive waits are strongly
correlated, so the simulated mean converges slowly: expect a few per cent of
relative error with the default 20 000 customers (the batch-means
``ci95_halfwidth`` KPI says how far off the simulated mean may be).

Run it with ``python examples/bank.py`` or ``simulacra run examples/bank.py --seed 3``.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from simulacra import ConfigError, ProcessGenerator, Resource, Sim


def erlang_c_wait(servers: int, arrival_rate: float, service_rate: float) -> float:
    """The mean wait in line ``Wq`` of a stable M/M/c queue (Erlang C).

    Raises:
        ConfigError: the queue is not stable (``arrival_rate >= servers * service_rate``).
    """
    offered = arrival_rate / service_rate
    rho = offered / servers
    if not rho < 1.0:
        raise ConfigError(
            f"bank: arrival_rate={arrival_rate!r} must be below servers * service_rate = "
            f"{servers * service_rate!r} for the queue to be stable (load {rho:.3f} >= 1)"
        )
    # Terms a^k / k! built incrementally: no factorial overflow for large c.
    term = 1.0
    below = 0.0
    for k in range(servers):
        below += term
        term *= offered / (k + 1)
    # Now term == a^c / c!.
    top = term / (1.0 - rho)
    prob_wait = top / (below + top)
    return prob_wait / (servers * service_rate - arrival_rate)


def _customer(sim: Sim, bank: Resource, service_rate: float,
              waits: list[float]) -> ProcessGenerator[None]:
    arrived = sim.now
    service = sim.rng("service")
    with bank.request() as req:
        yield req
        waits.append(sim.now - arrived)
        yield sim.delay(service.expovariate(service_rate))


def _source(sim: Sim, bank: Resource, waits: list[float], *, arrival_rate: float,
            service_rate: float, customers: int) -> ProcessGenerator[None]:
    arrivals = sim.rng("arrivals")
    for _ in range(customers):
        yield sim.delay(arrivals.expovariate(arrival_rate))
        sim.spawn(_customer(sim, bank, service_rate, waits))


def _batch_means_halfwidth(waits: list[float], batches: int = 20) -> float:
    """Half-width of a ~95% confidence interval on the mean wait, by batch means.

    Successive waits are correlated, so the naive ``1.96 * s / sqrt(n)`` is far
    too small. The waits are cut into *batches* consecutive batches whose means
    are nearly independent when a batch is much longer than the queue's memory;
    2.093 is Student's t quantile for 19 degrees of freedom.
    """
    size = len(waits) // batches
    if size < 2:
        return math.nan
    means = [math.fsum(waits[i * size:(i + 1) * size]) / size for i in range(batches)]
    centre = math.fsum(means) / batches
    variance = math.fsum((m - centre) ** 2 for m in means) / (batches - 1)
    return 2.093 * math.sqrt(variance / batches)


def _check(name: str, value: object, *, integer: bool) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
        expected = "an int >= 1" if integer else "a number > 0"
        raise ConfigError(f"bank: {name} must be {expected}, got {value!r}")


def run(seed: int = 42, servers: int = 3, arrival_rate: float = 2.7, service_rate: float = 1.0,
        customers: int = 20000) -> dict[str, float]:
    """Simulate *customers* arrivals at an M/M/c bank and compare with Erlang C.

    Returns:
        ``mean_wait`` (simulated mean time in line), ``erlang_c_wait`` (the
        analytic ``Wq``), ``relative_error`` (``|mean_wait - Wq| / Wq``),
        ``ci95_halfwidth`` (batch-means half-width of a 95% interval on
        ``mean_wait``), ``utilisation`` (time-averaged fraction of busy tellers, from
        :meth:`Resource.statistics`) and ``served`` (customers served).

    Raises:
        ConfigError: a parameter is out of range or the queue is unstable.
    """
    _check("servers", servers, integer=True)
    _check("customers", customers, integer=True)
    _check("arrival_rate", arrival_rate, integer=False)
    _check("service_rate", service_rate, integer=False)
    analytic = erlang_c_wait(servers, arrival_rate, service_rate)

    sim = Sim(seed=seed)
    bank = Resource(sim, capacity=servers)
    waits: list[float] = []
    sim.spawn(_source(sim, bank, waits, arrival_rate=arrival_rate, service_rate=service_rate,
                      customers=customers))
    sim.run()

    mean_wait = math.fsum(waits) / len(waits)
    halfwidth = _batch_means_halfwidth(waits)
    return {
        "mean_wait": mean_wait,
        "erlang_c_wait": analytic,
        "relative_error": abs(mean_wait - analytic) / analytic,
        "ci95_halfwidth": halfwidth,
        "utilisation": bank.statistics().utilisation,
        "served": len(waits),
    }


def main() -> None:
    """Print the simulated mean wait beside the Erlang-C value, for the defaults."""
    seed, servers, arrival_rate, service_rate, customers = 42, 3, 2.7, 1.0, 20000
    kpis = run(seed, servers, arrival_rate, service_rate, customers)
    print(f"M/M/{servers} bank: arrival rate {arrival_rate}, service rate {service_rate}, "
          f"{customers} customers, seed {seed}")
    print(f"  mean_wait       {kpis['mean_wait']:.4f}  (simulated)")
    print(f"  erlang_c_wait   {kpis['erlang_c_wait']:.4f}  (Erlang C)")
    print(f"  relative_error  {kpis['relative_error']:.2%}")
    load = arrival_rate / (servers * service_rate)
    print(f"  ci95_halfwidth  {kpis['ci95_halfwidth']:.4f}  (batch means, on mean_wait)")
    print(f"  utilisation     {kpis['utilisation']:.4f}  (offered load {load:.4f})")
    print(f"  served          {int(kpis['served'])}")


if __name__ == "__main__":
    main()
