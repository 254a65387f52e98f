"""Markdown tables and PNG plots from `bench/suite.py`'s report.

`write(report, out)` writes `suite.md`, `throughput.png`, `length.png` and
`shapes.png` into `out`; `python bench/suite_report.py DIR/suite.json`
re-renders them from a saved run. matplotlib (Agg, no display) is in the
`bench` extra; without it the Markdown is still written and the plots are
listed as skipped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make `bench.*` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import fmt

CONTESTANTS = ("recir recursive", "recir batched", "iterative (torch)",
               "static unrolling (torch)", "torch level-batched")
MODEL_NAMES = {"tree_rnn": "TreeRNN", "rntn": "RNTN", "tree_lstm": "TreeLSTM"}
SHAPES = ("balanced", "moderate", "linear")


def table(header: list[str], rows: list[list[str]]) -> str:
    align = ["---" if i == 0 else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def skipped_section(name: str, section: dict[str, Any]) -> str | None:
    if section.get("skipped"):
        return f"*Section `{name}` skipped: {section['skipped']}*\n"
    return None


# --- throughput --------------------------------------------------------------------

def throughput_md(s: dict[str, Any]) -> str:
    c = s["config"]
    out = [f"Trees: {c['trees']} from {c['tree_source']}; one thread; hidden sizes "
           + ", ".join(f"{MODEL_NAMES[m]} {h}" for m, h in c["hidden"].items())
           + f"; median of {c['repeats']} passes. Numbers are trees/s "
           "(higher is better); the last columns are recir recursive's throughput "
           "over the iterative and the static-unrolling baselines.\n"]
    by = {(r["model"], r["task"], r["batch"], r["contestant"]): r for r in s["rows"]}
    present = [w for w in CONTESTANTS if any(r["contestant"] == w for r in s["rows"])]
    for task, title in (("train", "Training (forward, backward, SGD step)"),
                        ("infer", "Inference")):
        rows = []
        for model in MODEL_NAMES:
            for batch in c["batches"]:
                speed = {w: by.get((model, task, batch, w), {}).get("trees_per_s")
                         for w in present}
                rec = speed.get("recir recursive")
                rows.append([MODEL_NAMES[model], str(batch),
                             *(fmt(speed[w]) for w in present),
                             ratio_text(rec, speed.get("iterative (torch)")),
                             ratio_text(rec, speed.get("static unrolling (torch)"))])
        out.append(f"\n**{title}**, trees/s\n\n")
        out.append(table(["model", "batch", *present, "vs iterative", "vs unrolled"],
                         rows))
    skips = sorted({(r["model"], r["task"], r["contestant"], r["skipped"])
                    for r in s["rows"] if r.get("skipped")})
    if skips:
        out.append("\nSkipped contestants:\n\n")
        out += [f"- {MODEL_NAMES[m]} {t} {w}: {why}\n" for m, t, w, why in skips]
    return "".join(out)


def ratio_text(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


# --- shapes and threads ---------------------------------------------------------------

def shapes_md(s: dict[str, Any]) -> str:
    c = s["config"]
    rows = {(r["model"], r["task"], r["shape"], r["batch"]): r for r in s["rows"]}
    out = [f"{c['trees_per_shape']} trees of {c['leaves']} leaves per shape, hidden "
           f"{c['hidden']}, median of {c['repeats']}.\n\n"
           "**TreeRNN training by tree shape** (the paper's Table 1), trees/s, "
           "1 thread / 2 threads:\n\n"]
    batches = sorted({r["batch"] for r in s["rows"] if r["task"] == "train"})
    out.append(table(["shape", *(f"b={b}" for b in batches)], [
        [shape, *(f"{fmt(r['trees_per_s_1'])} / {fmt(r['trees_per_s_2'])}"
                  if (r := rows.get(("tree_rnn", "train", shape, b))) else "-"
                  for b in batches)] for shape in SHAPES]))
    out.append("\n**2 threads over 1, and the work/span prediction** (work = nodes, "
               "span = nodes on the longest path; the Brent columns are "
               "`bench/parallel.py`'s: W / (W/P + S) within a tree, and for training "
               "at batch > 1, where trees run side by side, the bound it states):\n\n")
    out.append(table(
        ["case", "1 thread ms", "2 threads ms", "speedup", "work/span", "Brent 2",
         "Brent 36"],
        [[f"{r['task']} {MODEL_NAMES[r['model']]} {r['shape']} b={r['batch']}",
          fmt(r["ms_1"]), fmt(r["ms_2"]), fmt(r["speedup"], 2),
          fmt(r["work"] / r["span"], 1), fmt(r["predicted_2"], 2),
          fmt(r["predicted_36"], 1)] for r in s["rows"]]))
    fib = s.get("fib35")
    if fib:
        out.append(f"\nfib(35): {fmt(fib['ms_1'])} ms on 1 thread, "
                   f"{fmt(fib['ms_2'])} ms on 2, speedup {fmt(fib['speedup'], 2)}.\n")
    return "".join(out)


# --- length, TD-TreeLSTM, thesis ---------------------------------------------------

def length_md(s: dict[str, Any]) -> str:
    c = s["config"]
    out = [f"TreeLSTM h={c['hidden']}, {c['tree_source']}, one tree at a time, one "
           f"thread; trees bucketed by leaves (width {c['bucket_width']}); "
           f"median of {c['repeats']}; ms per tree (lower is better).\n"]
    for task in ("infer", "train"):
        rows = [r for r in s["rows"] if r["task"] == task]
        who = [w for w in CONTESTANTS if any(r["contestant"] == w for r in rows)]
        cell = {(r["bucket"], r["contestant"]): r for r in rows}
        buckets = sorted({r["bucket"] for r in rows})
        title = "Inference" if task == "infer" else "Training"
        out.append(f"\n**{title}**, ms/tree\n\n")
        out.append(table(["leaves", "trees", *who], [
            [f"{b}-{b + c['bucket_width'] - 1}" if b < max(buckets) else f"{b}+",
             str(cell[(b, who[0])]["trees"]) if who else "-",
             *(fmt(cell[(b, w)]["ms_per_tree"], 2) if (b, w) in cell else "-"
               for w in who)] for b in buckets]))
    for what, why in s.get("contestants_skipped", {}).items():
        out.append(f"\nSkipped {what}: {why}\n")
    return "".join(out)


def td_md(s: dict[str, Any]) -> str:
    c = s["config"]
    out = [f"h={c['hidden']}, max depth {c['max_depth']}, {c['inputs']} random inputs "
           f"(trees of {c['mean_nodes']:.0f} nodes on average), median of "
           f"{c['repeats']}; instances/s. recir batched runs each step of b inputs "
           "as one frontier-batched call; the others run one instance at a time, "
           "so for them b=64 differs from b=1 only in grouping.\n\n"]
    out.append(table(["contestant", "b=1", "b=64"], [
        [who, *(fmt(next((r.get("instances_per_s") for r in s["rows"]
                          if r["contestant"] == who and r["batch"] == b), None))
                for b in (1, 64))]
        for who in dict.fromkeys(r["contestant"] for r in s["rows"])]))
    for r in s["rows"]:
        if r.get("skipped") and r["batch"] == 1:
            out.append(f"\nSkipped {r['contestant']}: {r['skipped']}\n")
    return "".join(out)


def thesis_md(s: dict[str, Any]) -> str:
    out = ["The thesis's TensorFlow r1.4 seconds (static Call/Return graph against "
           "dynamic call expansion) beside recir's native invoke path (the dynamic "
           f"form, one thread, median of {s['config']['repeats']}).\n\n"]
    out.append(table(
        ["call", "value", "thesis static s", "thesis dynamic s", "static/dynamic",
         "recir dynamic ms"],
        [[r["call"], str(r["expected"]), fmt(r["thesis_static_s"], 3),
          fmt(r["thesis_dynamic_s"], 3),
          fmt(r["thesis_static_s"] / r["thesis_dynamic_s"], 2),
          fmt(r.get("dynamic_ms"), 2) if not r.get("dynamic_skipped")
          else f"skipped: {r['dynamic_skipped']}"] for r in s["rows"]]))
    if s.get("static_skipped"):
        out.append(f"\nStatic Call/Return path: skipped ({s['static_skipped']}).\n")
    elif s.get("static"):
        out.append("\n**Static Call/Return against dynamic call expansion** "
                   "(`bench/static.py`: both on the same Python token engine, "
                   "seconds; smaller sizes than the thesis's, as Python token "
                   "passing costs ~100 us per call; the interpreter and the native "
                   "path for reference):\n\n")
        out.append(table(
            ["call", "calls", "static s", "dynamic s", "static/dynamic",
             "interpreter s", "native ms"],
            [[f"{r['program']}({', '.join(map(str, r['args']))})",
              str(r["static"]["activations"]), fmt(r["static"]["seconds"], 3),
              fmt(r["dynamic"]["seconds"], 3), fmt(r["static_over_dynamic"], 2),
              fmt(r.get("interpreter_seconds"), 3),
              fmt(1e3 * r["native_seconds"], 3) if r.get("native_seconds") else "-"]
             for r in s["static"]]))
    return "".join(out)


SECTION_MD = {"throughput": ("Throughput: recursive, batched, iterative, unrolled",
                             throughput_md),
              "shapes": ("Tree shapes, threads and work/span", shapes_md),
              "length": ("Time per tree against sentence length", length_md),
              "td_tree_lstm": ("Top-down TreeLSTM: recursive against iterative", td_md),
              "thesis": ("Thesis programs: static against dynamic", thesis_md)}
PLOTS = {"throughput": "throughput.png", "length": "length.png", "shapes": "shapes.png"}


def markdown(report: dict[str, Any], plots: dict[str, str]) -> str:
    """`plots`: section -> its PNG's file name if drawn, else why not."""
    m = report["machine"]
    out = [f"# recir benchmark suite{' (quick)' if report['quick'] else ''}\n\n",
           f"`{report['command']}`, {report['seconds']:.0f} s. Machine: {m['cpu']}, "
           f"{m['nproc']} cores, Python {m['python']}, "
           + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + ".\n"]
    for name, section in report["sections"].items():
        title, render = SECTION_MD[name]
        out.append(f"\n## {title}\n\n")
        out.append(skipped_section(name, section) or render(section))
        plot = PLOTS.get(name)
        if plot and plots.get(name) == plot:
            out.append(f"\n![{title}]({plot})\n")
        elif name in plots:
            out.append(f"\n*Plot not drawn: {plots[name]}*\n")
        redos = section.get("spread_redos") or []
        if redos:
            out.append("\nRe-timed for a max/min spread over 3x: "
                       f"{len(redos)} time(s) ("
                       + "; ".join(f"{r['contestant']}: "
                                   + " -> ".join(f"{x:.1f}x" for x in r["spreads"])
                                   for r in redos) + ").\n")
    return "".join(out)


# --- plots --------------------------------------------------------------------------

def plot_throughput(s: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    present = [w for w in CONTESTANTS
               if any(r["contestant"] == w and r.get("trees_per_s") for r in s["rows"])]
    batches = s["config"]["batches"]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7), constrained_layout=True)
    by = {(r["model"], r["task"], r["batch"], r["contestant"]): r.get("trees_per_s")
          for r in s["rows"]}
    width = 0.8 / max(len(present), 1)
    for row, task in enumerate(("train", "infer")):
        for col, model in enumerate(MODEL_NAMES):
            ax = axes[row][col]
            for k, who in enumerate(present):
                values = [by.get((model, task, b, who)) or 0 for b in batches]
                ax.bar([i + k * width for i in range(len(batches))], values, width,
                       label=who)
            middle = width * (len(present) - 1) / 2
            ax.set_xticks([i + middle for i in range(len(batches))],
                          [f"b={b}" for b in batches])
            ax.set_yscale("log")
            kind = "training" if task == "train" else "inference"
            ax.set_title(f"{MODEL_NAMES[model]} {kind}")
            ax.set_ylabel("trees/s")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center",
               ncol=len(present), fontsize=9)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_length(s: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for ax, task in zip(axes, ("infer", "train"), strict=True):
        for who in CONTESTANTS:
            rows = sorted((r for r in s["rows"] if r["task"] == task
                           and r["contestant"] == who), key=lambda r: r["mean_leaves"])
            if rows:
                ax.plot([r["mean_leaves"] for r in rows],
                        [r["ms_per_tree"] for r in rows], marker="o", label=who)
        ax.set_xlabel("sentence length (leaves)")
        ax.set_ylabel("ms per tree")
        ax.set_yscale("log")
        kind = "inference" if task == "infer" else "training"
        ax.set_title(f"TreeLSTM {kind}, batch 1")
    axes[0].legend(fontsize=8)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_shapes(s: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    rows = [r for r in s["rows"] if r["model"] == "tree_rnn" and r["task"] == "train"]
    batches = sorted({r["batch"] for r in rows})
    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    width = 0.8 / (2 * len(SHAPES))
    for k, shape in enumerate(SHAPES):
        for t, threads in enumerate((1, 2)):
            values = [next((r[f"trees_per_s_{threads}"] for r in rows
                            if r["shape"] == shape and r["batch"] == b), 0)
                      for b in batches]
            x = [i + (2 * k + t) * width for i in range(len(batches))]
            ax.bar(x, values, width,
                   label=f"{shape}, {threads} thread{'s' if threads > 1 else ''}",
                   hatch="//" if threads == 2 else None, color=f"C{k}",
                   alpha=1.0 if threads == 1 else 0.6)
    ax.set_xticks([i + width * (2 * len(SHAPES) - 1) / 2 for i in range(len(batches))],
                  [f"b={b}" for b in batches])
    ax.set_ylabel("trees/s")
    ax.set_title("TreeRNN training by tree shape (64 leaves)")
    ax.legend(fontsize=7, ncol=3)
    fig.savefig(path, dpi=90)
    plt.close(fig)


PLOT_FNS = {"throughput": plot_throughput, "length": plot_length, "shapes": plot_shapes}


def draw(report: dict[str, Any], out: Path) -> dict[str, str]:
    """section -> its PNG's file name when drawn, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        return {n: "matplotlib is not installed (pip install -e '.[bench]')"
                for n in PLOT_FNS if n in report["sections"]}
    result: dict[str, str] = {}
    for name, fn in PLOT_FNS.items():
        section = report["sections"].get(name)
        if section is None:
            continue
        if section.get("skipped"):
            result[name] = "section skipped"
            continue
        try:
            fn(section, out / PLOTS[name])
            result[name] = PLOTS[name]
        except Exception as e:  # a plot must not lose the tables
            result[name] = f"{type(e).__name__}: {e}"
            print(f"  [skip] plot {name}: {result[name]}")
    return result


def write(report: dict[str, Any], out: Path) -> None:
    (out / "suite.md").write_text(markdown(report, draw(report, out)))

if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Re-render a saved suite run's tables "
                                     "and plots beside its JSON.")
    parser.add_argument("report", nargs="?", type=Path,
                        default=Path("bench/results/suite.json"), help="a suite.json")
    source = parser.parse_args().report
    if not source.is_file():
        parser.error(f"{source}: no such file (run `python bench/run.py all` first)")
    write(json.loads(source.read_text()), source.parent)
    print(f"wrote {source.parent}/suite.md")
