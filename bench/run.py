"""Benchmark driver: `python bench/run.py SECTION --json FILE`.

Sections: native, train, fusion, parallel, static, batching, smallgemm, auto,
roof, openmp, distributed, sparse-step, compile, targets.

`python bench/run.py all [--quick]` runs the whole suite (bench/suite.py).

Thread counts are pinned before numpy (or torch) is imported, because BLAS
reads them once at load time: every contestant then runs on one thread.
Each subcommand lives in its own module under bench/ and registers here.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for `bench.*`

from bench import (auto, batching, compile_time, distributed, fusion,  # noqa: E402
                   native, openmp, parallel, roof, smallgemm, sparse_step, static,
                   suite, targets, train)

SUBCOMMANDS = {"native": native, "train": train, "fusion": fusion, "parallel": parallel,
               "static": static, "all": suite, "batching": batching,
               "smallgemm": smallgemm, "auto": auto, "roof": roof,
               "openmp": openmp, "distributed": distributed, "sparse-step": sparse_step,
               "compile": compile_time, "targets": targets}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/run.py", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in SUBCOMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=module.__doc__.splitlines()[0],
                                            description=module.__doc__))
    args = parser.parse_args(argv)
    return SUBCOMMANDS[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
