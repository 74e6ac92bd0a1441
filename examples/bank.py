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

Warm-up
-------

The bank opens empty, so the first customers wait less than ``Wq``: the mean
wait of customers arriving at time ``t`` climbs to ``Wq`` over a few
*relaxation times* ``tau = 1 / (service_rate * min(1, servers * (1 - sqrt(rho))**2))``,
the time scale on which an M/M/c queue forgets how it started (127 time units,
about 340 customers, at the defaults). Statistics are therefore taken from time
``warmup`` on: customers who arrive earlier are served but not counted, and
``utilisation`` is the busy fraction from ``warmup`` to the end. The warm-up
must be a few ``tau``; the default, ``warmup=None``, is ``3 * tau`` (380 time
units at the defaults). Measured over 3000 replications at the defaults, the
mean wait of customers arriving in ``[0, 50)`` is 0.57 ``Wq``, in ``[100, 150)``
0.94 ``Wq`` and from ``150`` on within the noise (1-2 %) of ``Wq``; at load 0.8
(``tau`` = 30) it is within 1 % from ``t = 80`` on.

How large is the error?
-----------------------

Without the warm-up, the start-up bias is a deficit of about 90 customers'
worth of ``Wq`` at the defaults: -0.5 % of the mean for 20 000 customers, but
-4.5 % for 2 000 and -29 % for 300 (over 2000 seeds; -2 +- 2 % with the default
warm-up). It does not average out over replications, since every replication
starts empty. It is not the main error of one long run, though: near
saturation successive waits are strongly correlated, so the mean of 20 000
customers has a standard deviation of about 16 % of ``Wq`` (over 60 seeds at
the defaults), and one run is routinely 10-15 % off, warm-up or not. The
batch-means ``ci95_halfwidth`` KPI (about +-20 % here) says so. For a few per
cent, run more customers (the error falls as ``1 / sqrt(customers)``) or an
experiment of replications: ``python examples/bank.py --replications 20`` runs
a :class:`simulacra.Experiment` and prints the mean wait with its 95 %
confidence interval over replications (+-10 %, and it holds ``Wq``).

:func:`run` simulates the warm-up, then ``customers`` measured arrivals (the
bank runs until the last of them has left), and returns the simulated mean wait
beside ``Wq``. Run it with ``python examples/bank.py`` (``--help`` for the
options) or ``simulacra run examples/bank.py --seed 3``.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from simulacra import (
    ConfigError,
    Experiment,
    ProcessGenerator,
    Resource,
    Sim,
    SimError,
    Tally,
    write_monitors,
)
from simulacra import monitors as monitors_of
from simulacra.parallel import mean_interval
from simulacra.scenarios import Knob, KnobBoard, Knobs, Scenario, apply_scenario, load_scenario

#: What a scenario may change during a run (``docs/scenarios.md``): the arrival
#: rate, as a multiplier read at each arrival, and how fast tellers serve, a
#: multiplier read at the start of each service. Under a scenario the bank is no
#: longer the M/M/c queue of Erlang's formula: ``erlang_c_wait`` stays the
#: formula's value for the parameters, and ``relative_error`` then measures the
#: scenario's effect, not the simulation's error.
KNOBS = Knobs(
    Knob("demand", "float", 1.0, low=0.01, high=100.0,
         doc="multiplier on the arrival rate (from the next arrival on)"),
    Knob("service_speed", "float", 1.0, low=0.01, high=100.0,
         doc="multiplier on each teller's service rate (from the next service on)"),
)


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


def relaxation_time(servers: int, arrival_rate: float, service_rate: float) -> float:
    """How long a stable M/M/c queue takes to forget its start: ``tau``.

    ``1 / (c * mu * (1 - sqrt(rho))**2)`` is Morse's relaxation time of M/M/1
    with the pooled service rate ``c * mu`` (exact for one teller, the heavy-
    traffic behaviour for more); it is never taken below one mean service time
    ``1 / mu``, the time the tellers themselves take to turn over.

    Raises:
        ConfigError: the queue is not stable.
    """
    erlang_c_wait(servers, arrival_rate, service_rate)  # checks the load
    rho = arrival_rate / (servers * service_rate)
    return 1.0 / (service_rate * min(1.0, servers * (1.0 - math.sqrt(rho)) ** 2))


def _rate(base: float, knobs: KnobBoard, name: str) -> float:
    multiplier = float(knobs[name])
    return base if multiplier == 1.0 else base * multiplier  # exactly base without a scenario


def _customer(sim: Sim, bank: Resource, service_rate: float, waits: list[float] | None,
              knobs: KnobBoard) -> ProcessGenerator[None]:
    arrived = sim.now
    service = sim.rng("service")
    with bank.request() as req:
        yield req
        if waits is not None:  # None: arrived during the warm-up, served but not counted
            waits.append(sim.now - arrived)
        yield sim.delay(service.expovariate(_rate(service_rate, knobs, "service_speed")))


def _source(sim: Sim, bank: Resource, waits: list[float], knobs: KnobBoard, *,
            arrival_rate: float, service_rate: float, customers: int,
            warmup: float) -> ProcessGenerator[None]:
    arrivals = sim.rng("arrivals")
    measured = 0
    while measured < customers:
        yield sim.delay(arrivals.expovariate(_rate(arrival_rate, knobs, "demand")))
        counted = sim.now >= warmup
        measured += counted
        sim.spawn(_customer(sim, bank, service_rate, waits if counted else None, knobs))


def _busy_at_warmup(sim: Sim, bank: Resource, warmup: float,
                    busy: list[float]) -> ProcessGenerator[None]:
    """Record the teller-time spent busy before *warmup* (to take it out of utilisation)."""
    yield sim.delay(warmup)
    busy.append(bank.statistics().utilisation * warmup * bank.capacity)
    monitors_of(sim).reset()  # with --monitors: the series from the warm-up on, as the KPIs
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
    if (isinstance(value, bool) or not isinstance(value, kind) or not value > 0
            or not math.isfinite(value)):
        expected = "an int >= 1" if integer else "a finite number > 0"
        raise ConfigError(f"bank: {name} must be {expected}, got {value!r}")


def _checked(servers: int, arrival_rate: float, service_rate: float, customers: int,
             warmup: float | None) -> tuple[float, float]:
    """Check the parameters; return ``Wq`` and the warm-up time to use."""
    _check("servers", servers, integer=True)
    _check("customers", customers, integer=True)
    _check("arrival_rate", arrival_rate, integer=False)
    _check("service_rate", service_rate, integer=False)
    analytic = erlang_c_wait(servers, arrival_rate, service_rate)
    if warmup is None:
        warmup = 3.0 * relaxation_time(servers, arrival_rate, service_rate)
    elif (isinstance(warmup, bool) or not isinstance(warmup, int | float)
          or not 0.0 <= warmup < math.inf):
        raise ConfigError(f"bank: warmup must be None or a finite number >= 0, got {warmup!r}")
    return analytic, float(warmup)


def run(seed: int = 42, servers: int = 3, arrival_rate: float = 2.7, service_rate: float = 1.0,
        customers: int = 20000, *, warmup: float | None = None,
        scenario: Scenario | dict[str, object] | str | None = None,
        monitors: str | os.PathLike[str] | None = None) -> dict[str, float]:
    """Simulate an M/M/c bank, measured from time *warmup* on, and compare with Erlang C.

    Args:
        seed: The seed of the run.
        servers: Tellers.
        arrival_rate: Customers per time unit (Poisson).
        service_rate: Services per time unit of one teller (exponential).
        customers: Customers measured: those who arrive at time *warmup* or later.
        warmup: Arrivals before this time are served but not measured. ``None``:
            three relaxation times (:func:`relaxation_time`), which removes the
            start-up bias of a bank that opens empty; ``0``: measure from the
            opening, bias included.
        scenario: Interventions on :data:`KNOBS` in virtual time (a Scenario,
            its JSON data as a study's config gives it, or an artifact's path).
        monitors: Write a monitor file here (``docs/monitors.md``): the tellers'
            utilisation and queue length from *warmup* on (series
            ``tellers.utilisation`` and ``tellers.queue``), and the measured
            waits (samples ``wait``), for ``simulacra report``.

    Returns:
        ``mean_wait`` (simulated mean time in line), ``erlang_c_wait`` (the
        analytic ``Wq``), ``relative_error`` (``|mean_wait - Wq| / Wq``),
        ``ci95_halfwidth`` (batch-means half-width of a 95% interval on
        ``mean_wait``), ``utilisation`` (time-averaged fraction of busy tellers
        from *warmup* to the end, from :meth:`Resource.statistics`), ``served``
        (customers measured) and ``measured_from`` (the warm-up
        time used: statistics start there; not ``warmup``, so that a study's table can
        hold the parameter and the KPI).

    Raises:
        ConfigError: a parameter is out of range or the queue is unstable, or
            the scenario does not fit the knobs (a ScenarioError).
    """
    analytic, warmup = _checked(servers, arrival_rate, service_rate, customers, warmup)
    sim = Sim(seed=seed)
    knobs = KnobBoard(KNOBS, sim)
    if scenario is not None:
        apply_scenario(sim, knobs, scenario if isinstance(scenario, Scenario)
                       else load_scenario(scenario))  # type: ignore[arg-type]
    bank = Resource(sim, capacity=servers, monitor="tellers" if monitors is not None else False)
    waits: list[float] = []
    busy_before: list[float] = []
    sim.spawn(_source(sim, bank, waits, knobs, arrival_rate=arrival_rate,
                      service_rate=service_rate, customers=customers, warmup=warmup))
    sim.spawn(_busy_at_warmup(sim, bank, warmup, busy_before))
    sim.run()

    end = sim.now
    busy = bank.statistics().utilisation * end * servers - busy_before[0]
    mean_wait = math.fsum(waits) / len(waits)
    if monitors is not None:
        tally = Tally(sim, "wait")
        for wait in waits:
            tally.record(wait)
        write_monitors(monitors, sim)
    return {
        "mean_wait": mean_wait,
        "erlang_c_wait": analytic,
        "relative_error": abs(mean_wait - analytic) / analytic,
        "ci95_halfwidth": _batch_means_halfwidth(waits),
        "utilisation": busy / ((end - warmup) * servers),
        "served": len(waits),
        "measured_from": warmup,
    }


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python examples/bank.py",
        description="Simulate an M/M/c bank and compare its mean wait with Erlang C.",
    )
    parser.add_argument("--seed", type=int, default=42, help="seed (of the study, with "
                        "--replications; default 42)")
    parser.add_argument("--servers", type=int, default=3, help="tellers (default 3)")
    parser.add_argument("--arrival-rate", type=float, default=2.7, help="default 2.7")
    parser.add_argument("--service-rate", type=float, default=1.0, help="default 1.0")
    parser.add_argument("--customers", type=int, default=20000,
                        help="customers measured after the warm-up (default 20000)")
    parser.add_argument("--warmup", type=float, default=None,
                        help="measure from this time on (default: three relaxation times; "
                             "0: from the opening)")
    parser.add_argument("--replications", type=int, default=1,
                        help="run an Experiment of this many replications and print the 95%% "
                             "confidence interval over them (default 1: one run)")
    parser.add_argument("--monitors", metavar="FILE", default=None,
                        help="write the tellers' utilisation and queue length over time and "
                             "the waits to this monitor file, for `simulacra report` (one run)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the simulated mean wait beside the Erlang-C value; return the exit status."""
    args = _parse(argv)
    config = {"servers": args.servers, "arrival_rate": args.arrival_rate,
              "service_rate": args.service_rate, "customers": args.customers,
              "warmup": args.warmup}
    try:
        analytic, warmup = _checked(args.servers, args.arrival_rate, args.service_rate,
                                    args.customers, args.warmup)
        if args.replications < 1:
            raise ConfigError(f"bank: replications must be an int >= 1, got {args.replications}")
        if args.monitors is not None:
            if args.replications != 1:
                raise ConfigError("bank: --monitors writes the monitors of one run; it cannot be "
                                  f"combined with --replications {args.replications}")
            if not Path(args.monitors).resolve().parent.is_dir():
                raise ConfigError(f"bank: --monitors {args.monitors}: the directory "
                                  f"{Path(args.monitors).resolve().parent} does not exist")
            config["monitors"] = args.monitors
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    load = args.arrival_rate / (args.servers * args.service_rate)
    head = (f"M/M/{args.servers} bank: arrival rate {args.arrival_rate:g}, service rate "
            f"{args.service_rate:g} (load {load:.3f}); {args.customers} customers measured "
            f"after a warm-up to t={warmup:.0f}")
    try:
        if args.replications == 1:
            kpis = run(args.seed, **config)
        else:  # a study: replications with seeds derived from the master seed
            # By file name: a function of __main__ is not importable by that name.
            study = Experiment.from_run(f"{Path(__file__).resolve()}:run", [config],
                                        master_seed=args.seed)
            results = study.run(args.replications, backend="sequential", progress=None)
    except SimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.replications == 1:
        print(f"{head}; seed {args.seed}")
        print(f"  mean_wait       {kpis['mean_wait']:.4f}  (simulated)")
        print(f"  erlang_c_wait   {kpis['erlang_c_wait']:.4f}  (Erlang C)")
        print(f"  relative_error  {kpis['relative_error']:.2%}")
        print(f"  ci95_halfwidth  {kpis['ci95_halfwidth']:.4f}  (batch means, on mean_wait)")
        print(f"  utilisation     {kpis['utilisation']:.4f}  (offered load {load:.4f})")
        print(f"  served          {int(kpis['served'])}")
        if args.monitors is not None:
            print(f"  monitors        {args.monitors}  (tellers.utilisation, tellers.queue, "
                  "wait: simulacra report)")
        return 0
    waits = mean_interval([float(r.kpis["mean_wait"]) for r in results.records])
    busy = mean_interval([float(r.kpis["utilisation"]) for r in results.records])
    inside = "inside" if waits.low <= analytic <= waits.high else "OUTSIDE"
    print(f"{head}; {args.replications} replications, master seed {args.seed}")
    print(f"  mean_wait       {waits.mean:.4f} +- {waits.halfwidth:.4f}  "
          f"(95% CI over replications: [{waits.low:.4f}, {waits.high:.4f}])")
    print(f"  erlang_c_wait   {analytic:.4f}  (Erlang C: {inside} the interval)")
    print(f"  relative_error  {abs(waits.mean - analytic) / analytic:.2%}  (of the mean)")
    print(f"  utilisation     {busy.mean:.4f} +- {busy.halfwidth:.4f}  (offered load {load:.4f})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's exit status, no traceback
        print("interrupted", file=sys.stderr)
        sys.exit(130)
