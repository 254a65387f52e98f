"""The calling thread's Python in a frontier call, on caches the height loops left cold.

A frontier call runs Python between its native phases: the inputs' layout,
then the expansion, the height order and the height loops, each a native
call, then the outputs split per element. The loops' traffic (megabytes of
rows and weights) pushes that Python's code and objects out of the caches,
so in a real run each step costs several times its warm time. Here the
height loops are replaced by a read of an N MiB array, which leaves the
caches as such traffic would at no cost of its own beyond the read; the
other phases run natively as usual. Where the numbering call runs a
`@post`'s or `_fwd`'s loop (`kernels/height_call`, and a gradient's `_bwd`
after it), it calls a function that returns at once in their place, and
the read follows that call. Each
segment of Python between two native phases is timed with the clock, per
call, for each N (a fraction of a MiB too):

    .venv/bin/python -m bench.cold_python --mode train --sweep 0 64

N = 0 is the warm cost; N below 0 (`--sweep -1`, the column `loops`)
runs the loops themselves, what a user's call pays. Segments are named by
the phases around them
(`layout`: the inputs laid out; `number`: the expansion, the height order
and the height loops in one native call; `loop`: the forward's loop where
Python calls it, and `bwd`: a gradient's backward loop where Python calls it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.batching import keep_freed_memory, make_params, recir_frontier, workload
from xdsl.dialects import llvm
from xdsl.dialects.builtin import ModuleOp

from recir.backend import frontier_inputs, native_loops, native_schedule
from recir.backend.engine import cached_engine
from recir.backend.kernels import height_call, numbering
from recir.backend.llvm_convert import to_llvm_ir
from recir.passes.llvm_functions import lower_to_llvm, new_function
from recir.passes.loop_builder import PTR

Marks = list[tuple[str, float]]


def marked(marks: Marks, name: str, inner: Callable[..., Any]) -> Callable[..., None]:
    """`inner` with a mark before and after it."""
    def call(*args: Any) -> None:
        marks.append((f"{name}>", time.perf_counter()))
        inner(*args)
        marks.append((f"<{name}", time.perf_counter()))
    return call


def made_while(classes: tuple[type, ...], make: Callable[[], Any]) -> tuple[Any, list[Any]]:
    """What `make` returns, and the instances of `classes` made meanwhile."""
    inits = [cls.__init__ for cls in classes]
    found: list[Any] = []

    def noted(init: Callable[..., None]) -> Callable[..., None]:
        def call(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            found.append(self)
        return call

    for cls, init in zip(classes, inits, strict=True):
        cls.__init__ = noted(init)  # type: ignore[misc]
    try:
        return make(), found
    finally:
        for cls, init in zip(classes, inits, strict=True):
            cls.__init__ = init  # type: ignore[misc]


def instrument(make: Callable[[], Callable[[Any], Any]], batch: Any, marks: Marks,
               swept: list[np.ndarray]) -> tuple[Callable[[Any], Any], Callable[[float], None]]:
    """The function `make` returns (its loops are made by the time its first
    call returns) and the setter of the height loops' sweep size in MiB,
    each loop's call then marked; the numbering call reads `swept[0]`
    after it (where it runs the loop, `kernels/height_call`)."""
    def first() -> Callable[[Any], Any]:
        run = make()
        run(batch)
        return run

    run, found = made_while((native_loops.HeightLoop,), first)
    loops = [x for x in found if isinstance(x, native_loops.HeightLoop)]
    own = [loop.function for loop in loops]

    def sweep(mib: float) -> None:  # (below 0: the loops themselves)
        swept[:] = [np.ones(int(max(mib, 0) * (1 << 18)), np.float32)]
        for loop, function in zip(loops, own, strict=True):
            loop.function = marked(marks, "bwd" if loop.spec.reverse else "loop",
                                   function if mib < 0 else lambda *_: swept[0].sum())
    return run, sweep


def measure(mode: str, sweeps: list[float], calls: int, threads: int,
            results: list[Any] | None = None) -> dict[float, dict]:
    """Per sweep size, each segment's median seconds a call (`results`:
    each size's last call's outputs appended)."""
    keep_freed_memory()
    trees, vocab, _ = workload("sst", 25)
    batches = [trees[k:k + 25] for k in range(0, 100, 25)]
    marks: Marks = []
    swept = [np.ones(0, np.float32)]
    run, sweep = instrument(lambda: recir_frontier(make_params(150, vocab), mode, threads),
                            batches[0], marks, swept)
    layout = frontier_inputs.InputLayout.__call__

    def laid_out(self: Any, *args: Any) -> Any:
        found = layout(self, *args)
        marks.append(("<layout", time.perf_counter()))
        return found

    kernel = numbering.numbering_kernel()
    number = marked(marks, "number", lambda *call: (kernel(*call), swept[0].sum()))
    made, numbered, now = height_call.HeightCall.__init__, [], [0.0]

    def loop_of(call: Any) -> int:  # the numbering call's loop at the sweep `now`
        return call.loop.address if now[0] < 0 else NOTHING.address("recir_nothing")

    def at_sweep(self: Any, *args: Any, **kwargs: Any) -> None:  # a call made later too
        made(self, *args, **kwargs)
        numbered.append(self)
        self.plan[height_call.LOOP] = loop_of(self)

    def sweep_all(mib: float) -> None:  # the numbering call's loops too, where below 0
        sweep(mib)
        now[0] = mib
        for call in numbered:
            call.plan[height_call.LOOP] = loop_of(call)

    frontier_inputs.InputLayout.__call__ = laid_out  # type: ignore[method-assign]
    native_schedule.numbering_kernel = lambda folder=None: number  # type: ignore[attr-defined]
    height_call.HeightCall.__init__ = at_sweep  # type: ignore[method-assign]
    try:
        return timed(run, batches, sweep_all, marks, sweeps, calls, results)
    finally:
        frontier_inputs.InputLayout.__call__ = layout  # type: ignore[method-assign]
        native_schedule.numbering_kernel = numbering.numbering_kernel  # type: ignore[attr-defined]
        height_call.HeightCall.__init__ = made  # type: ignore[method-assign]


def nothing() -> Any:
    """An engine with `recir_nothing(ctx, plan)`, which returns at once: the
    loop the numbering call runs, in place of the height loop's."""
    function, b, _ = new_function("recir_nothing", [PTR, PTR], private=False)
    b.op(llvm.ReturnOp())
    return cached_engine("cold_python's loop", "recir_nothing",
                         lambda: to_llvm_ir(ModuleOp([lower_to_llvm(function)])))


NOTHING = nothing()


def timed(run: Callable[[Any], Any], batches: list[Any], sweep: Callable[[float], None],
          marks: Marks, sweeps: list[float], calls: int, results: list[Any] | None = None
          ) -> dict[float, dict]:
    found = {}
    for mib in sweeps:
        sweep(mib)
        segments: dict[str, list[float]] = defaultdict(list)
        for count in range(calls + 4):  # the first round warms up
            batch = batches[count % len(batches)]
            marks[:] = [("start", time.perf_counter())]
            out = run(batch)
            marks.append(("end", time.perf_counter()))
            if count >= 4:
                for (first, at), (then, until) in zip(marks, marks[1:]):
                    if not first.endswith(">"):  # not a native call's own time
                        segments[f"{first.strip('<>')} -> {then.strip('<>')}"].append(
                            until - at)
        found[mib] = {k: statistics.median(v) for k, v in segments.items()}
        if results is not None:
            results.append(out)
    return found


def report(found: dict[int, dict], mode: str) -> str:
    names = list(next(iter(found.values())))
    lines = [f"SST b25 h=150 {mode}, us a call of Python between native phases",
             f"{'segment':18s}" + "".join(
                 f"{f'{mib} MiB' if mib >= 0 else 'loops':>10s}" for mib in found)]
    for name in [*names, "total"]:
        row = [sum(f.values()) if name == "total" else f[name] for f in found.values()]
        lines.append(f"{name:18s}" + "".join(f"{1e6 * s:10.1f}" for s in row))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["infer", "train"], default="infer")
    parser.add_argument("--sweep", type=float, nargs="+", default=[0, 64],
                        help="MiB the height loops read in place of their work (below 0: "
                        "the loops themselves run)")
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    print(report(measure(args.mode, args.sweep, args.calls, args.threads), args.mode))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
