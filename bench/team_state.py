"""A frontier team's 2t/1t by the cores' state: rounds, each with the cores' round trip.

The SST frontier rows of `targets` move with where the host puts the two
virtual CPUs (`core_latency`: tens of ns on one L3, hundreds across two),
and the state changes within a run. So each round times the one-thread
and two-thread forms of one model in turn, with the cores' round trip
before and after it, and the summary splits the rounds by state (both
ends on one side of `--split` ns; a round whose ends differ is left out
of both): a change is judged in each state, not across them.

    python -m bench.team_state --mode train --rounds 20
    python -m bench.team_state --mode train --same   # one batch again and again
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.batching import make_params, recir_frontier, workload
from bench.core_latency import round_trips


def timed_round(forms: dict, batches: list, calls: int) -> dict[int, float]:
    """Microseconds a call of each form, over `calls` calls of the batches in turn."""
    found = {}
    for threads, run in forms.items():
        run(batches[0])  # the team's workers awake, as in back-to-back calls
        start = time.perf_counter()
        for i in range(calls):
            run(batches[i % len(batches)])
        found[threads] = (time.perf_counter() - start) / calls * 1e6
    return found


def state_of(before: float, after: float, split: float) -> str | None:
    """The cores' state through a round: both round trips under `split` ns
    (one L3), both at or over it (two L3s), else None (it moved)."""
    if max(before, after) < split:
        return "one L3"
    return "two L3s" if min(before, after) >= split else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["infer", "train"], default="train")
    parser.add_argument("--workload", default="sst")
    parser.add_argument("--hidden", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=24, help="calls of each form a round")
    parser.add_argument("--same", action="store_true", help="one batch in every call")
    parser.add_argument("--split", type=float, default=150.0, help="ns between the states")
    args = parser.parse_args()
    trees, vocab, _ = workload(args.workload, 25)
    # up to four batches of 25 (the complete-tree workloads have one)
    batches = [trees[i:i + 25] for i in range(0, min(len(trees), 100), 25)]
    batches = batches[:1 if args.same else 4]
    params = make_params(args.hidden, vocab)
    forms = {t: recir_frontier(params, args.mode, t) for t in (1, 2)}
    for run in forms.values():  # compiled, and each batch's sizes met once
        for batch in batches * 2:
            run(batch)
    states: dict[str, list[tuple[float, float]]] = {"one L3": [], "two L3s": []}
    for _ in range(args.rounds):
        before = round_trips(3000).get(1, 0.0)
        found = timed_round(forms, batches, args.calls)
        after = round_trips(3000).get(1, 0.0)
        print(f"round trip {before:4.0f} / {after:4.0f} ns: 1t {found[1]:7.0f} us, "
              f"2t {found[2]:7.0f} us, {found[1] / found[2]:.3f}x", flush=True)
        state = state_of(before, after, args.split)
        if state is not None:
            states[state].append((found[1], found[2]))
    for state, rounds in states.items():
        if rounds:
            ratios = [one / two for one, two in rounds]
            print(f"{state}: {len(rounds)} rounds, 2t/1t median {statistics.median(ratios):.3f} "
                  f"({min(ratios):.3f}-{max(ratios):.3f}), 2t median "
                  f"{statistics.median(two for _, two in rounds):.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
