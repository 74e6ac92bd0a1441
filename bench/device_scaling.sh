#!/usr/bin/env bash
# The many-cores figures of issues 26 and 27 in one call on a lent 16-core machine.
#
# The device machine (see ../.library/device/README.md) has Python 3.12 with numpy, rich,
# pyyaml and msgpack, no internet, and no pydantic or greenlet. So the wheels are built
# here, carried, and installed there without the index:
#
#   here:   bash bench/device_scaling.sh --wheels      # .device/wheels: simulacra (cp312,
#                                                      # compiled kernel) and what it needs
#   there:  run(command="bash bench/device_scaling.sh", carry=[".device"], timeout_s=560)
#
# It prints the machine, then runs, each under its own time limit, and writes each output
# to $OUT (it comes back) as well as to stdout:
#   scale.txt   bench/scale.py: Experiment 32 x 0.2 s and the 16 heavy cells, 1..16 workers
#   phold.txt   bench/phold.py: PHOLD, 16,384 LPs a core, 2..16 shards, 4 scenarios
#   shards.txt  bench/society_shards.py: a sharded society, 1..16 shards
# SIMULACRA_DEVICE_QUICK=1 makes each short (a rehearsal on this machine).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "${1:-}" = "--wheels" ]; then
    py312=""
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python "$(command -v python3.12 || true)"; do
        if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' \
            >/dev/null 2>&1; then
            py312="$candidate"
            break
        fi
    done
    if [ -z "$py312" ]; then
        echo "error: --wheels needs a Python 3.12 (the device's), and none was found" >&2
        exit 2
    fi
    rm -rf .device/wheels && mkdir -p .device/wheels
    "$py312" -m pip wheel -q --no-deps -w .device/wheels . || exit 1
    "$py312" -m pip download -q -d .device/wheels --only-binary=:all: --python-version 3.12 \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 \
        pydantic pydantic-core annotated-types typing-inspection typing-extensions greenlet \
        msgpack pyyaml rich || exit 1
    ls .device/wheels
    du -sh .device/wheels
    exit 0
fi

OUT="${OUT:-bench/out/device}"
mkdir -p "$OUT"
if ! ls .device/wheels/simulacra-*.whl >/dev/null 2>&1; then
    echo "error: no .device/wheels/simulacra-*.whl: run 'bash bench/device_scaling.sh --wheels' here and carry .device" >&2
    exit 2
fi
site="$(mktemp -d)"
python3 -m pip install -q --no-index --no-deps --target "$site" .device/wheels/*.whl || exit 1
export PYTHONPATH="$site"
export PYTHONDONTWRITEBYTECODE=1

{
    date -u '+%Y-%m-%d %H:%M UTC'
    echo "cpus: $(nproc); $(python3 --version); $(uname -m)"
    grep -m1 'model name' /proc/cpuinfo || true
    python3 -c 'import simulacra, simulacra.core as c; print("simulacra", simulacra.__file__, "kernel", c.KERNEL)'
    uptime
} 2>&1 | tee "$OUT/machine.txt"

if [ "${SIMULACRA_DEVICE_QUICK:-0}" = "1" ]; then
    workers="1,2"; shards="2"
    scale_args=(--workers "$workers" --quick)
    phold_args=(--shards "$shards" --quick --check-trace)
    society_args=(--agents 40 --steps 4 --think-us 500 --shards "1,$shards" --rounds 1)
else
    n="$(nproc)"
    workers="1,2,4,8,16"; shards="2,4,8,16"
    [ "$n" -lt 16 ] && echo "note: $n CPUs, fewer than the 16 the tables ask for"
    scale_args=(--workers "$workers" --rounds 1)
    phold_args=(--shards "$shards" --rounds 1 --check-trace)
    society_args=(--agents 400 --steps 10 --think-us 2000 --shards "1,$shards" --rounds 1)
fi

status=0
run() {  # run NAME SECONDS CMD...: its output to $OUT/NAME.txt and here
    local name="$1" limit="$2"
    shift 2
    echo "== $name: $*"
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.txt"
    local rc="${PIPESTATUS[0]}"
    echo "== $name: exit $rc" | tee -a "$OUT/$name.txt"
    [ "$rc" -eq 0 ] || status=1
}
run scale 170 python3 bench/scale.py "${scale_args[@]}"
run phold 230 python3 bench/phold.py "${phold_args[@]}"
run shards 130 python3 bench/society_shards.py "${society_args[@]}"
exit "$status"
