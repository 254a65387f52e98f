"""`run.py batching`'s table: every cell's rates, auto's pick against the best mode, roof %."""

from __future__ import annotations

from typing import Any

from bench.common import fmt, print_table

SHOWN = ("recir-frontier", "recir-recursive", "torch-level", "dynet-auto", "torch-eager")


def auto_over_best(row: dict[str, Any]) -> tuple[float | None, float | None, str | None]:
    """The rate of the mode auto picks, its ratio to the best recir mode's,
    and that best mode."""
    rate = {n[len("recir-"):]: v for n, v in row["trees_per_s"].items()
            if n.startswith("recir-")}
    picked = (row.get("auto") or "").rstrip("*")
    if not rate or picked not in rate:
        return None, None, None
    best = max(rate, key=rate.get)
    return rate[picked], rate[picked] / rate[best], best


def print_report(report: dict[str, Any]) -> None:
    """Ratios: the mode `batching="auto"` picks over the peer (what a user
    gets; `auto/best` says how far that is from recir's best mode); PyTorch
    level-batched at the faster of 1 and N threads (`level thr`); DyNet runs
    one thread, so rows with more threads compare with its one-thread
    figure. `roof %`: each recir mode's FLOP rate over the SGEMM roof of the
    row's thread count."""
    header = ["h", "trees", "batch", "thr", "mode", *SHOWN, "level thr", "auto picks",
              "auto/best", "vs level", "vs dynet", "frontier roof %", "recursive roof %"]
    dynet = {(r["hidden"], r["workload"], r["batch"], r["mode"]):
             r["trees_per_s"].get("dynet-auto") for r in report["rows"] if r["threads"] == 1}
    rows = []
    for r in report["rows"]:
        rate = r["trees_per_s"]
        mine, versus_best, best = auto_over_best(r)
        level = rate.get("torch-level")
        dyn = rate.get("dynet-auto") or dynet.get((r["hidden"], r["workload"], r["batch"],
                                                   r["mode"]))
        picked = r.get("auto") or "-"
        roof = r.get("roof_fraction", {})
        rows.append([str(r["hidden"]), r["workload"], str(r["batch"]), str(r["threads"]),
                     r["mode"], *[fmt(rate.get(n)) for n in SHOWN],
                     str(r.get("torch_level_threads") or "-"),
                     picked if versus_best is None or versus_best == 1 else f"{picked} ({best})",
                     fmt(versus_best, 2),
                     fmt(mine / level if mine and level else None, 2),
                     fmt(mine / dyn if mine and dyn else None, 2),
                     fmt(100 * roof["recir-frontier"] if "recir-frontier" in roof else None),
                     fmt(100 * roof["recir-recursive"] if "recir-recursive" in roof else None)])
    cpu = report["machine"]["cpu"]
    print_table(f"TreeLSTM trees/s (median) on {cpu}; ratios: the mode recir's "
                "batching=\"auto\" picks over the peer (DyNet: its one-thread figure)",
                header, rows)
    for threads, roof in report["roof"].items():
        print(f"SGEMM roof over the run, {threads} thread(s): {roof['roof']:.0f} GFLOP/s ("
              + ", ".join(f"{k} {v:.0f}" for k, v in roof.items() if k != "roof") + ")")
