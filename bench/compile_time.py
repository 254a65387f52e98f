"""Compile time of TreeLSTM inference and gradient, stage by stage.

A cold compile (empty object cache) of `recir.compile(model)` and
`recir.value_and_grad(model)` at each thread count, split into its stages:
tracing, gradient synthesis, each xDSL pass, the conversion to LLVM IR text,
LLVM's parse, verify, optimisation and code generation, and loading; then
the warm path (an object-cache hit), and the same end to end with
`batching="frontier"` (its matrix kernels are compiled once per host and
cached apart from the model's objects, so they are not part of a cold
compile; the first frontier compile in the process pays them where they are
not cached yet, shown apart). Stages are CPU seconds of this process
(`time.process_time`), the minimum over `--repeats` runs, so that other
jobs on a shared machine weigh less; the end-to-end rows are wall seconds
until both functions have their code, also minima. With `--levels 3 2` the LLVM rows are repeated at O2 on the
same IR, and `--llvm-passes N` prints LLVM's N costliest passes; `--speed`
instead times the code each level gives.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from typing import Any

import numpy as np

from bench.common import fmt, machine_info, print_table, write_json

LLVM_STAGES = ("llvm-parse", "llvm-verify", "llvm-optimize", "llvm-codegen")
NOT_CPU = ("llvm-wall", "llvm-parts")  # LLVM's wall seconds and the parts it ran in


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="write all results here")
    parser.add_argument("--hidden", type=int, default=150, help="TreeLSTM h (= embed)")
    parser.add_argument("--threads", type=int, nargs="+",
                        help="thread counts (default: 1 and every core)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (minimum)")
    parser.add_argument("--levels", type=int, nargs="+", default=[3],
                        help="LLVM optimisation levels to time on the same IR")
    parser.add_argument("--llvm-passes", type=int, default=0, metavar="N",
                        help="print the N costliest LLVM passes of each module")
    parser.add_argument("--speed", type=int, nargs="*", metavar="H",
                        help="instead: time the code each of --levels gives, at these hidden "
                             "sizes (default 150 256), one thread, 40 trees, alternating")


def model(hidden: int) -> tuple[Any, Any]:
    """The traced TreeLSTM and a thunk that traces it again."""
    from recir.models import tree_lstm

    params = tree_lstm.init_params(np.random.default_rng(0), hidden=hidden, embed=hidden,
                                   vocab=1000)
    return tree_lstm.trace_model(params), lambda: tree_lstm.trace_model(params)


def cold_stages(traced: Any, threads: int, cache: str) -> dict[str, dict[str, float]]:
    """Per-stage CPU seconds of one cold compile of inference and gradient."""
    from recir.gradients import GradFunction
    from recir.pipeline import compile_module

    inference: dict[str, float] = {}
    compile_module(traced.module, traced.entry, list(traced.params.values()),
                   cache_dir=cache, threads=threads, timings=inference)
    gradient: dict[str, float] = {}
    start = time.process_time()
    grad = GradFunction(traced, engine="interpret")  # the synthesis alone
    gradient["gradient-synthesis"] = time.process_time() - start
    compile_module(grad.module, grad.entry, cache_dir=cache, threads=threads, timings=gradient)
    return {"inference": inference, "gradient": gradient}


def end_to_end(traced: Any, threads: int, cache: str) -> tuple[float, float]:
    """Wall and CPU seconds of `recir.compile` plus `recir.value_and_grad`
    until both have their code (LLVM compiles the first while the second's
    passes run)."""
    import recir

    wall, cpu = time.perf_counter(), time.process_time()
    inference = recir.compile(traced, cache_dir=cache, threads=threads)
    recir.value_and_grad(traced, cache_dir=cache, threads=threads).wait()
    inference.wait()
    return time.perf_counter() - wall, time.process_time() - cpu


def frontier_end_to_end(traced: Any, threads: int, cache: str) -> tuple[float, float]:
    """Wall and CPU seconds of `recir.compile` plus `recir.value_and_grad`,
    both with `batching="frontier"`."""
    import recir

    wall, cpu = time.perf_counter(), time.process_time()
    inference = recir.compile(traced, batching="frontier", cache_dir=cache, threads=threads)
    recir.value_and_grad(traced, batching="frontier", cache_dir=cache, threads=threads).wait()
    inference.wait()
    return time.perf_counter() - wall, time.process_time() - cpu


def llvm_levels(traced: Any, threads: int, levels: list[int], passes: int
                ) -> dict[str, dict[int, dict[str, float]]]:
    """LLVM's stages on the same IR at each optimisation level."""
    from recir.gradients import GradFunction
    from recir.backend.engine import compile_object
    from recir.pipeline import native_ir

    grad = GradFunction(traced, engine="interpret")
    out: dict[str, dict[int, dict[str, float]]] = {}
    for name, module, entry in (("inference", traced.module, traced.entry),
                                ("gradient", grad.module, grad.entry)):
        text = native_ir(module, entry, threads=threads)[0]
        out[name] = {}
        for level in levels:
            out[name][level] = {"ir_lines": text.count("\n"),
                                "functions": text.count("\ndefine ")}
            times: dict[str, float] = {}
            compile_object(text, times, level)
            out[name][level].update(times)
        if passes:
            print(f"\nLLVM passes, {name}, {threads} thread(s), O{levels[0]}:")
            print(pass_report(text, levels[0], passes))
            costs = per_function(text, levels[0])
            print(f"LLVM optimize + codegen of each function alone, CPU ms "
                  f"(sum {1e3 * sum(costs.values()):.0f}):")
            for function, seconds in sorted(costs.items(), key=lambda kv: -kv[1])[:passes]:
                print(f"  {1e3 * seconds:8.1f}  {function}")
    return out


DEFINE = re.compile(r'^define (?:internal )?(.*?@"([^"]+)"\(.*?\))[^\n]*\n\{\n.*?^\}\n',
                    re.S | re.M)


def per_function(text: str, level: int) -> dict[str, float]:
    """CPU seconds of LLVM's optimisation and code generation of each
    function alone: the module with only that function's body, external,
    the others declared (so nothing is inlined across them)."""
    from recir.backend.engine import compile_object

    bodies = {m.group(2): m for m in DEFINE.finditer(text)}
    out = {}
    for name, own in bodies.items():
        parts, at = [], 0
        for other in bodies.values():
            parts.append(text[at:other.start()])
            # kept external, so that nothing removes it for want of callers
            parts.append(other.group(0).replace("define internal ", "define ", 1)
                         if other is own else f"declare {other.group(1)}\n")
            at = other.end()
        parts.append(text[at:])
        times: dict[str, float] = {}
        compile_object("".join(parts), times, level)
        out[name] = times["llvm-optimize"] + times["llvm-codegen"]
    return out


def pass_report(text: str, level: int, top: int) -> str:
    """LLVM's own timing of its optimisation passes, the `top` costliest."""
    import llvmlite.binding as llvm

    from recir.backend.engine import target_machine

    machine = target_machine()
    module = llvm.parse_assembly(text)
    module.triple, module.data_layout = machine.triple, str(machine.target_data)
    options = llvm.create_pipeline_tuning_options(speed_level=level)
    options.loop_vectorization = options.slp_vectorization = options.loop_unrolling = True
    builder = llvm.create_pass_builder(machine, options)
    builder.start_pass_timing()
    builder.getModulePassManager().run(module, builder)
    report = builder.finish_pass_timing()
    rows: dict[str, str] = {}  # LLVM reports each pass in two tables
    for line in report.splitlines():
        if re.match(r"\s+[\d.]+ \(", line) and "Total" not in line:
            rows.setdefault(line.split()[-1], line)
    return "\n".join(list(rows.values())[:top])


def minima(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: min(r.get(k, float("inf")) for r in runs) for k in runs[0]}


def level_speed(hidden: int, levels: list[int], rounds: int = 7) -> dict[int, dict[str, float]]:
    """Seconds for 40 synthetic trees, inference and gradient, of the code
    each LLVM level gives (one thread; levels alternate, minimum of the
    rounds), results checked equal across levels."""
    import recir
    from bench.native import make_params
    from recir.backend import llvm_compile
    from recir.data import make_treebank
    from recir.models import tree_lstm

    model = tree_lstm.trace_model(make_params(hidden, 1000))
    trees = [(t.left, t.right, t.word, t.label, t.root)
             for t in make_treebank(40, seed=0, vocab_size=1000)]
    compiled = {}
    default = llvm_compile.OPT_LEVEL
    try:
        for level in levels:
            llvm_compile.OPT_LEVEL = level
            cache = tempfile.mkdtemp(prefix="recir-level-")
            compiled[level] = (recir.compile(model, cache_dir=cache, threads=1).wait(),
                               recir.value_and_grad(model, cache_dir=cache, threads=1).wait())
    finally:
        llvm_compile.OPT_LEVEL = default
    first = compiled[levels[0]][0](*trees[0])[0]
    for inference, _ in compiled.values():
        np.testing.assert_allclose(inference(*trees[0])[0], first, rtol=1e-4, atol=1e-5)
    best = {level: {"inference": float("inf"), "gradient": float("inf")} for level in levels}
    for _ in range(rounds):
        for level, (inference, gradient) in compiled.items():
            for name, fn in (("inference", inference), ("gradient", gradient)):
                start = time.perf_counter()
                for tree in trees:
                    fn(*tree)
                best[level][name] = min(best[level][name], time.perf_counter() - start)
    return best


def run_speed(args: argparse.Namespace) -> int:
    results = {}
    for hidden in args.speed or [150, 256]:
        best = level_speed(hidden, args.levels)
        results[hidden] = best
        base = best[args.levels[0]]
        print_table(f"TreeLSTM h={hidden}, 40 trees, one thread, ms (minimum of 7 rounds)",
                    ["level", "inference", "gradient", "inference / first", "gradient / first"],
                    [[f"O{level}", fmt(1e3 * b["inference"]), fmt(1e3 * b["gradient"]),
                      fmt(b["inference"] / base["inference"], 2),
                      fmt(b["gradient"] / base["gradient"], 2)] for level, b in best.items()])
    if args.json:
        write_json(args.json, {"machine": machine_info(), "speed": results})
    return 0


def run(args: argparse.Namespace) -> int:
    from recir.pipeline import compile_module, gradient_passes

    if args.speed is not None:
        return run_speed(args)

    threads_list = args.threads or sorted({1, os.cpu_count() or 1})
    report: dict[str, Any] = {"machine": machine_info(), "hidden": args.hidden,
                              "clock": "process_time (CPU s), minimum of runs",
                              "threads": {}}
    start = time.process_time()
    traced, retrace = model(args.hidden)
    first_trace = time.process_time() - start
    trace_s = min(_timed(retrace) for _ in range(args.repeats))
    with tempfile.TemporaryDirectory(prefix="recir-compile-") as scratch:
        # what the first compile of a process pays besides its own work
        wall0, cpu0 = end_to_end(traced, threads_list[0], f"{scratch}/first")
        report["first_in_process"] = {"wall_s": wall0, "cpu_s": cpu0,
                                      "threads": threads_list[0]}
        wall0, cpu0 = frontier_end_to_end(traced, threads_list[0], f"{scratch}/frontier-first")
        report["frontier_first_in_process"] = {"wall_s": wall0, "cpu_s": cpu0}
        for threads in threads_list:
            stages, walls, warm_walls, warm_stages, warm_grads = [], [], [], [], []
            for k in range(args.repeats):
                stages.append(cold_stages(traced, threads, f"{scratch}/s{threads}-{k}"))
                cache = f"{scratch}/e{threads}-{k}"
                walls.append(end_to_end(traced, threads, cache))
                warm_walls.append(end_to_end(traced, threads, cache))
                warm: dict[str, float] = {}
                start = time.process_time()
                retrace()
                warm["trace"] = time.process_time() - start
                compile_module(traced.module, traced.entry, list(traced.params.values()),
                               cache_dir=cache, threads=threads, timings=warm)
                warm_stages.append(warm)
                warm_grad: dict[str, float] = {}  # the key `recir.value_and_grad` uses
                compile_module(traced.module, f"{traced.entry}_grad", cache_dir=cache,
                               threads=threads, timings=warm_grad,
                               derive=gradient_passes(traced.entry))
                warm_grads.append(warm_grad)
            row = {kind: minima([s[kind] for s in stages]) for kind in stages[0]}
            row["cold_wall_s"] = min(w for w, _ in walls)
            row["cold_cpu_s"] = min(c for _, c in walls)
            row["warm_wall_s"] = min(w for w, _ in warm_walls)
            row["warm_cpu_s"] = min(c for _, c in warm_walls)
            row["warm_inference_stages"] = minima(warm_stages)
            row["warm_gradient_stages"] = minima(warm_grads)
            frontier = [frontier_end_to_end(traced, threads, f"{scratch}/f{threads}-{k}")
                        for k in range(args.repeats)]
            frontier_warm = [frontier_end_to_end(traced, threads, f"{scratch}/f{threads}-{k}")
                             for k in range(args.repeats)]
            row["frontier"] = {"cold_wall_s": min(w for w, _ in frontier),
                               "cold_cpu_s": min(c for _, c in frontier),
                               "warm_wall_s": min(w for w, _ in frontier_warm),
                               "warm_cpu_s": min(c for _, c in frontier_warm)}
            row["llvm_levels"] = llvm_levels(traced, threads, args.levels, args.llvm_passes)
            report["threads"][threads] = row
    report["trace_s"], report["first_trace_s"] = trace_s, first_trace
    print_report(report)
    if args.json:
        write_json(args.json, report)
    return 0


def _timed(thunk: Any) -> float:
    start = time.process_time()
    thunk()
    return time.process_time() - start


def print_report(report: dict[str, Any]) -> None:
    print_stages(report)
    print_end_to_end(report)
    print_warm_and_levels(report)


def print_stages(report: dict[str, Any]) -> None:
    threads = list(report["threads"])
    rows = [["trace (first / again)", f"{fmt(1e3 * report['first_trace_s'])} / "
             f"{fmt(1e3 * report['trace_s'])}"] + [""] * (2 * len(threads) - 1)]
    names: list[str] = []
    for row in report["threads"].values():
        for kind in ("inference", "gradient"):
            names += [n for n in row[kind] if n not in names and n not in NOT_CPU]
    for name in names:
        cells = [name]
        for t in threads:
            for kind in ("inference", "gradient"):
                value = report["threads"][t][kind].get(name)
                cells.append(fmt(1e3 * value) if value is not None else "-")
        rows.append(cells)
    total = ["sum of stages"]
    for t in threads:
        for kind in ("inference", "gradient"):
            stages = report["threads"][t][kind]
            total.append(fmt(1e3 * sum(v for k, v in stages.items() if k not in NOT_CPU)))
    rows.append(total)
    print_table(f"cold compile stages, TreeLSTM h={report['hidden']}, CPU ms "
                f"(minimum of runs)", ["stage"] + [f"{k} {t}t" for t in threads
                                                   for k in ("inference", "gradient")], rows)


def print_end_to_end(report: dict[str, Any]) -> None:
    first = report["first_in_process"]
    rows = [[f"{t}", fmt(r["cold_wall_s"], 2), fmt(r["cold_cpu_s"], 2),
             fmt(1e3 * r["warm_wall_s"]), fmt(1e3 * r["warm_cpu_s"])]
            for t, r in report["threads"].items()]
    print_table(f"inference + gradient end to end (recir.compile + recir.value_and_grad; "
                f"first in process: {first['wall_s']:.2f} s wall, {first['cpu_s']:.2f} s CPU, "
                f"{first['threads']} thread(s))",
                ["threads", "cold wall s", "cold CPU s", "warm wall ms", "warm CPU ms"], rows)
    first = report["frontier_first_in_process"]
    rows = [[f"{t}", fmt(f["cold_wall_s"], 2), fmt(f["cold_cpu_s"], 2),
             fmt(1e3 * f["warm_wall_s"]), fmt(1e3 * f["warm_cpu_s"])]
            for t, f in ((t, r["frontier"]) for t, r in report["threads"].items())]
    print_table(f"the same with batching=\"frontier\" (first in process, with the matrix "
                f"kernels where not cached: {first['wall_s']:.2f} s wall, "
                f"{first['cpu_s']:.2f} s CPU)",
                ["threads", "cold wall s", "cold CPU s", "warm wall ms", "warm CPU ms"], rows)


def print_warm_and_levels(report: dict[str, Any]) -> None:
    rows = []
    for t, r in report["threads"].items():
        inference, gradient = r["warm_inference_stages"], r["warm_gradient_stages"]
        for name in dict.fromkeys([*inference, *gradient]):
            rows.append([f"{t}", name, *(fmt(1e3 * s[name], 2) if name in s else "-"
                                         for s in (inference, gradient))])
    print_table("warm path of recir.compile and recir.value_and_grad (object-cache hit), "
                "CPU ms", ["threads", "stage", "inference", "gradient"], rows)
    rows = []
    for t, r in report["threads"].items():
        for kind, levels in r["llvm_levels"].items():
            for level, s in levels.items():
                rows.append([f"{t}", kind, f"O{level}", str(s["functions"]),
                             str(s["ir_lines"])] + [fmt(1e3 * s[k]) for k in LLVM_STAGES])
    print_table("LLVM on the same IR by optimisation level, CPU ms",
                ["threads", "module", "level", "functions", "IR lines", *LLVM_STAGES], rows)
