"""bench/settled_roof.py: each round's cell rate over the roof's rate timed
right after it, both timed by `roof.rate`."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import batching, roof, settled_roof  # noqa: E402


def test_each_round_divides_the_cells_rate_by_the_best_roof_timed_after_it(monkeypatch):
    order, roofs = [], iter([10.0, 10.0, 20.0, 20.0, 40.0, 40.0])

    def frontier(params, mode, threads):
        def run(trees):
            order.append("cell")
        return run

    def rate(fn, flops, repeats):
        """The products' rates as given; the cell's (timed alike) as 0.05 s a call."""
        if flops in (2 * 8**3, 2 * 16**3):
            order.append("roof")
            return next(roofs) / (1 if flops == 2 * 8**3 else 4)  # the 16^3 product: slower
        fn()
        return flops / 0.05 / 1e9

    monkeypatch.setattr(batching, "recir_frontier", frontier)
    monkeypatch.setattr(roof, "rate", rate)
    found = settled_roof.shares("train", [("numpy", "nn", 8, 8, 8), ("numpy", "nn", 16, 16, 16)],
                                rounds=3, workload="complete-8", hidden=4)
    # two untimed calls, then rounds of a call and both products, the faster the roof
    assert order == ["cell"] * 2 + ["cell", "roof", "roof"] * 3
    trees, _, _ = batching.workload("complete-8", 25)
    cell = 3 * batching.cell_flops(trees[:25], 4) / 0.05 / 1e9  # training: three products
    assert found == pytest.approx([cell / 10, cell / 20, cell / 40])


def test_a_real_round_is_a_positive_share_of_the_roof():
    found = settled_roof.shares("infer", [("numpy", "nt", 64, 64, 64)], rounds=2,
                                workload="complete-8", hidden=16)
    assert len(found) == 2 and all(0 < share < 10 for share in found)
