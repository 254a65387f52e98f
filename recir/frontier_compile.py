"""A traced model's frontier-batched IR, compiled by the one backend and run natively.

`recir.compile(model, batching="frontier")`: `invoke-to-frontier` gives
`@f__expand`, `@f__post` and `@entry__frontier`; the two batched functions
(and the entry's ops before its `frontier.schedule`, as a function of their
own) go through `FRONTIER_LOWER`, the same conversions as every function, and
`backend/frontier_schedule.py` runs the schedule with them. Each function gets an
object of its own, compiled by LLVM in a child process once lowered (`llvm_workers`),
which the first call waits for (`background`). The model's gradient loads the
expansion's (it runs the same `@f__expand`), or shares its compile while under way. With
`threads`, a height's rows split across one OpenMP team per call where the
cost model says it pays (`backend/native_schedule.py`), else the products
over rows split across their own teams (`passes/row_products.py`). A batch
of inputs becomes the batched entry's arguments as `invoke-to-frontier`
lays them out: a dynamic array as the trees' arrays one after another plus
the offsets where each starts, anything else stacked one row per element.
A call after one made as one native call repeats it on its plans
(`backend/repeat_call`); a native check's error names the element at fault.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from recir.backend import interrupts, stack
from recir.backend.arguments import batch_items, named_element
from recir.backend.background import Deferred
from recir.backend.cache import ObjectCache, cache_key, located_text
from recir.backend.engine import Engine, compile_object
from recir.backend.llvm_workers import compile_apart
from recir.backend.frontier_inputs import InputLayout
from recir.backend.frontier_schedule import NativeCalls, NativeRowFunction
from recir.backend.frontier_summary import NotCached, RowFacts, known_facts, through_summary
from recir.backend.kernels.compiled_gemm import link
from recir.backend.llvm_convert import to_llvm_ir
from recir.backend.native_loops import runtime
from recir.backend.native_schedule import NativeSchedule
from recir.backend.repeat_call import RepeatCall
from recir.backend.policy import costs
from recir.backend.schedule_specs import Spec, expansion_spec, height_spec
from recir.diagnostics import RecirError, emit_error
from recir.dialects import frontier
from recir.interpreter import find_entry
from recir.passes import gemm_kernels
from recir.passes.row_lowering import scratch_per_row
from recir.pipeline import (FRONTIER, collector_paused, frontier_lower_passes, resolve_threads,
                            run_passes)

BEFORE = "__before"  # the batched entry's ops before its schedule
NO_TIMEOUT = ("error: timeout= stops a recursion, and batching='frontier' runs none (one step "
              "a tree height): use batching='recursive' or 'auto' for calls with a timeout")


@collector_paused()
def compile_frontier(model: Any, *, cache_dir: Path | str | None = None,
                     threads: int | None = None) -> FrontierFunction:
    passes = FRONTIER.format(inputs=len(model.input_names))
    made_of, threads = origin(model, passes), resolve_threads(threads)

    def batched() -> tuple[ModuleOp, dict[str, Any]]:
        module = model.module.clone()
        run_passes(module, passes)
        return module, {}

    return through_summary(cache_dir, made_of, model.entry, batched, lambda module, facts, _: (
        FrontierFunction(module, model.entry, list(model.params.values()), cache_dir,
                         threads=threads, origin=made_of, facts=facts)))


def origin(model: Any, passes: str) -> str:
    """What a frontier function's IR is made from: the traced module printed
    with its locations and the passes run on it. With the code that runs
    them (`cache.compiler_digest`), it determines the IR, so the object
    cache is keyed by it, not by the larger IR printed again."""
    return f"{located_text(model.module)}\0{passes}"


def split_entry(entry: func.FuncOp) -> tuple[frontier.ScheduleOp, func.FuncOp | None]:
    """The entry's schedule, and its ops before it as `@<entry>__before`
    returning the schedule's operands (None where there are none)."""
    ops = list(entry.body.blocks[0].ops)
    schedules = [op for op in ops if isinstance(op, frontier.ScheduleOp)]
    if len(schedules) != 1:  # (a second invoke of the recursion: at the user's line)
        raise emit_error(schedules[1] if schedules else entry, "invokes the recursion again: "
                         "the batched form takes one invoke of it from the entry")
    schedule = schedules[0]
    after = ops[ops.index(schedule) + 1:]
    ret = after[-1]
    assert isinstance(ret, func.ReturnOp)
    if len(after) > 1:
        raise emit_error(after[0], "follows the recursion in the entry, which the batched "
                         "form does not compile yet: compute it inside the recursive function, "
                         "or return the recursion's result and compute it afterwards")
    if ops.index(schedule) == 0:
        return schedule, None
    if scalar := next((v for v in schedule.operands if not isinstance(v.type, TensorType)),
                      None):  # (the prefix, over rows, returns tensors only)
        raise emit_error(scalar.owner if isinstance(scalar.owner, Operation) else entry,
                         "passes a value the same for every tree down the recursion, which "
                         "the batched form takes only as an input of the model")
    before = entry.clone()
    before.sym_name = type(entry.sym_name)(entry.sym_name.data + BEFORE)
    copied_ops = list(before.body.blocks[0].ops)
    copied = copied_ops[ops.index(schedule)]
    Rewriter.insert_op(func.ReturnOp(*copied.operands), InsertPoint.before(copied))
    for op in reversed(copied_ops[ops.index(schedule):]):
        Rewriter.erase_op(op, safe_erase=False)
    before.function_type = func.FunctionType.from_lists(
        list(entry.function_type.inputs), [v.type for v in schedule.operands])
    return schedule, before


class FrontierFunction:
    """A batch of inputs in, each element's outputs out (as `NativeFunction.batch`)."""

    def __init__(self, module: ModuleOp, entry: str, params: Sequence[np.ndarray],
                 cache_dir: Path | str | None, extra: Sequence[str] = (), threads: int = 1,
                 forward: bool = True, origin: str | None = None, later: str = "",
                 facts: dict[str, RowFacts] | None = None):
        """`extra`: more functions of `module` to compile (a backward); `threads`: the
        most threads a product over rows runs on; `forward`: whether to compile `@post`
        and the entry's ops before the schedule (a gradient function runs their `_fwd`s
        instead); `origin`: what `module` was made from (`origin()`) before `later`,
        passes that leave `@expand` as it is (a gradient's), else the functions are
        printed for the cache keys; `facts`: the compiled functions' `RowFacts` where
        they are declarations (`frontier_summary`). Ctrl-C stops its calls."""
        interrupts.install()  # (here, before LLVM's lock is busy with its objects)
        self.original = find_entry(module, entry)
        self.entry = find_entry(module, f"{entry}__frontier")
        self.params = [np.ascontiguousarray(p, np.float32) for p in params]
        self.schedule, before = split_entry(self.entry)
        names = [self.schedule.expand.root_reference.data,
                 self.schedule.post.root_reference.data]
        compiled = [*names[1:2], *extra] if forward else list(extra)
        functions = [find_entry(module, n) for n in compiled]
        if before is not None and forward:
            functions.append(before)
        post, expand = find_entry(module, names[1]), find_entry(module, names[0])
        self.row_facts = {f.sym_name.data: known_facts(f, facts) for f in [expand, *functions]}
        loops: dict[str, Spec] = {f.sym_name.data: height_spec(
            self.schedule, post, find_entry(module, f.sym_name.data), threads, costs(cache_dir),
            self.row_facts[f.sym_name.data]) for f in functions
            if f.sym_name.data.startswith(names[1])}
        made = None if origin is None else f"{origin}\0{later}\0{entry} {compiled} {forward}"
        # each function an object of its own; the expansion's keyed without
        # `later`: a gradient runs the inference's `@expand` (the same
        # schedule forward), so whichever of the two compiles second loads it
        loops[names[0]] = expansion_spec(self.schedule, expand)
        # lowered here; LLVM's half goes on while the caller does (`background`)
        self.made = Deferred(lowered_rows(
            [([expand], None if origin is None else f"{origin}\0{entry} expansion"),
             *(([f], None if made is None else f"{made}\0{f.sym_name.data}")
               for f in functions)], cache_dir, threads, loops, self.row_facts))
        self.post, self.compiled = post, {f.sym_name.data for f in functions}
        self.before_name = before.sym_name.data if before is not None else None
        self.calls = threading.Lock()  # the native functions' scratch serves one call
        self.layout = InputLayout(self.original, len(self.params))
        self.flow = Flow(self.entry, self.schedule, before is not None)
        self.facts: Any = None  # `Schedule.facts`, from the first call
        self.again: RepeatCall | None = None  # the last call's, made again (`repeat_call`)

    def __call__(self, *inputs: Any, timeout: float | None = None) -> tuple[Any, ...]:
        if timeout is not None:  # (`recursive`'s and `auto`'s calls take one)
            raise RecirError(NO_TIMEOUT)
        return self.batch([inputs])[0]

    def wait(self) -> FrontierFunction:
        """This function, its code loaded (as `NativeFunction.wait`)."""
        self.native  # noqa: B018 (loaded on first use)
        return self

    @functools.cached_property
    def native(self) -> NativeCalls:
        """The compiled functions, once LLVM is done; raises what it raised."""
        calls = self.made.get()
        calls.callees.setdefault(self.post.sym_name.data, self.post)  # (its signature)
        return calls

    @functools.cached_property
    def before(self) -> Any:
        """The entry's ops before its schedule, compiled; None where none."""
        return self.native.functions.get(self.before_name) if self.before_name else None

    def entry_args(self, batch: Sequence[Sequence[Any]]) -> list[Any]:
        """Each input checked and converted as every path does it
        (`coerce_argument`), then laid out as the batched entry takes it."""
        return self.layout(batch) + self.params

    def batch(self, batch: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        batch = batch_items(batch, self.original.sym_name.data)
        if not batch:
            return []
        with self.calls:
            try:
                return stack.with_room(lambda: self.run(batch))
            except RecirError as error:
                raise named_element(error, batch, lambda inputs: stack.with_room(
                    lambda: self.run([inputs]))) from None

    def run(self, batch: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        args, flow = self.entry_args(batch), self.flow
        inputs = flow.inputs(args, self.before(args) if self.before is not None else ())
        count = flow.moving
        outputs = None if self.again is None else self.again.repeat(
            inputs[:count], inputs[count:], flow.wanted)
        if outputs is None:  # not a call to repeat: the schedule's, its plans for the next
            self.again, calls = None, self.native  # (calls: an interpreter's call_op, natively)
            schedule = NativeSchedule(calls, self.schedule, inputs[:count], inputs[count:],
                                      self.facts)
            self.facts = schedule.facts  # the callees, found once
            outputs, self.again = schedule.run(flow.wanted), RepeatCall.after(schedule)
        return per_element(flow.results(args, inputs, outputs), len(batch), flow.fresh)


class Flow:
    """Where the schedule's operands and the batched entry's results come
    from, as positions worked out once: the entry's arguments, the
    schedule's operands (the prefix's results, where there is a prefix),
    then the schedule's outputs (later ones win, as values bound later)."""

    def __init__(self, entry: func.FuncOp, schedule: frontier.ScheduleOp, before: bool):
        block = entry.body.blocks[0]
        args, operands = list(block.args), list(schedule.operands)
        places: dict[SSAValue, int] = {v: k for k, v in enumerate(args)}
        self.operands = None if before else [places[v] for v in operands]
        self.moving, self.count = len(schedule.moving), len(operands)
        if before:
            places.update((v, len(args) + j) for j, v in enumerate(operands))
        places.update((v, len(args) + len(operands) + j)
                      for j, v in enumerate(schedule.outputs))
        ret = block.last_op
        assert ret is not None
        missing = [v for v in ret.operands if v not in places]
        if missing:
            raise emit_error(ret, "a batched entry returns only its arguments and "
                             "its schedule's operands and outputs")
        self.returned = [places[v] for v in ret.operands]
        # the schedule's outputs returned: only those gathered, fresh once returned
        first = len(args) + len(operands)
        self.wanted = frozenset(k - first for k in self.returned if k >= first)
        self.fresh = [k >= first and k not in self.returned[:j]
                      for j, k in enumerate(self.returned)]

    def inputs(self, args: Sequence[Any], before: Sequence[Any]) -> list[Any]:
        """The schedule's operands: the prefix's results where it has one."""
        return list(before) if self.operands is None else [args[k] for k in self.operands]

    def results(self, args: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any]
                ) -> list[Any]:
        bound = [*args, *inputs, *outputs]
        return [bound[k] for k in self.returned]


def per_element(results: Sequence[np.ndarray], count: int,
                fresh: Sequence[bool]) -> list[tuple[Any, ...]]:
    """Each batch element's outputs as a native call returns them: a scalar as a
    Python number, a tensor as a row of a copy (of itself where `fresh`)."""
    columns = [r.tolist() if r.ndim == 1 else list(r if new else r.copy())
               for r, new in zip(results, fresh, strict=True)]
    if not columns:
        return [() for _ in range(count)]
    return list(zip(*columns, strict=True))


Part = tuple[list[func.FuncOp], str | None]  # functions, what determines them


def compile_rows(parts: Sequence[Part], cache_dir: Path | str | None, threads: int = 1,
                 loops: dict[str, Spec] | None = None,
                 facts: dict[str, RowFacts] | None = None) -> NativeCalls:
    """Each part's functions over rows through `FRONTIER_LOWER` (its
    products over rows on up to `threads` threads) as an object of its own,
    with a height loop beside each function `loops` names, from the object
    cache when it has them (keyed by the part's origin, what determines its
    functions, where given); `facts`: their `RowFacts`, else found in them."""
    return lowered_rows(parts, cache_dir, threads, loops, facts)()


def lowered_rows(parts: Sequence[Part], cache_dir: Path | str | None, threads: int = 1,
                 loops: dict[str, Spec] | None = None,
                 facts: dict[str, RowFacts] | None = None) -> Callable[[], NativeCalls]:
    """`compile_rows` with each part lowered here, its LLVM started in a
    child as soon as it is (`llvm_workers.compile_apart`); the call returned
    waits for the objects (compiling here what a child did not) and loads
    them."""
    loops, folder = loops or {}, ObjectCache(cache_dir).directory  # (the kernels' too)
    with collector_paused():
        pending = [lowered_object(functions, cache_dir, threads, loops, origin)
                   for functions, origin in parts]

    def load() -> NativeCalls:
        return joined(folder, *(loaded(functions, *made(), loops, facts, folder)
                                for (functions, _), made in zip(parts, pending, strict=True)))
    return load


def loaded(functions: list[func.FuncOp], obj: bytes, sites: list[str], links: list[str],
           per_row: dict[str, int], loops: dict[str, Spec],
           facts: dict[str, RowFacts] | None, folder: Path | None = None) -> NativeCalls:
    """`compile_rows`' calls into one object's functions."""
    link(links, folder)  # the kernels it calls (kept in `folder`), resolvable before it loads
    engine = Engine(obj)
    calls = NativeCalls({f.sym_name.data: NativeRowFunction(
        engine, f, sites, per_row.get(f.sym_name.data, 0),
        None if facts is None else facts[f.sym_name.data]) for f in functions})
    calls.loops = {f.sym_name.data: runtime(loops[f.sym_name.data], calls.functions[
        f.sym_name.data]) for f in functions if f.sym_name.data in loops}
    calls.callees = {f.sym_name.data: f for f in functions}
    calls.engine = engine  # type: ignore[attr-defined]  # owns the code
    return calls


def joined(folder: Path | None, *parts: NativeCalls) -> NativeCalls:
    """One `NativeCalls` over the functions of several objects (`folder`: their cache's)."""
    calls = NativeCalls({name: f for part in parts for name, f in part.functions.items()})
    calls.loops = {name: loop for part in parts for name, loop in part.loops.items()}
    calls.callees = {name: f for part in parts for name, f in part.callees.items()}
    calls.engines, calls.folder = [part.engine for part in parts], folder  # type: ignore[attr-defined]
    return calls


Built = tuple[bytes, list[str], list[str], dict[str, int]]


def lowered_object(functions: list[func.FuncOp], cache_dir: Path | str | None, threads: int,
                   loops: dict[str, Spec], origin: str | None) -> Callable[[], Built]:
    """A call for a part's object (on a cache miss lowered here, its LLVM
    started apart), its error sites, the kernel sets it links and each
    function's scratch bytes a row."""
    passes = frontier_lower_passes(threads, cache_dir)
    teams = sorted((f.sym_name.data, getattr(loops.get(f.sym_name.data), "threads", 1))
                   for f in functions if f.sym_name.data in loops)
    text = origin if origin is not None else located_text(public_copies(functions))
    key = cache_key(text, f"frontier {passes} loops {teams}")
    cache = ObjectCache(cache_dir)
    under_way = UNDER_WAY.get((cache.directory, key))
    if under_way is not None:  # another function's part, its LLVM still at work: shared
        return under_way
    hit = cache.load(key, {"sites": list[str], "links": list[str], "scratch": list[str],
                           "per_row": list[int]})
    if hit is not None:
        per_row = dict(zip(hit[1]["scratch"], hit[1]["per_row"], strict=False))
        built = (hit[0], hit[1]["sites"], hit[1]["links"], per_row)
        return lambda: built
    if any(not f.body.blocks for f in functions):  # a summary's declarations
        raise NotCached(key)
    module = public_copies(functions)
    run_passes(module, passes)
    sites = [s.data for s in module.attributes.pop("recir.error_sites").data]
    per_row = scratch_per_row(module)
    links = gemm_kernels.links(module)
    lowered = {op.sym_name.data: op for op in module.body.blocks[0].ops
               if isinstance(op, llvm.FuncOp)}
    for name in [f.sym_name.data for f in functions if f.sym_name.data in loops]:
        for op in loops[name].build(lowered[name], sites):
            if not (isinstance(op, llvm.FuncOp) and op.sym_name.data in lowered):
                module.body.blocks[0].add_op(op)
                lowered[op.sym_name.data] = op
    text = to_llvm_ir(module)
    # `engine.ROW_CODE`; in a child from now on, where it may (`llvm_workers`)
    made = compile_apart(text, lambda text: compile_object(text, rows=True), rows=True)
    lock, built = threading.Lock(), []

    def compiled() -> Built:  # once, for every function that shares the part
        with lock:
            if not built:
                try:
                    obj = made()
                    cache.store(key, obj, {"sites": sites, "links": links,
                                           "scratch": list(per_row),
                                           "per_row": list(per_row.values())})
                    built.append((obj, sites, links, per_row))
                finally:
                    UNDER_WAY.pop((cache.directory, key), None)
            return built[0]
    UNDER_WAY[(cache.directory, key)] = compiled
    return compiled


# parts whose LLVM is under way, by cache directory and key: a gradient
# compiled right after its inference shares the inference's expansion
UNDER_WAY: dict[tuple[Path, str], Callable[[], Built]] = {}


def public_copies(functions: list[func.FuncOp]) -> ModuleOp:
    """A module of copies of `functions`, each public: called from outside."""
    copies = [f.clone() for f in functions]
    for f in copies:
        f.sym_visibility = None
    return ModuleOp(copies)
