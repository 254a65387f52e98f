"""An `scf.if` written in a `dataflow.graph` by hand runs in both token
engines as the reference interpreter runs it (it was a bare KeyError)."""

from __future__ import annotations

import pytest

from recir import dataflow as rd
from recir.context import make_context
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.parsing import parse_module


def parse(text: str):
    return parse_module(make_context(), text, "graph.mlir")


# step(a) = -a if a < 0 else a + 3, placed once and called twice: the branch
# reads a token (%a) and a constant (%zero) from outside it.
# the step's scf.if, shared by both forms below
STEP_IF = """  %s = scf.if %neg -> (i32) {
    %m = arith.subi %zero, %a : i32
    scf.yield %m : i32
  } else {
    %three = arith.constant 3 : i32
    %p = arith.addi %a, %three : i32
    scf.yield %p : i32
  }
"""
TWICE_GRAPH = """dataflow.graph @twice(%x: i32) -> i32 {
  %c0 = dataflow.call %x to @step[0] : i32
  %a = dataflow.merge %c0, %c1 : i32
  %zero = arith.constant 0 : i32
  %zero_t = dataflow.gate %zero on %a : i32, i32
  %neg = arith.cmpi slt, %a, %zero_t : i32
""" + STEP_IF + """  %r0 = dataflow.return %s from @step[0] : i32
  %c1 = dataflow.call %r0 to @step[1] : i32
  %r1 = dataflow.return %s from @step[1] : i32
  dataflow.output %r1 : i32
}
"""

TWICE_INVOKE = """func.func private @step(%a: i32) -> i32 {
  %zero = arith.constant 0 : i32
  %neg = arith.cmpi slt, %a, %zero : i32
""" + STEP_IF + """  func.return %s : i32
}
func.func @twice(%x: i32) -> i32 {
  %y = invoke.invoke @step(%x) : (i32) -> i32
  %z = invoke.invoke @step(%y) : (i32) -> i32
  func.return %z : i32
}
"""


def step(a: int) -> int:
    return -a if a < 0 else a + 3


@pytest.mark.parametrize("engine", rd.ENGINES)
@pytest.mark.parametrize("x", [-7, -1, 0, 4])
def test_scf_if_in_a_graph_matches_python_and_the_interpreter(engine, x):
    results, stats = rd.run(parse(TWICE_GRAPH), "twice", (x,), engine=engine)
    assert results == (step(step(x)),)
    assert results == run_function(parse(TWICE_INVOKE), "twice", [x])
    assert results == rd.run(parse(TWICE_INVOKE), "twice", (x,), engine=engine)[0]
    assert stats.activations == 2


# The condition is read inside the branch too, and %b by both branches:
# each outer value is one port, whatever the number of its uses.
SELECT = """dataflow.graph @f(%p: i1, %a: i32, %b: i32) -> i32 {
  %r = scf.if %p -> (i32) {
    %w = arith.extui %p : i1 to i32
    %s = arith.addi %a, %b : i32
    %t = arith.addi %s, %w : i32
    scf.yield %t : i32
  } else {
    scf.yield %b : i32
  }
  dataflow.output %r : i32
}
"""


@pytest.mark.parametrize("engine", rd.ENGINES)
@pytest.mark.parametrize("p", [0, 1])
def test_outer_values_are_one_port_each(engine, p):
    results, stats = rd.run(parse(SELECT), "f", (p, 20, 3), engine=engine)
    assert results == ((20 + 3 + 1) if p else 3,)
    assert (stats.firings, stats.tokens) == (2, 5)  # scf.if and the output


def test_a_dataflow_op_inside_a_branch_is_a_located_error():
    graph = parse("""dataflow.graph @f(%p: i1, %a: i32) -> i32 {
  %r = scf.if %p -> (i32) {
    %c = dataflow.call %a to @g[0] : i32
    scf.yield %c : i32
  } else {
    scf.yield %a : i32
  }
  dataflow.output %r : i32
}
""")
    with pytest.raises(RecirError) as info:
        rd.run(graph, "f", (1, 2))
    assert str(info.value) == (
        "graph.mlir:3:5: error: 'dataflow.call' op is inside 'scf.if': the token "
        "engines run an op with regions whole, as one node, so its regions may hold "
        "no dataflow op (lower-invoke-to-call-return makes switches and joins of an "
        "scf.if instead)")
