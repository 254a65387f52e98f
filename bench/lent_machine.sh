#!/usr/bin/env bash
# Issue 33's targets on a lent many-core machine, in one call of the device
# tool (bench/README.md, "A lent machine"): the machine's facts (with the
# cores' cache-line round trips, `bench/core_latency.py`, and each core's
# rate, `bench/core_rates.py`), then
# `run.py targets` at every core (over six minutes on 16: it was cut off
# before its last rows when it left the later steps 130 s, which they
# finished in under a minute), the work an SST frontier call does on every
# core (`bench/native_scaling.py --work`), a team of every core against its
# groups of trees (`bench/team_groups.py`), an SST batch over its deepest
# tree on one core (`bench/deepest_tree.py`), one core's rate on each
# product of the roof's cell, the calling thread's Python
# (`bench/cold_python.py`) and where the CPU goes
# (`bench/call_profile.py`). Each step is cut off before the call's limit,
# so what it wrote under $OUT comes back (one log and each step's JSON).
#
# The call carries `.whl`: xdsl's wheels (the machine has numpy, llvmlite,
# tqdm and torch and cannot download), optionally `lib/` with libomp.so.5
# and libiomp5.so (OpenMP runtimes; libgomp otherwise) and `sst/dev.txt`
# (synthetic SST-like trees otherwise), and `perf/` where the machine has no
# perf. $1: seconds the whole script may take (570: a call's timeout_s 600).
set -u
budget=${1:-570}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
[ -d .whl/lib ] && export LD_LIBRARY_PATH=$PWD/.whl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d .whl/sst ] && export RECIR_SST_DIR=$PWD/.whl/sst
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE  # the peers at their own best kernels
cores=$(nproc)

{
    lscpu
    python3 -c "import numpy, llvmlite; print('numpy', numpy.__version__, 'llvmlite',
llvmlite.__version__)"
    python3 -c "import torch; print('torch', torch.__version__)"
    python3 -c "from recir.backend import engine; print('OpenMP:', engine.openmp())"
    python3 -m bench.core_latency  # core 0's cache-line round trip to each other core
    python3 -m bench.core_rates --seconds 0.6  # each core's SGEMM rate, alone and all busy
} 2>&1 | tee "$OUT/machine.txt" | grep -E "Model name|^CPU\(s\)|L2|L3|numpy|torch|OpenMP|round|^alone|^all busy"

# each step's cut-off leaves the later steps their share
step() {  # seconds to keep for the steps after, log name, command...
    local keep=$1 log=$2; shift 2
    [ $(($(left) - keep)) -gt 20 ] || { echo "skipped $log: out of time"; return; }
    echo "== $log ($(left) s left): $*" >>"$OUT/log.txt"
    timeout $(($(left) - keep)) "$@" 2>&1 | tee -a "$OUT/log.txt" | grep -v Warning
}
step 110 targets python3 bench/run.py targets --threads "$cores" --repeats 3 \
    --json "$OUT/targets.json"
# the work a frontier call does on every core against one (workers asleep
# once idle), and how evenly the team's threads share it
step 88 work_sst python3 -m bench.native_scaling --threads "$cores" --work --mode infer \
    --calls 150
# where a team of every core loses to its groups of SST trees: smaller
# products, busy cores (the slowest process), the team's own
step 66 team_groups python3 -m bench.team_groups --mode infer --threads "$cores" \
    --rounds 5 --calls 5
# how far SST batches scale while each tree stays on one thread: the whole
# batch on one core over its deepest tree alone
step 52 deepest_tree python3 -m bench.deepest_tree --mode infer --rounds 3 --calls 5
# one core's rate on each product of a complete-128 call (the roof rows)
step 42 roof_rows python3 bench/run.py roof --threads 1 --hidden 256 \
    --rows 25 100 400 1600 --repeats 2 --json "$OUT/roof_rows.json"
# what the calling thread runs alone: a frontier call's Python warm and on
# caches left cold
step 32 cold_python python3 -m bench.cold_python --mode infer --sweep 0 64 --calls 40
# where the CPU goes, by symbol (the machine's perf, else one carried in
# .whl/perf: `run.sh` beside it sets the library path for .whl/perf/lib):
# SST inference batches on every core, frontier and recursive (a
# complete-128 call on one core read alike at two lends: its step left out)
perf=$(command -v perf || echo .whl/perf/run.sh)
if "$perf" stat -e cpu-clock true >/dev/null 2>&1; then
    step 14 profile_frontier python3 -m bench.call_profile --perf "$perf" --mode infer \
        --threads "$cores" --batching frontier --workload sst --hidden 150 --seconds 4
    step 0 profile_recursive python3 -m bench.call_profile --perf "$perf" --mode infer \
        --threads "$cores" --batching recursive --workload sst --hidden 150 --seconds 4
else
    echo "no perf that may sample here: no profile"
fi
