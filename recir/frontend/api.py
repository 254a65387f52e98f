"""Tracing API: `trace`, `SubGraph`, `cond`.

A model is a Python function traced once into IR, in the style of the
recursive-dataflow-graphs paper (its Figure 2):

    with recir.trace("tree_lstm") as m:
        left = m.input("left", recir.structure())
        W = m.param("W", np.zeros((8, 4), np.float32))
        with recir.SubGraph("node", [recir.i32], [recir.vector(8)]) as node:
            (i,) = node.inputs
            ...                       # node(child) here is recursion
            node.output(h)
        m.output(node(root))
    m.traced                          # a TracedModel

Inputs come first in the entry's arguments, then parameters in declaration
order; subgraphs use both as outer values (`capture-outer-refs` closes them).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Self

import numpy as np
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    FunctionType,
    ModuleOp,
    TensorType,
    f32,
    i1,
    i32,
)
from xdsl.ir import Attribute, Block, BlockArgument, Region, TypeAttribute
from xdsl.rewriter import Rewriter

from recir.diagnostics import RecirError
from recir.dialects import invoke
from recir.frontend.locations import user_error, user_location
from recir.frontend.tracer import (
    Tracer,
    as_value,
    current_block,
    emit,
    insertion_block,
    open_block,
)
from recir.verification import verify_located

__all__ = ["SubGraph", "TracedModel", "cond", "f32", "i1", "i32", "structure",
           "trace", "vector", "matrix"]


def vector(n: int) -> TensorType:
    return TensorType(f32, [size_of("vector", "n", n)])


def matrix(rows: int, cols: int) -> TensorType:
    return TensorType(f32, [size_of("matrix", "rows", rows), size_of("matrix", "cols", cols)])


def size_of(what: str, name: str, value: Any) -> int:
    """A fixed size of at least 1: an open length (-1) made a per-row type
    of the frontier's, which reductions took for rows (sum returned its
    input); 2.5 or "3" raised an xDSL error naming no line."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise user_error(f"recir.{what}'s {name} is a fixed size of at least 1, got "
                         f"{value!r} (a structure array of any length: recir.structure())")
    return int(value)


def structure() -> TensorType:
    """An i32 structure array (children, word ids, labels) of any length."""
    return TensorType(i32, [DYNAMIC_INDEX])


class BoundParams(dict[str, np.ndarray]):
    """A traced model's parameters by name. Compiled code binds these arrays
    and reads them on every call, so assigning to a name copies the value
    into its array (a new array would be read by some paths and not by
    others), and names can be neither added nor removed. The arrays are
    C-contiguous float32, as compiled code reads them (of other arrays it
    would bind a copy, and miss updates made in place)."""

    def __init__(self, params: dict[str, Any]):
        super().__init__({k: float32_parameter(k, v) for k, v in params.items()})

    def __setitem__(self, name: str, value: Any) -> None:
        if name not in self:
            raise RecirError(f"error: the model has no parameter '{name}' "
                             f"(it has {', '.join(self)})")
        bound = dict.__getitem__(self, name)
        if value is bound:
            return
        array = np.asarray(value)
        if array.shape not in (bound.shape, ()):  # a number fills the array
            raise RecirError(f"error: parameter '{name}' has shape {bound.shape}, got "
                             f"{array.shape}: compiled code reads the array it was traced "
                             "with (trace the model again for another shape)")
        if array.dtype.kind == "f" and array.dtype.itemsize > 4:
            array = float32_parameter(name, array)
        try:
            np.copyto(bound, array, casting="same_kind")
        except (TypeError, ValueError) as e:
            raise RecirError(f"error: parameter '{name}' cannot take the value: {e}") from None

    def update(self, *args: Any, **kwargs: Any) -> None:
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def __ior__(self, other: Any) -> BoundParams:  # type: ignore[override,misc]
        self.update(other)
        return self

    def refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise RecirError("error: a traced model's parameters are fixed: assign "
                         "to a name to change its values")

    __delitem__ = pop = popitem = clear = setdefault = refuse  # type: ignore

    def __reduce__(self) -> tuple[Any, ...]:
        return BoundParams, (dict(self),)  # (copies are made without `__setitem__`)


def float32_parameter(name: str, value: Any) -> np.ndarray:
    """`value` as a C-contiguous float32 array; a finite float64 beyond
    float32's range is refused, not made infinite (NaN and inf stay)."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as e:  # (a ragged nested list)
        raise RecirError(f"error: parameter '{name}' is not an array: {e}") from None
    if array.dtype.kind not in "biuf":  # (complex values would lose their imaginary part)
        raise RecirError(f"error: parameter '{name}' holds {array.dtype} values, not "
                         "real numbers")
    if array.dtype.kind != "f" or array.dtype.itemsize <= 4:  # (a 0-d array stays 0-d)
        return np.asarray(array, np.float32, order="C")
    from recir.interpreter import check_narrowed  # (not loaded by `import recir`)

    with np.errstate(over="ignore"):  # (refused just below, by name)
        narrowed = np.asarray(array, np.float32, order="C")
    check_narrowed(f"parameter '{name}'", array, narrowed)
    return narrowed


def check_name(what: str, name: Any) -> None:
    """Names become IR symbols and argument names: non-empty strings."""
    if not isinstance(name, str) or not name:
        raise user_error(f"the name of {what} is a non-empty string, got {name!r}")


def check_value_name(what: str, name: str) -> None:
    """Inputs and parameters name the entry's arguments in the IR, which
    takes fewer names than symbols do (xDSL raised a ValueError)."""
    if not BlockArgument.is_valid_name(name):
        raise user_error(f"the name of {what} is an IR value name (letters, digits and "
                         f"_$.- not starting with a digit), got {name!r}")


def check_types(what: str, types: Sequence[Any]) -> None:
    """A list of IR types (`recir.i32`, `vector(n)`, ...), not their names."""
    if isinstance(types, TypeAttribute | str) or not isinstance(types, Sequence):
        raise user_error(f"the {what} types are a list such as [recir.i32], "
                         f"got {types}")
    for typ in types:
        if not isinstance(typ, TypeAttribute):
            raise user_error(f"an {what} type is an IR type such as recir.i32 or "
                             f"recir.vector(n), got {typ!r}")


class TracedModel:
    """A traced module, its entry function and the parameters bound to it."""

    def __init__(self, module: ModuleOp, entry: str, inputs: list[str],
                 params: dict[str, np.ndarray]):
        self.module, self.entry, self.input_names = module, entry, inputs
        self.params = params if isinstance(params, BoundParams) else BoundParams(params)

    def __str__(self) -> str:
        return str(self.module)

    def run(self, *inputs: Any) -> tuple[Any, ...]:
        """Run with the reference interpreter on `inputs` and the bound parameters."""
        from recir.interpreter import run_function

        if len(inputs) != len(self.input_names):  # (the entry counts the parameters too)
            raise RecirError(f"error: @{self.entry} takes {len(self.input_names)} inputs "
                             f"({', '.join(self.input_names)}), got {len(inputs)}")

        return run_function(self.module, self.entry, [*inputs, *self.params.values()])


class TracedRegion:
    """Inside `with`, traced ops go into `block`; leaving the `with` without
    `.output(...)` is an error naming `what`."""

    def __init__(self, what: str, block: Block):
        self.what, self.has_outputs, self.block = what, False, block
        self.context = insertion_block(block)

    def __enter__(self) -> Self:
        self.context.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.context.__exit__()
        if kind is None and not self.has_outputs:
            raise user_error(f"{self.what} has no outputs: call .output(...)")

    def check_output(self) -> None:
        """Once, in the region's own block: in a nested subgraph or a cond
        branch it ended that block, which failed to verify at another line."""
        if self.has_outputs:
            raise user_error(f"{self.what} has its outputs already")
        if current_block() is not self.block:
            raise user_error(f"{self.what} gives its outputs in its own with-block, "
                             "not in a nested subgraph or cond branch")


class trace(TracedRegion):
    """Context manager building the entry function `name` of a new module."""

    def __init__(self, name: str):
        check_name("a model", name)
        self.name = name
        self.block = Block()
        super().__init__(f"model '{name}'", self.block)
        self.function = func.FuncOp(name, ([], []), Region(self.block))
        self.function.location = user_location()
        self.module = ModuleOp([self.function])
        self.inputs: list[str] = []
        self.params: dict[str, np.ndarray] = {}

    def check_declaration(self) -> None:
        if self.has_outputs:  # (the entry's type was made from the arguments then)
            raise user_error(f"model '{self.name}' has its outputs already: declare "
                             "inputs and parameters before m.output(...)")

    def input(self, name: str, typ: Attribute) -> Tracer:
        check_name("an input", name)
        check_value_name("an input", name)
        check_types("input", [typ])
        self.check_declaration()
        if name in self.params or name in self.inputs:
            raise user_error(f"the name '{name}' is declared twice")
        arg = self.block.insert_arg(typ, len(self.inputs))
        arg.name_hint = name
        self.inputs.append(name)
        return Tracer(arg)

    def param(self, name: str, value: np.ndarray) -> Tracer:
        check_name("a parameter", name)
        check_value_name("a parameter", name)
        self.check_declaration()
        try:
            array = float32_parameter(name, value)
        except RecirError as e:
            if not str(e).startswith("error: "):
                raise  # (located already: a traced value given as the array)
            raise user_error(str(e).removeprefix("error: ")) from None
        if array.ndim == 0:  # (the IR's tensor ops take no rank-0 tensor)
            raise user_error(f"parameter '{name}' is a scalar (shape ()): a parameter is "
                             "an array; declare shape (1,), e.g. np.array([value], "
                             f"np.float32), and read it as {name}[0]")
        if name in self.params or name in self.inputs:
            raise user_error(f"the name '{name}' is declared twice")
        arg = self.block.insert_arg(TensorType(f32, array.shape), len(self.block.args))
        arg.name_hint = name
        self.params[name] = array
        return Tracer(arg)

    def output(self, *values: Tracer) -> None:
        self.check_output()
        results = [as_value(v) for v in values]
        emit(func.ReturnOp(*results), verify=False)
        self.has_outputs = True
        types = [a.type for a in self.block.args]
        self.function.function_type = FunctionType.from_lists(types, [r.type for r in results])

    @property
    def traced(self) -> TracedModel:
        if not self.has_outputs:  # (the entry then failed to verify at `trace(...)`)
            raise user_error(f"{self.what} has no outputs: call m.output(...) before "
                             "m.traced (or its trace failed)")
        verify_located(self.module)
        return TracedModel(self.module, self.name, self.inputs, self.params)


class SubGraph(TracedRegion):
    """A named, possibly recursive function traced in place (`invoke.subgraph`).

    Creating it declares it (so it can be called before its body is traced:
    mutual recursion); `with sub:` traces the body; calling it emits an invoke.
    """

    def __init__(self, name: str, inputs: Sequence[Attribute], outputs: Sequence[Attribute]):
        check_name("a subgraph", name)
        check_types("input", inputs)
        check_types("output", outputs)
        owner = open_block().parent_op()
        if owner is not None and any(o.sym_name.data == name for o in invoke.callables(owner)):
            raise user_error(f"the name '{name}' is taken (by the model or another "
                             "subgraph): invokes of it would be ambiguous")
        self.name, self.output_types = name, list(outputs)
        self.op = invoke.SubgraphOp(name, (list(inputs), list(outputs)))
        self.op.location = user_location()
        self.inputs = [Tracer(a) for a in self.op.body.block.args]
        current_block().add_op(self.op)  # declared where it is created
        super().__init__(f"subgraph '{name}'", self.op.body.block)

    def output(self, *values: Any) -> None:
        self.check_output()
        results = [as_value(v) for v in values]
        got = [r.type for r in results]
        if got != self.output_types:
            raise user_error(
                f"subgraph '{self.name}' returns ({', '.join(map(str, got))}) but "
                f"declares ({', '.join(map(str, self.output_types))})"
            )
        emit(invoke.ReturnOp(*results), verify=False)
        self.has_outputs = True

    def __call__(self, *args: Any) -> Any:
        values = [as_value(a) for a in args]
        op = emit(invoke.InvokeOp(self.name, values, self.output_types))
        results = [Tracer(r) for r in op.results]
        return results[0] if len(results) == 1 else tuple(results)


def takes_no_arguments(fn: Callable[..., Any]) -> bool:
    """Whether `fn()` binds: a branch `lambda y: ...` was a TypeError raised
    in recir's call of it."""
    try:
        inspect.signature(fn).bind()
    except TypeError:
        return False
    except ValueError:  # (no signature to read: let the call say)
        return True
    return True


def cond(pred: Any, then_fn: Callable[[], Any], else_fn: Callable[[], Any]) -> Any:
    """`then_fn()` if `pred` else `else_fn()`: both traced, emitted as `scf.if`."""
    if not (callable(then_fn) and callable(else_fn)):
        raise user_error("cond takes functions for its branches (lambda: value), got "
                         f"{type(then_fn).__name__} and {type(else_fn).__name__}")
    if not (takes_no_arguments(then_fn) and takes_no_arguments(else_fn)):
        raise user_error("cond calls its branches with no arguments (lambda: value)")
    condition = as_value(pred)
    if condition.type != i1:
        raise user_error(f"cond needs a boolean (i1) predicate, got {condition.type}")
    # Trace both branches inside a result-less placeholder, so ops in them
    # see the enclosing function (invokes look their callee up there).
    placeholder = emit(scf.IfOp(condition, [], Region(Block()), Region(Block())), False)
    branches = []
    for fn, region in zip((then_fn, else_fn), placeholder.regions, strict=True):
        with insertion_block(region.block):
            out = fn()
            values = [as_value(v) for v in (out if isinstance(out, tuple) else (out,))]
            emit(scf.YieldOp(*values), verify=False)
        branches.append(([v.type for v in values], isinstance(out, tuple)))
    (then_types, is_tuple), (else_types, _) = branches
    if then_types != else_types:
        placeholder.detach()
        raise user_error(
            f"cond branches return different types: then ({', '.join(map(str, then_types))}), "
            f"else ({', '.join(map(str, else_types))})"
        )
    regions = [placeholder.detach_region(r) for r in list(placeholder.regions)]
    op = scf.IfOp(condition, then_types, *regions)
    op.location = placeholder.location
    Rewriter.replace_op(placeholder, op, [])  # (the placeholder has no results)
    results = [Tracer(r) for r in op.results]
    return tuple(results) if is_tuple else results[0]

