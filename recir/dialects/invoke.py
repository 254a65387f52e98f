"""The `invoke` dialect: recursive dataflow graphs (Jeong et al., EuroSys'18).

A `invoke.subgraph` is a named region, like a function, that may use SSA
values of the region enclosing it (the user's closure; `capture-outer-refs`
turns them into trailing arguments). `invoke.invoke` calls a subgraph or a
`func.func` by name; it may recurse, directly or mutually, and a subgraph may
be invoked before the op that defines it (forward declaration is implicit).

```mlir
func.func @main(%n: i32) -> i32 {
  invoke.subgraph @fib(%k: i32) -> i32 {
    ...
    %a = invoke.invoke @fib(%k1) : (i32) -> i32
    invoke.return %r : i32
  }
  %r = invoke.invoke @fib(%n) : (i32) -> i32
  func.return %r : i32
}
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import (
    I32,
    FlatSymbolRefAttrConstr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    SymbolNameConstraint,
    SymbolRefAttr,
    UnitAttr,
    i32,
)
from xdsl.dialects.utils import parse_func_op_like, print_func_op_like
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, ReturnLike, SymbolTable
from xdsl.utils.exceptions import VerifyException


def verify_named_body(name: str, block: Block, function_type: FunctionType,
                      terminator: type[Operation]) -> None:
    """A named region's block takes the declared inputs and ends with `terminator`."""
    if tuple(block.arg_types) != function_type.inputs.data:
        raise VerifyException(
            f"@{name}: block argument types ({', '.join(map(str, block.arg_types))}) "
            f"differ from the declared inputs {function_type.inputs}"
        )
    if not isinstance(block.last_op, terminator):
        raise VerifyException(f"@{name}: body must end with '{terminator.name}'")


def verify_results(verb: str, types: Sequence[Attribute], name: str,
                   declared: FunctionType) -> None:
    """A terminator's value types are the enclosing named region's results."""
    expected, got = declared.outputs.data, tuple(types)
    if got != expected:
        raise VerifyException(
            f"{verb} ({', '.join(map(str, got))}) but @{name} "
            f"declares results ({', '.join(map(str, expected))})"
        )


class NamedRegionOp(IRDLOperation):
    """A named single-block region with a signature, written as a `func.func`
    is (`invoke.subgraph`, `dataflow.graph`)."""

    body = region_def("single_block")
    sym_name = prop_def(SymbolNameConstraint())
    function_type = prop_def(FunctionType)

    def __init__(
        self,
        name: str,
        function_type: FunctionType | tuple[Sequence[Attribute], Sequence[Attribute]],
        region: Region | None = None,
    ):
        if isinstance(function_type, tuple):
            function_type = FunctionType.from_lists(*function_type)
        if region is None:
            region = Region(Block(arg_types=function_type.inputs))
        super().__init__(
            properties={"sym_name": StringAttr(name), "function_type": function_type},
            regions=[region],
        )

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        name, inputs, outputs, region, extra, _, _ = parse_func_op_like(
            parser, reserved_attr_names=("sym_name", "function_type")
        )
        op = cls(name, (inputs, outputs), region)
        if extra is not None:
            op.attributes |= extra.data
        return op

    def print(self, printer: Printer) -> None:
        print_func_op_like(
            printer, self.sym_name, self.function_type, self.body, self.attributes,
            reserved_attr_names=("sym_name", "function_type"),
        )


@irdl_op_definition
class SubgraphOp(NamedRegionOp):
    """A named, possibly recursive region that may use outer SSA values.

    ```mlir
    invoke.subgraph @leaf_sum(%node: i32) -> f32 {
      ...
      invoke.return %s : f32
    }
    ```
    """

    name = "invoke.subgraph"

    def verify_(self) -> None:
        verify_named_body(self.sym_name.data, self.body.block, self.function_type,
                          ReturnOp)
        if isinstance(self.parent_op(), ModuleOp):  # (capture-outer-refs lifts it out of one)
            raise VerifyException(f"subgraph @{self.sym_name.data} must be defined inside "
                                  "a function: at the top level, define a func.func")
        duplicates = [
            op for op in callables(self) if op.sym_name == self.sym_name
        ]
        if len(duplicates) > 1:
            raise VerifyException(f"the name @{self.sym_name.data} is defined twice")


@irdl_op_definition
class ReturnOp(IRDLOperation):
    """Terminates a subgraph with its results.

    ```mlir
    invoke.return %h, %c : tensor<4xf32>, tensor<4xf32>
    ```
    """

    name = "invoke.return"
    arguments = var_operand_def()
    traits = traits_def(HasParent(SubgraphOp), IsTerminator(), ReturnLike())
    assembly_format = "attr-dict ($arguments^ `:` type($arguments))?"

    def __init__(self, *values: SSAValue | Operation):
        super().__init__(operands=[values])

    def verify_(self) -> None:
        sub = self.parent_op()
        assert isinstance(sub, SubgraphOp)
        verify_results("returns", self.arguments.types, sub.sym_name.data,
                       sub.function_type)


@irdl_op_definition
class InvokeOp(IRDLOperation):
    """Calls a subgraph or function; recursion and mutual recursion allowed.

    The optional `concurrent` marker says this invoke has no data dependence
    on its sibling invokes, so they may run at the same time.

    ```mlir
    %h, %c = invoke.invoke @node(%left) : (i32) -> (tensor<4xf32>, tensor<4xf32>)
    ```
    """

    name = "invoke.invoke"
    args = var_operand_def()
    callee = prop_def(FlatSymbolRefAttrConstr)
    concurrent = opt_prop_def(UnitAttr)
    res = var_result_def()
    assembly_format = (
        "$callee `(` $args `)` (`concurrent` $concurrent^)? attr-dict `:` "
        "functional-type($args, $res)"
    )

    def __init__(
        self,
        callee: str | SymbolRefAttr,
        args: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
    ):
        if isinstance(callee, str):
            callee = SymbolRefAttr(callee)
        super().__init__(
            operands=[args], result_types=[result_types], properties={"callee": callee}
        )

    def verify_(self) -> None:
        name = self.callee.root_reference.data
        target = lookup_callee(self, name)
        if target is None:
            raise VerifyException(f"callee @{name} does not exist")
        if isinstance(target, SubgraphOp):
            owner = target.parent_op()
            if owner is not None and not owner.is_ancestor(self):
                raise VerifyException(
                    f"subgraph @{name} is not visible here: invoke it from inside "
                    "the region that defines it"
                )
        signature = target.function_type
        check_types("argument", self.args.types, signature.inputs.data, name)
        check_types("result", self.res.types, signature.outputs.data, name)
        if self.concurrent is not None and self.res:
            # a task writes its results into the spawner's frame until the
            # join waits for it: a result read otherwise, or never waited for,
            # was 0, and a task outliving its frame wrote over the stack
            users = {use.operation for r in self.res for use in r.uses}
            join = users.pop() if len(users) == 1 else None
            if not isinstance(join, JoinOp) or list(join.spawned) != list(self.res):
                raise VerifyException("a concurrent invoke's results are used through one "
                                      "invoke.join that takes them all")


def check_types(
    what: str, got: Sequence[Attribute], expected: Sequence[Attribute], callee: str
) -> None:
    if len(got) != len(expected):
        raise VerifyException(
            f"@{callee} expects {len(expected)} {what}s, got {len(got)}"
        )
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if g != e:
            raise VerifyException(
                f"{what} {i} of @{callee} has type {g}, expected {e}"
            )


def callables(op: Operation) -> list[SubgraphOp | func.FuncOp]:
    """Every subgraph and function in the module that contains `op`."""
    top = op.get_toplevel_object()
    return [o for o in top.walk() if isinstance(o, SubgraphOp | func.FuncOp)]


def lookup_callee(op: Operation, name: str) -> SubgraphOp | func.FuncOp | None:
    """The `func.func` or `invoke.subgraph` called `name` in `op`'s module."""
    top = op.get_toplevel_object()
    if isinstance(top, ModuleOp):
        found = SymbolTable.lookup_symbol(top, name)
        if isinstance(found, func.FuncOp):
            return found
    for o in top.walk():
        if isinstance(o, SubgraphOp) and o.sym_name.data == name:
            return o
    return None


@irdl_op_definition
class JoinOp(IRDLOperation):
    """Waits for the `concurrent` invoke whose results it takes, and passes
    them on: every use after the join reads the joined values.

    ```mlir
    %a = invoke.invoke @node(%l) concurrent : (i32) -> i32
    %b = invoke.invoke @node(%r) : (i32) -> i32
    %a2 = invoke.join %a : (i32) -> i32
    ```
    """

    name = "invoke.join"
    spawned = var_operand_def()
    joined = var_result_def()
    assembly_format = "$spawned attr-dict `:` functional-type($spawned, $joined)"

    def __init__(self, spawned: Sequence[SSAValue]):
        super().__init__(operands=[spawned], result_types=[[v.type for v in spawned]])

    def verify_(self) -> None:
        if [v.type for v in self.spawned] != [r.type for r in self.joined]:
            raise VerifyException("results must have the types of the joined values")
        owners = {v.owner for v in self.spawned}
        owner = owners.pop() if len(owners) == 1 else None
        if self.spawned and not isinstance(owner, InvokeOp):
            # convert-invoke-to-gomp loads each joined value from its spawn's
            # slot: another value has none (it failed with a KeyError)
            raise VerifyException("joins values that are not the results of one "
                                  "concurrent invoke.invoke")
        if isinstance(owner, InvokeOp) and owner.concurrent is None:
            raise VerifyException("joins the results of an invoke that is not concurrent")


@irdl_op_definition
class SpawnBudgetOp(IRDLOperation):
    """The spawn budget a call from outside the spawning functions starts
    with (`invoke-clone-serial`): the one the runtime chose for this call,
    read from the native context, or `default` where it chose none. The
    budget depends on the call's size, which only the call tells
    (`backend/policy.py`).

    ```mlir
    %budget = invoke.spawn_budget 4
    ```
    """

    name = "invoke.spawn_budget"
    default = prop_def(IntegerAttr[I32])
    budget = result_def(i32)
    assembly_format = "$default attr-dict"

    def __init__(self, default: int):
        super().__init__(properties={"default": IntegerAttr(default, i32)}, result_types=[i32])

    def verify_(self) -> None:
        if self.default.value.data < 0:
            raise VerifyException(f"spawn budget must be at least 0, got "
                                  f"{self.default.value.data}")


@irdl_op_definition
class ContextOp(IRDLOperation):
    """The calling thread's native context (`passes/native_context.py`),
    which every native function takes first: convert-invoke-to-gomp reads
    the team's contexts from it for the tasks it spawns, and
    convert-recir-to-llvm replaces it by the function's context argument.

    ```mlir
    %ctx = invoke.context
    ```
    """

    name = "invoke.context"
    ctx = result_def(llvm.LLVMPointerType())
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__(result_types=[llvm.LLVMPointerType()])


Invoke = Dialect("invoke", [SubgraphOp, ReturnOp, InvokeOp, JoinOp, SpawnBudgetOp, ContextOp])
