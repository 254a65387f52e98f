"""A native schedule's expansion and height order in one native call.

A native schedule numbers its invocations by height with two native calls:
`@expand__depths` over every depth (`passes/expansion_loop.py`), then
`recir_height_order` over the expansion's tables (`height_order.py`).
Between them Python read the expansion's totals and wrote them into the
order's plan, a few dozen steps that run on caches the last call's height
loops left cold (`bench/cold_python.py`). `recir_number(ctx, plan)` makes
both calls. Python writes the order's plan once per capacity: its tables
are the expansion's kept tables and the order's kept arrays, each with room
for every row the expansion can make. Once the expansion has returned with
its context's error clear, this writes its rows, keys (the depths, times
the team by groups), depths and roots into the order's plan and calls the
kernel; the caller reads the expansion's context and the order's status.

Where the schedule's height loop has run before, the height policy
follows the order in the same call (`height_policy.py`), so that the
loop's bounds, team and groups are chosen by the time Python reads them,
and then, where its plan is ready, the loop itself (`height_call.py`).

Plan, 8-byte fields: the expansion's entry, its plan, the order's kernel,
its plan, the team (0: not by groups), the policy's kernel (0: none), its
plan, and the loop call's plan (0: none).
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path
from typing import Any

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import ModuleOp, i8, i32, i64

from recir.backend.kernels import height_order as order
from recir.backend.kernels import height_policy as policy
from recir.backend.kernels.height_call import height_call
from recir.passes.llvm_functions import call_pointer, lower_to_llvm, new_function
from recir.passes.loop_builder import PTR
from recir.passes.native_context import ERROR_OFFSET

ENTRY = "recir_number"
EXPAND, EXPAND_PLAN, ORDER, ORDER_PLAN, TEAM, POLICY, POLICY_PLAN, CALL_PLAN = range(8)
# the expansion plan's fields (`passes/expansion_loop.py`)
TOTAL, DEPTHS, ROOTS = 5, 6, 7


def numbering_module() -> ModuleOp:
    function, b, (ctx, plan) = new_function(ENTRY, [PTR, PTR], private=False)
    expand_plan = b.load(plan, EXPAND_PLAN, PTR)
    call_pointer(b, b.load(plan, EXPAND, PTR), ctx, expand_plan)
    error = b.load(b.offset(ctx, ERROR_OFFSET, i8), 0, i32)

    def ordered(e: Any) -> None:
        order_plan, team = e.load(plan, ORDER_PLAN, PTR), e.load(plan, TEAM, i64)
        depths = e.load(expand_plan, DEPTHS, i64)
        grouped = e.compare("ne", team, 0)
        e.store(e.load(expand_plan, TOTAL, i64), order_plan, order.ROWS)
        e.store(e.value(arith.SelectOp(grouped, e.mul(depths, team), depths)), order_plan,
                order.KEYS)
        e.store(depths, order_plan, order.LEVELS)
        e.store(e.load(expand_plan, ROOTS, i64), order_plan, order.BATCH)
        call_pointer(e, e.load(plan, ORDER, PTR), order_plan)
        ordered_well = e.compare("eq", e.load(order_plan, order.STATUS, i64), 0)
        asked = e.compare("ne", e.load(plan, POLICY, i64), 0)

        def chosen(f: Any) -> None:
            policy_plan = f.load(plan, POLICY_PLAN, PTR)
            f.store(depths, policy_plan, policy.DEPTHS)
            call_pointer(f, f.load(plan, POLICY, PTR), policy_plan)
            f.when(f.compare("ne", f.load(plan, CALL_PLAN, i64), 0),
                   lambda g: height_call(g, g.load(plan, CALL_PLAN, PTR)))

        e.when(e.value(arith.AndIOp(ordered_well, asked)), chosen)

    b.when(b.compare("eq", error, b.const(0, i32)), ordered)
    b.op(llvm.ReturnOp())
    return ModuleOp([lower_to_llvm(function)])


@cache
def numbering_kernel(folder: Path | None = None) -> Any:
    """`recir_number(ctx, plan)` as a ctypes function; compiled on first use
    (an object cached on disk, in the calling function's `folder`, as the
    matrix kernels are)."""
    from recir.backend.engine import cached_engine
    from recir.backend.llvm_convert import to_llvm_ir

    compiled = cached_engine("numbering", ENTRY, lambda: to_llvm_ir(numbering_module()),
                             cache_dir=folder)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(compiled.address(ENTRY))
    fn.engine = compiled  # the engine owns the code
    return fn
