"""The `dataflow` dialect: one static tagged-dataflow graph for a recursive program.

This is the static-recursion form of Kostopoulou's thesis (after Yaghi): rather
than expanding a call at run time, every function body is placed once in one
graph, and tokens carry a *tag*, a stack of call-site numbers. `dataflow.call`
pushes its site number onto a token's tag, `dataflow.return` lets through only
tokens whose tag ends with its own site number and pops it, so activations of
one body share its nodes without mixing their data.

`dataflow.graph` holds a graph region: a single block whose ops are nodes and
whose SSA edges may form cycles (recursion), so operands may be defined later
in the block. xDSL 0.74 parses such forward references and does not check
dominance. Zero-operand ops (`arith.constant`, `tmath.constant`) are static
values; they enter the token flow only through `dataflow.gate`.

```mlir
dataflow.graph @twice(%x: i32) -> i32 {
  %c0 = dataflow.call %x to @inc[0] : i32
  %a = dataflow.merge %c0, %c1 : i32
  %one = arith.constant 1 : i32
  %one_t = dataflow.gate %one on %a : i32, i32
  %s = arith.addi %a, %one_t : i32
  %r0 = dataflow.return %s from @inc[0] : i32
  %c1 = dataflow.call %r0 to @inc[1] : i32
  %r1 = dataflow.return %s from @inc[1] : i32
  dataflow.output %r1 : i32
}
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    FlatSymbolRefAttrConstr,
    IntegerAttr,
    SymbolRefAttr,
    i1,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

from recir.dialects.invoke import NamedRegionOp, verify_named_body, verify_results


def site_key(op: CallOp | ReturnOp) -> tuple[str, int]:
    return op.callee.root_reference.data, op.site.value.data


@irdl_op_definition
class GraphOp(NamedRegionOp):
    """A whole program as one static graph: entry inputs in, `dataflow.output` out.

    Its single block is a graph region: ops are nodes, operands may be
    defined later in the block (recursion makes cycles).

    ```mlir
    dataflow.graph @fib(%n: i32) -> i32 {
      ...
      dataflow.output %r : i32
    }
    ```
    """

    name = "dataflow.graph"
    traits = traits_def(SymbolOpInterface(), IsolatedFromAbove())

    def verify_(self) -> None:
        block = self.body.block
        name = self.sym_name.data
        verify_named_body(name, block, self.function_type, OutputOp)
        calls = {site_key(op) for op in block.ops if isinstance(op, CallOp)}
        for op in block.ops:
            if isinstance(op, ReturnOp) and site_key(op) not in calls:
                callee, site = site_key(op)
                raise VerifyException(
                    f"@{name}: 'dataflow.return' from @{callee}[{site}] has no "
                    f"'dataflow.call' to @{callee}[{site}]"
                )


@irdl_op_definition
class OutputOp(IRDLOperation):
    """The graph's results: tokens that arrive here with the empty tag.

    ```mlir
    dataflow.output %r : i32
    ```
    """

    name = "dataflow.output"
    values = var_operand_def()
    traits = traits_def(HasParent(GraphOp), IsTerminator())
    assembly_format = "attr-dict ($values^ `:` type($values))?"

    def __init__(self, *values: SSAValue | Operation):
        super().__init__(operands=[values])

    def verify_(self) -> None:
        graph = self.parent_op()
        assert isinstance(graph, GraphOp)
        verify_results("outputs", self.values.types, graph.sym_name.data,
                       graph.function_type)


class SiteOp(IRDLOperation):
    """Call and Return: one token in, one out, labelled with callee and site."""

    T: ClassVar = VarConstraint("T", AnyAttr())
    input = operand_def(T)
    output = result_def(T)
    callee = prop_def(FlatSymbolRefAttrConstr)
    site = prop_def(IntegerAttr[I64])

    def __init__(self, value: SSAValue | Operation, callee: str, site: int):
        value = SSAValue.get(value)
        super().__init__(
            operands=[value], result_types=[value.type],
            properties={"callee": SymbolRefAttr(callee),
                        "site": IntegerAttr(site, 64)},
        )

    def verify_(self) -> None:
        if self.site.value.data < 0:
            site = self.site.value.data
            raise VerifyException(f"site number must be >= 0, got {site}")


@irdl_op_definition
class CallOp(SiteOp):
    """Passes one argument into a callee's body: appends `site` to the token's tag.

    There is one Call per argument. A dead token does not enter the body: the
    Call for the first argument sends it (tag unchanged) to every
    `dataflow.return` of the same callee and site, so deadness crosses the
    call and no node after it waits forever; the other arguments' Calls drop it.

    ```mlir
    %c = dataflow.call %k1 to @fib_rec[1] : i32
    ```
    """

    name = "dataflow.call"
    assembly_format = "$input `to` $callee `[` $site `]` attr-dict `:` type($input)"


@irdl_op_definition
class ReturnOp(SiteOp):
    """Takes one result out of a callee's body back to one call site.

    Every Return of a callee sees every token of that result; it forwards
    only those whose tag ends with its own `site`, with that number removed.
    Dead tokens (sent by the matching Call) pass unchanged.

    ```mlir
    %a = dataflow.return %r from @fib_rec[1] : i32
    ```
    """

    name = "dataflow.return"
    assembly_format = "$input `from` $callee `[` $site `]` attr-dict `:` type($input)"


class SameTypeInputsOp(IRDLOperation):
    """`%r = <op> %a, %b, ... : T`: tokens of one type in, one out."""

    T: ClassVar = VarConstraint("T", AnyAttr())
    inputs = var_operand_def(T)
    output = result_def(T)
    assembly_format = "$inputs attr-dict `:` type($output)"


@irdl_op_definition
class MergeOp(SameTypeInputsOp):
    """Joins the tokens arriving from a callee's call sites into its parameter.

    Non-strict: every token on any input is forwarded as it is; tokens from
    different sites never collide because their tags end differently.

    ```mlir
    %k = dataflow.merge %c0, %c1, %c2 : i32
    ```
    """

    name = "dataflow.merge"

    def __init__(self, inputs: Sequence[SSAValue | Operation], typ: Attribute):
        super().__init__(operands=[inputs], result_types=[typ])

    def verify_(self) -> None:
        if not self.inputs:
            raise VerifyException("needs at least one input")


@irdl_op_definition
class SwitchOp(IRDLOperation):
    """Routes a token by a predicate: live on one output, dead on the other.

    The first result is the `true` branch. A dead predicate or input makes
    both outputs dead.

    ```mlir
    %t, %f = dataflow.switch %base, %k : i32
    ```
    """

    name = "dataflow.switch"
    T: ClassVar = VarConstraint("T", AnyAttr())
    pred = operand_def(i1)
    input = operand_def(T)
    if_true = result_def(T)
    if_false = result_def(T)
    assembly_format = "$pred `,` $input attr-dict `:` type($input)"

    def __init__(self, pred: SSAValue | Operation, value: SSAValue | Operation):
        typ = SSAValue.get(value).type
        super().__init__(operands=[pred, value], result_types=[typ, typ])


@irdl_op_definition
class JoinOp(SameTypeInputsOp):
    """Joins the branches of a Switch (an `scf.if`'s results).

    Strict: fires when every input holds a token of one tag, of which at most
    one is live; forwards the live one, or a dead token when all are dead.
    (The thesis calls this a Merge too; its firing rule differs from the
    call-site `dataflow.merge`, hence two ops.)

    ```mlir
    %r = dataflow.join %then, %else : i32
    ```
    """

    name = "dataflow.join"

    def __init__(self, inputs: Sequence[SSAValue | Operation]):
        typ = SSAValue.get(inputs[0]).type
        super().__init__(operands=[inputs], result_types=[typ])

    def verify_(self) -> None:
        if len(self.inputs) < 2:
            raise VerifyException(f"needs at least two inputs, got {len(self.inputs)}")


@irdl_op_definition
class GateOp(IRDLOperation):
    """Emits a static value (a constant) with the tag and liveness of a trigger token.

    Constants have no inputs, so they cannot fire per activation by
    themselves; a gate on a token of the activation's scope makes them.

    ```mlir
    %one_t = dataflow.gate %one on %k : i32, i32
    ```
    """

    name = "dataflow.gate"
    T: ClassVar = VarConstraint("T", AnyAttr())
    value = operand_def(T)
    trigger = operand_def()
    output = result_def(T)
    assembly_format = (
        "$value `on` $trigger attr-dict `:` type($value) `,` type($trigger)"
    )

    def __init__(self, value: SSAValue | Operation, trigger: SSAValue | Operation):
        typ = SSAValue.get(value).type
        super().__init__(operands=[value, trigger], result_types=[typ])

    def verify_(self) -> None:
        owner = self.value.owner
        if not isinstance(owner, Operation) or owner.operands or owner.regions:
            raise VerifyException(
                "gated value must be a constant (the result of an op without operands)"
            )


Dataflow = Dialect(
    "dataflow",
    [GraphOp, OutputOp, CallOp, ReturnOp, MergeOp, SwitchOp, JoinOp, GateOp],
)
