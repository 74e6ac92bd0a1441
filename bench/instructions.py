"""Kernel cost against SimPy in executed instructions (valgrind callgrind), not seconds.

Wall-clock ratios on a shared 2-core machine drift by +-25% from round to round.
Instruction counts do not: callgrind counts the instructions the interpreter
executes, whatever else the machine is doing. For each model this script runs
three fresh interpreters under callgrind:

* ``none``: imports both libraries and builds nothing (the baseline);
* ``simpy``: the model on SimPy 4.1.2;
* ``simulacra``: the same model on simulacra, with the same random draws.

and reports ``(simpy - none) / (simulacra - none)``: how many times more
instructions SimPy executes for the same simulation. The models are the ones of
``bench/kernel_vs_simpy.py`` (M/M/3, Store ping-pong, processes doing timeouts),
at sizes small enough for callgrind (about 50x slower than native).

``--kernel python|compiled|both`` chooses simulacra's kernel (``SIMULACRA_KERNEL``;
by default the one ``auto`` picks) and ``--split`` adds, for the compiled kernel,
where its instructions go: the user's generator code (``PyGen_am_send``'s
inclusive count less the kernel's C methods the generators call) against the
kernel (the rest of the run loop's inclusive count).

Usage::

    python bench/instructions.py            # all models
    python bench/instructions.py --only mmc --size 5000
    python bench/instructions.py --kernel both --split

Needs valgrind (``apt-get install valgrind``). Counts vary by well under 1%
between runs (hash randomisation changes dict layouts slightly).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODEL = r'''
import random, sys
sys.path.insert(0, {src!r})
import simpy, simulacra
which, bench, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
# Every run (the baseline too) loads the same modules: the front door imports
# lazily, so touching the names here keeps their import cost out of the ratio.
simulacra.Sim, simulacra.Resource, simulacra.Store  # noqa: B018
rng = random.Random(1)

if which == "simpy":
    env = simpy.Environment()
    new_resource, new_store, delay = simpy.Resource, simpy.Store, env.timeout
    spawn, run, sim = env.process, env.run, env
elif which == "simulacra":
    sim = simulacra.Sim(seed=1)
    new_resource, new_store, delay = simulacra.Resource, simulacra.Store, sim.delay
    spawn, run, env = sim.spawn, sim.run, sim
else:
    raise SystemExit(0)

if bench == "mmc":
    res = new_resource(env, 3)
    waits = []
    def customer():
        t0 = env.now
        with res.request() as req:
            yield req
            waits.append(env.now - t0)
            yield delay(rng.expovariate(1.0))
    def source():
        for _ in range(n):
            yield delay(rng.expovariate(2.7))
            spawn(customer())
    spawn(source())
    run()
    print(sum(waits) / len(waits))
elif bench == "pingpong":
    a, b = new_store(env), new_store(env)
    def ping():
        for i in range(n):
            yield a.put(i)
            yield b.get()
    def pong():
        for _ in range(n):
            item = yield a.get()
            yield b.put(item)
    spawn(ping()); spawn(pong()); run()
elif bench == "timeouts":
    def worker():
        for _ in range(10):
            yield delay(rng.expovariate(1.0))
    for _ in range(n // 10):
        spawn(worker())
    run()
'''

SIZES = {"mmc": 5000, "pingpong": 10000, "timeouts": 20000}
NAMES = {
    "mmc": "M/M/3 customers",
    "pingpong": "Store ping-pong round trips",
    "timeouts": "timeouts (10 per process, random delays)",
}


def count(script: Path, which: str, bench: str, size: int, workdir: Path, *,
          kernel: str | None = None) -> int:
    """Instructions executed by one interpreter run under callgrind."""
    out = workdir / f"cg.{which}.{bench}.{kernel}"
    env = dict(os.environ, PYTHONHASHSEED="0")
    if kernel is not None:
        env["SIMULACRA_KERNEL"] = kernel
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",  # noqa: S607
         sys.executable, str(script), which, bench, str(size)],
        capture_output=True, text=True, env=env, check=True,
    )
    match = re.search(r"Collected : (\d+)", proc.stderr)
    if match is None:
        raise SystemExit(f"no callgrind total for {which}/{bench}:\n{proc.stderr[-2000:]}")
    return int(match.group(1))


#: The compiled kernel's C methods that user code calls (their cost is the kernel's).
CALLED_FROM_USER = ("sim_delay", "sim_spawn", "event_exit", "event_succeed", "resource_request",
                    "store_put", "store_get")


def split(cg_file: Path) -> tuple[int, int, int]:
    """(run loop total, user generator code, kernel) of a compiled-kernel callgrind run."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",  # noqa: S607
                           str(cg_file)], capture_output=True, text=True, check=True).stdout
    inclusive: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+) .*?:(\w+) \[", line)
        if match:
            inclusive.setdefault(match.group(2), int(match.group(1).replace(",", "")))
    total = inclusive.get("run_fifo", 0)
    user = inclusive.get("PyGen_am_send", 0) - sum(inclusive.get(f, 0) for f in CALLED_FROM_USER)
    return total, user, total - user


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(SIZES))
    parser.add_argument("--size", type=int, default=None, help="override the model size")
    parser.add_argument("--kernel", choices=("python", "compiled", "both"),
                        help="simulacra's kernel (default: what SIMULACRA_KERNEL=auto picks)")
    parser.add_argument("--split", action="store_true",
                        help="the compiled kernel's user-code / kernel split")
    args = parser.parse_args()
    kernels: list[str | None] = (
        [None] if args.kernel is None
        else ["python", "compiled"] if args.kernel == "both" else [args.kernel]
    )
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        script = workdir / "model.py"
        script.write_text(MODEL.format(src=str(ROOT / "src")))
        # Warm the bytecode cache so no run pays for compiling simulacra.
        os.environ["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, str(script), "none", "mmc", "1"], check=True)
        print(f"{'model':42s} {'size':>7s} {'kernel':>8s} {'SimPy Ir':>14s} "
              f"{'simulacra Ir':>14s} {'ratio':>6s}")
        splits = []
        for bench in args.only or sorted(SIZES):
            size = args.size or SIZES[bench]
            simpy_ir = None
            for kernel in kernels:
                base = count(script, "none", bench, size, workdir, kernel=kernel)
                if simpy_ir is None:
                    simpy_ir = count(script, "simpy", bench, size, workdir, kernel=kernel) - base
                ours_ir = count(script, "simulacra", bench, size, workdir, kernel=kernel) - base
                print(f"{NAMES[bench]:42s} {size:7d} {kernel or 'auto':>8s} {simpy_ir:14,d} "
                      f"{ours_ir:14,d} {simpy_ir / ours_ir:6.2f}")
                if args.split and kernel == "compiled":
                    splits.append((bench, *split(workdir / f"cg.simulacra.{bench}.{kernel}")))
        for bench, total, user, kernel_ir in splits:
            print(f"split {bench} (compiled): run loop {total:,d} Ir = user generator code "
                  f"{user:,d} ({user / total:.0%}) + kernel {kernel_ir:,d} "
                  f"({kernel_ir / total:.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
