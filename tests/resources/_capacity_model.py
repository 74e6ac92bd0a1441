"""A resource whose capacity changes mid-run: the model, its plain-Python oracle, a driver.

Used by ``test_capacity.py``, in process (against the oracle) and as a script
run once under ``SIMULACRA_KERNEL=python`` and once under ``compiled`` (the
two outputs must be equal): ``python _capacity_model.py IN.json OUT.json``.

A schedule is customers (arrival, hold, priority, patience) and capacity
changes (time, new capacity). Times are chosen so that no two things of
different kinds happen at one instant, whatever the holds: customer *i*
arrives at ``a + (1 + i)/64``, change *j* happens at ``t + (20 + j)/64`` and
customer *i* gives up waiting at ``arrival + patience + (40 + i)/64``, with
``a``, ``t``, holds and patiences whole numbers. A grant happens at an
arrival, a change or a release, so every grant and release time has the
fraction of one arrival or one change: a release never meets an arrival, a
change or a give-up. (Releases may meet each other; each grants one head, so
their order does not change who is granted when.) The oracle therefore need
not know the kernel's order within an instant; it states the rule alone:

* a request is granted at once if nobody waits and a slot is free; else it
  waits, in FIFO order (Resource) or by (priority, request time);
* a release frees its slot, and the head of the queue is granted if the
  number of users is now below the capacity;
* a capacity change never evicts a user; a rise grants heads at once while
  slots are free; a give-up removes a waiting request.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import simulacra.core
from simulacra import PreemptiveResource, PriorityResource, Resource, Sim
from simulacra.trace import Trace

KINDS = {"Resource": Resource, "PriorityResource": PriorityResource,
         "PreemptiveResource": PreemptiveResource}


@dataclass(frozen=True)
class Schedule:
    """One random model: a resource, its customers and its capacity changes."""

    kind: str
    capacity: int
    #: (arrival whole part, hold, priority, patience or None), one per customer.
    customers: tuple[tuple[int, int, int, int | None], ...]
    #: (time whole part, new capacity), applied in this order.
    changes: tuple[tuple[int, int], ...]

    def arrival(self, i: int) -> float:
        return self.customers[i][0] + (1 + i) / 64

    def give_up(self, i: int) -> float | None:
        patience = self.customers[i][3]
        return None if patience is None else self.arrival(i) + patience + (40 + i) / 64

    def change_times(self) -> list[tuple[float, int]]:
        return sorted(((t + (20 + j) / 64, c) for j, (t, c) in enumerate(self.changes)),
                      key=lambda tc: tc[0])

    def to_data(self) -> dict[str, Any]:
        return {"kind": self.kind, "capacity": self.capacity,
                "customers": [list(c) for c in self.customers],
                "changes": [list(c) for c in self.changes]}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Schedule:
        return cls(data["kind"], data["capacity"],
                   tuple((a, h, p, n) for a, h, p, n in data["customers"]),
                   tuple((t, c) for t, c in data["changes"]))


#: Per customer: (grant time or None, give-up time or None).
Outcome = dict[int, tuple[float | None, float | None]]


def oracle(schedule: Schedule) -> Outcome:
    """The rule, in plain Python: no kernel, no events, one instant at a time."""
    n = len(schedule.customers)
    arrivals = sorted((schedule.arrival(i), i) for i in range(n))
    give_ups = sorted((t, i) for i in range(n) if (t := schedule.give_up(i)) is not None)
    changes = schedule.change_times()
    releases: list[tuple[float, int]] = []
    capacity = schedule.capacity
    users: set[int] = set()
    queue: list[int] = []
    outcome: Outcome = dict.fromkeys(range(n), (None, None))

    def key(i: int) -> tuple[float, ...]:
        if schedule.kind == "Resource":
            return (schedule.arrival(i),)
        return (schedule.customers[i][2], schedule.arrival(i))

    while arrivals or give_ups or changes or releases:
        now = min(x[0][0] for x in (arrivals, give_ups, changes, releases) if x)
        while releases and releases[0][0] == now:
            users.discard(releases.pop(0)[1])
        while give_ups and give_ups[0][0] == now:
            i = give_ups.pop(0)[1]
            if i in queue:
                queue.remove(i)
                outcome[i] = (None, now)
        while changes and changes[0][0] == now:
            capacity = changes.pop(0)[1]
        while arrivals and arrivals[0][0] == now:
            queue.append(arrivals.pop(0)[1])
        queue.sort(key=key)
        while queue and len(users) < capacity:
            i = queue.pop(0)
            users.add(i)
            outcome[i] = (now, None)
            releases.append((now + schedule.customers[i][1], i))
        releases.sort()
    return outcome


def run(schedule: Schedule, *, trace: bool = False) -> dict[str, Any]:
    """Run *schedule* on the kernel this process has; the log, outcome, statistics, digest."""
    sim = Sim(seed=0, trace=trace)
    res = KINDS[schedule.kind](sim, capacity=schedule.capacity)
    log: list[tuple[float, int, str]] = []
    outcome: Outcome = dict.fromkeys(range(len(schedule.customers)), (None, None))

    def customer(sim: Sim, i: int) -> Any:
        _, hold, priority, _ = schedule.customers[i]
        yield sim.delay(schedule.arrival(i))
        req = (res.request() if type(res) is Resource
               else res.request(priority=priority, preempt=False))  # type: ignore[call-arg]
        with req:
            give_up = schedule.give_up(i)
            if give_up is None:
                yield req
            else:
                yield req | sim.delay(give_up - sim.now)
                if not req.triggered:
                    log.append((sim.now, i, "gave up"))
                    outcome[i] = (None, sim.now)
                    return
            log.append((sim.now, i, "granted"))
            outcome[i] = (sim.now, None)
            yield sim.delay(hold)
        log.append((sim.now, i, "released"))

    def controller(sim: Sim) -> Any:
        for when, capacity in schedule.change_times():
            yield sim.delay(when - sim.now)
            res.capacity = capacity
            log.append((sim.now, -1, f"capacity {capacity}: {res.count} users, "
                                     f"{len(res.queue)} waiting"))

    for i in range(len(schedule.customers)):
        sim.spawn(customer, i, name=f"customer-{i}")
    sim.spawn(controller, name="controller")
    sim.run()
    sim._check_invariants()
    return {
        "log": log,
        "outcome": outcome,
        "statistics": repr(res.statistics()),
        "digest": Trace(sim.trace_records).digest() if trace else None,
    }


def main() -> None:
    schedules = [Schedule.from_data(d) for d in json.loads(Path(sys.argv[1]).read_text())]
    runs = [run(s, trace=True) for s in schedules]
    for r in runs:
        r["outcome"] = sorted(r["outcome"].items())
    Path(sys.argv[2]).write_text(json.dumps({"kernel": simulacra.core.KERNEL, "runs": runs}))


if __name__ == "__main__":
    main()
