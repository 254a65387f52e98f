#!/usr/bin/env bash
# Issue 33's targets on a lent many-core machine, in one call of the device
# tool (bench/README.md, "A lent machine"): the machine's facts, then
# `run.py targets` at every core (about six minutes on 16), the OpenMP
# runtimes, the CPU a training call takes and where it goes
# (`bench/call_profile.py`), and a recursive batch's serial part
# (`bench/batch_layout.py`). Each step is cut off before the call's limit,
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
} 2>&1 | tee "$OUT/machine.txt" | grep -E "Model name|^CPU\(s\)|L2|L3|numpy|torch|OpenMP"

# each step's cut-off leaves the later steps their share
step() {  # seconds to keep for the steps after, log name, command...
    local keep=$1 log=$2; shift 2
    [ $(($(left) - keep)) -gt 20 ] || { echo "skipped $log: out of time"; return; }
    echo "== $log: $*" >>"$OUT/log.txt"
    timeout $(($(left) - keep)) "$@" 2>&1 | tee -a "$OUT/log.txt" | grep -v Warning
}
step 170 targets python3 bench/run.py targets --threads "$cores" --repeats 3 \
    --json "$OUT/targets.json"
step 130 openmp python3 bench/run.py openmp --threads 1 4 "$cores" --repeats 3 \
    --json "$OUT/openmp.json"
# the CPU a training call takes on every core against one, then where a
# complete-128 training call's goes by symbol on one and every core (with
# the machine's perf, else one carried in .whl/perf: `run.sh` beside it
# sets the library path for the libraries in .whl/perf/lib)
step 90 work python3 -m bench.native_scaling --threads "$cores" --mode train --work --calls 60
step 60 work_c128 python3 -m bench.native_scaling --threads "$cores" --mode train --work \
    --calls 10 --hidden 256 --workload complete-128
# what a recursive SST batch's calling thread runs alone on every core
step 45 layout python3 -m bench.batch_layout --threads "$cores" --rounds 20
perf=$(command -v perf || echo .whl/perf/run.sh)
if "$perf" stat -e cpu-clock true >/dev/null 2>&1; then
    step 30 profile_1 python3 -m bench.call_profile --perf "$perf" --mode train --threads 1 \
        --workload complete-128 --hidden 256 --seconds 5
    step 0 profile_all python3 -m bench.call_profile --perf "$perf" --mode train \
        --threads "$cores" --workload complete-128 --hidden 256 --seconds 5
else
    echo "no perf that may sample here: no profile"
fi
