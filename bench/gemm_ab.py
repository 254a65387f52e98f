"""recir's GEMM kernels of two commits, side by side in one process, and NumPy.

`python bench/gemm_ab.py --base REV nt:1600x1280x512 ...` builds the kernels
of `recir/passes/gemm_kernels.py` (and its sizes, `gemm_target.py`) as they
are at git revision REV and as they are in the working tree, and times each
shape with both and with NumPy's sgemm, interleaved, keeping each one's best
time, in CPU time of the thread (`time.thread_time`): on a host shared with
other jobs only times taken side by side compare, and a wall clock counts
the time the other jobs hold the core.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.gemm_cell import calls_for, seconds  # noqa: E402
from bench.roof import numpy_product, operands  # noqa: E402

MODULES = ("gemm_target", "gemm_packing", "gemm_kernels")


def modules_at(revision: str, folder: str) -> dict:
    """The GEMM generator's modules as they are at `revision`, loaded under
    their own names (each imports its siblings of that revision)."""
    saved = {m: sys.modules.get(f"recir.passes.{m}") for m in MODULES}
    loaded = {}
    try:
        for name in MODULES:
            text = subprocess.run(["git", "-C", str(ROOT), "show",
                                   f"{revision}:recir/passes/{name}.py"],
                                  capture_output=True, text=True)
            if text.returncode:
                continue  # a module that revision does not have
            path = Path(folder) / f"{name}.py"
            path.write_text(text.stdout)
            spec = importlib.util.spec_from_file_location(f"recir.passes.{name}", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[f"recir.passes.{name}"] = module
            spec.loader.exec_module(module)
            loaded[name] = module
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(f"recir.passes.{name}", None)
            else:
                sys.modules[f"recir.passes.{name}"] = module
    return loaded


def kernel(modules: dict, layout: str, tag: str):
    from recir.backend.engine import cached_engine
    from recir.backend.kernels.compiled_gemm import PROTOTYPES
    from recir.backend.llvm_convert import to_llvm_ir

    target = modules["gemm_target"].host_target()
    engine = cached_engine(f"{tag} {target!r}", f"recir_gemm_{layout}", lambda: to_llvm_ir(
        modules["gemm_kernels"].gemm_module([layout], target=target)))
    fn = PROTOTYPES[layout](engine.address(f"recir_gemm_{layout}"))
    fn.engine = engine
    return fn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", required=True, help="git revision of the other kernels")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("shapes", nargs="+", help="layout:MxNxK, e.g. nt:1600x1280x512")
    args = parser.parse_args()
    from recir.passes import gemm_kernels, gemm_target

    with tempfile.TemporaryDirectory() as folder:
        base = modules_at(args.base, folder)
        here = {"gemm_target": gemm_target, "gemm_kernels": gemm_kernels}
        print(f"{'shape':22} {'base':>7} {'here':>7} {'numpy':>7} {'here/base':>9} "
              f"{'here/numpy':>10}")
        for spec in args.shapes:
            layout, dims = spec.split(":")
            m, n, k = map(int, dims.split("x"))
            a, b = operands(layout, m, n, k)
            c = np.zeros((m, n), np.float32)
            add = int(layout == "tn")
            fns = [lambda f=kernel(mods, layout, tag): f(
                m, n, k, a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1], c.ctypes.data,
                n, add) for mods, tag in ((base, f"base {args.base}"), (here, "here"))]
            fns.append(numpy_product(layout, a, b))
            calls = [calls_for(f) for f in fns]
            best = [float("inf")] * 3
            for _ in range(args.repeats):
                for i, (f, count) in enumerate(zip(fns, calls, strict=True)):
                    best[i] = min(best[i], seconds(f, count))
            rates = [2.0 * m * n * k / t / 1e9 for t in best]
            print(f"{spec:22} {rates[0]:7.1f} {rates[1]:7.1f} {rates[2]:7.1f} "
                  f"{rates[1] / rates[0]:9.3f} {rates[1] / rates[2]:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
