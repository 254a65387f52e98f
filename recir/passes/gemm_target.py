"""The host's sizes for the matrix kernels (`gemm_kernels.py`).

The sizes follow from the target's registers and caches (`Target`), not from
timings. A tile of r x v accumulators loads r + v values a step for r v
FMAs; it takes the fewest loads per FMA that leave registers for the
accumulators, the vectors it holds and one more (the analytical model of
BLIS: Low et al., "Analytical modeling is enough for high-performance BLIS",
2016). nn/tn's panel is a power of two vectors wide, as the widths of the
matrices are: a panel wider than n's last columns computes lanes it drops.
nt's dot tile first takes the most rows of B (`Target.nt_tile`). Blocks of
k (`depth`) take the L1 ways that A's tile leaves: the packed block of B
(depth x width) stays there while A's tile (rows x depth) streams through
and C's tile lines pass, one way kept for them (BLIS's model of the L1 as
ways of a set-associative cache); blocks of rows, with their rows of C, L2
less what L1 holds. The lanes and registers come from LLVM's host features, the caches
(sizes, L1's ways) from sysfs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

DEFAULT_L1, DEFAULT_L2, DEFAULT_WAYS = 32 << 10, 1 << 20, 8
# A core's L2 fills its L1 with about 32 bytes a cycle, sustained (AMD's
# Zen: 32; Intel since Skylake-SP: 64 at peak, 30-40 sustained). L3 gives
# it about a 64-byte line every 4 cycles (Intel's mesh, AMD's CCX, with
# other cores at work): half of L2's rate.
L2_BYTES_PER_CYCLE, L3_BYTES_PER_CYCLE = 32, 16


@dataclass(frozen=True)
class Target:
    """What the kernels are sized by: f32 lanes of a vector register, the
    registers, a core's L1 data cache and L2 in bytes, and L1's ways."""

    lanes: int
    registers: int
    l1_bytes: int
    l2_bytes: int
    l1_ways: int = DEFAULT_WAYS

    @functools.cached_property
    def tile(self) -> tuple[int, int]:
        """(rows, vectors) of nn/tn's tile: rows * vectors accumulators, the
        vectors of B and one broadcast in registers; rows + vectors loads a
        step for rows * vectors FMAs."""
        return best_tile(self.registers, lambda rows, vectors: power_of_two(vectors))

    @functools.cached_property
    def nt_tile(self) -> tuple[int, int]:
        """(rows of A, rows of B) of nt's tile: one accumulator a pair, A's
        vectors and one of B's in registers; rows + cols loads a step. B's
        tile stays in L1 while A's rows pass, from L2 once A exceeds L1: so
        the most rows of B (a power of two: a row's sums are reduced
        together), then the fewest loads per FMA."""
        cols, rows = best_tile(self.registers, lambda cols, rows: power_of_two(cols),
                               lambda cols, rows: -cols)
        return rows, cols

    @property
    def moved_macs(self) -> int:
        """Multiply-adds a core's two FMA units do while it brings one f32
        of an operand from L3 and writes it into its packed copy: what a
        thread of a product's team pays for each element of A or B it
        reads (`gemm_teams.grid`)."""
        cycles = 4 / L3_BYTES_PER_CYCLE + 4 / L2_BYTES_PER_CYCLE
        return round(2 * self.lanes * cycles)

    @property
    def width(self) -> int:  # the columns of nn/tn's tile
        return self.tile[1] * self.lanes

    @property
    def depth(self) -> int:
        """Steps of k a block holds (a multiple of lanes: nt's packing writes
        squares): the most whose packed block of B (depth x width) and A's
        tile (rows x depth) take whole L1 ways, all but one."""
        way = self.l1_bytes // max(self.l1_ways, 2)

        def ways(depth: int) -> int:
            return -(-4 * depth * self.width // way) - (-4 * depth * self.tile[0] // way)

        depth = self.lanes
        while ways(depth + self.lanes) <= max(self.l1_ways, 2) - 1:
            depth += self.lanes
        return depth


def power_of_two(count: int) -> bool:
    return count & (count - 1) == 0


def best_tile(registers: int, allowed, first=lambda r, v: 0) -> tuple[int, int]:
    """The (r, v) among those `allowed` whose r * v accumulators, `v` held
    vectors and one more fit the registers, with no more loads (r + v) than
    FMAs (r * v) a step: the least `first(r, v)`, then the fewest loads per
    FMA, then the most accumulators."""
    fits = [(r, v) for v in range(1, registers) for r in range(1, registers)
            if r * v + v + 1 <= registers and r + v <= r * v and allowed(r, v)]
    return min(fits, key=lambda t: (first(*t), (t[0] + t[1]) / (t[0] * t[1]), -t[0] * t[1]))


def cache_fact(level: int, fact: str, default: int) -> int:
    """A sysfs fact (`size` in bytes, `ways_of_associativity`) of a core's
    data (or unified) cache of `level`, else `default`."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if int((index / "level").read_text()) != level or \
                    (index / "type").read_text().strip() == "Instruction":
                continue
            text = (index / fact).read_text().strip()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1], 1)
            return int(text.rstrip("KM")) * scale or default
        except (OSError, ValueError, IndexError):
            continue
    return default


@functools.cache
def host_target() -> Target:
    """AVX-512: 32 registers of 16 lanes; AVX2: 16 of 8; else 16 of 4 (SSE)."""
    import llvmlite.binding as llvm_binding

    llvm_binding.initialize_native_target()
    features = llvm_binding.get_host_cpu_features()
    lanes, registers = (16, 32) if features.get("avx512f") else (
        (8, 16) if features.get("avx2") else (4, 16))
    return Target(lanes, registers, cache_fact(1, "size", DEFAULT_L1),
                  cache_fact(2, "size", DEFAULT_L2),
                  cache_fact(1, "ways_of_associativity", DEFAULT_WAYS))
