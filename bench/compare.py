"""Two commits' runs of one benchmark, row by row: `python bench/compare.py
--before A.json [A2.json ...] --after B.json [B2.json ...]`.

Each file is one `bench/run.py SECTION --json FILE` run; run the two commits
alternately (before, after, before, after, ...) so a slow spell of a shared
host weighs on both sides. Every number in the files becomes a row named by
its path (list items by their `case`/`name`/`model`... field where they have
one); a row present on both sides gets the median of each side and their
ratio (a list of plain numbers, one run's repeats, is left to the
median the run reports), oriented so that above 1 is faster after: times (`ms`, `seconds`,
`_s`) are compared before/after, rates (`per_s`, `speedup`, `gflops`, ...)
after/before. Numbers that are neither (counts, sizes, settings) are left
out. The last line counts the rows more than `--tolerance` slower.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NAME_FIELDS = ("case", "name", "model", "task", "contestant", "mode", "shape", "workload",
               "runtime", "threads", "batch", "hidden")
TIME = re.compile(r"(^|_)(ms|us|seconds|s|time|times)(_\d+)?$|(^|_)(ms|us|s)_")
RATE = re.compile(r"(per_s|speedup|gflops|trees_s|throughput)(_|$)")
SKIP = re.compile(r"^(machine|versions|threads_env|peers|blas|env)$")


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """(path, number) for every number under `value`."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not SKIP.match(str(key)):
                yield from leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list) and value and all(
            isinstance(v, int | float) for v in value):
        return  # one run's raw repeats: their median is a row of its own
    elif isinstance(value, list):
        seen: set[str] = set()
        for i, item in enumerate(value):
            label = str(i)
            if isinstance(item, dict):
                named = [f"{k}={item[k]}" for k in NAME_FIELDS if k in item
                         and not isinstance(item[k], dict | list)]
                label = ",".join(named) or label
            if label in seen:  # items the fields do not tell apart: by position
                label = f"{label}#{i}"
            seen.add(label)
            yield from leaves(item, f"{path}[{label}]")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path, float(value)


def orientation(path: str) -> int:
    """+1: higher is better; -1: lower is better; 0: not a measurement. The
    last key decides, else the one holding it (`trees_per_s.recir-frontier`)."""
    for key in reversed(path.lower().split(".")[-2:]):
        key = key.split("[", 1)[0]
        if RATE.search(key):
            return 1
        if TIME.search(key):
            return -1
    return 0


def medians(files: list[Path]) -> dict[str, float]:
    runs: dict[str, list[float]] = {}
    for file in files:
        for path, number in leaves(json.loads(file.read_text())):
            if orientation(path):
                runs.setdefault(path, []).append(number)
    return {path: statistics.median(values) for path, values in runs.items()}


def compare(before: dict[str, float], after: dict[str, float]) -> list[tuple[str, float, float, float]]:
    """(row, before, after, speed ratio: above 1 is faster after)."""
    rows = []
    for path in sorted(before.keys() & after.keys()):
        a, b = before[path], after[path]
        if a <= 0 or b <= 0:
            continue
        rows.append((path, a, b, b / a if orientation(path) > 0 else a / b))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", nargs="+", type=Path, required=True)
    parser.add_argument("--after", nargs="+", type=Path, required=True)
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args(argv)
    rows = compare(medians(args.before), medians(args.after))
    width = max((len(r[0]) for r in rows), default=3)
    print(f"{'row':<{width}}  {'before':>10}  {'after':>10}  speed")
    for path, a, b, ratio in rows:
        print(f"{path:<{width}}  {a:>10.4g}  {b:>10.4g}  {ratio:5.2f}")
    slower = [r for r in rows if r[3] < 1 - args.tolerance]
    faster = [r for r in rows if r[3] > 1 + args.tolerance]
    ratios = [r[3] for r in rows]
    median = statistics.median(ratios) if ratios else float("nan")
    print(f"{len(rows)} rows: {len(slower)} more than {args.tolerance:.0%} slower, "
          f"{len(faster)} more than {args.tolerance:.0%} faster, median speed {median:.2f}")


if __name__ == "__main__":
    main()
