"""LLVM IR text to an object file, in this process or in a child.

`compile_object` optimizes at O3 with the loop and SLP vectorizers for the
host CPU and emits an object file. This module imports llvmlite and the
standard library alone: a child process (`llvm_workers`) loads it by its
path, without recir's package and its xDSL (half a second of imports), and
compiles a part of a module beside its parent (`serve`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import BinaryIO

import llvmlite.binding as llvm


@functools.cache
def _initialize() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.cache
def host_cpu() -> tuple[str, str]:
    """The host CPU's name and features, asked once: LLVM reads them from
    the CPU again on every query, which costs a third of making an engine."""
    _initialize()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def target_machine() -> llvm.TargetMachine:
    _initialize()
    target = llvm.Target.from_default_triple()
    cpu, features = host_cpu()
    return target.create_target_machine(
        cpu=cpu,
        features=features,
        opt=3,
        reloc="pic",
        codemodel="jitdefault",
    )


# LLVM's optimisation pipeline for generated code (`bench/run.py compile`
# times the levels on the same IR).
OPT_LEVEL = 3


def optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine, level: int = 3,
             unrolling: bool = True, slp: bool = True) -> None:
    options = llvm.create_pipeline_tuning_options(speed_level=level)
    options.loop_vectorization = True
    options.slp_vectorization = slp
    options.loop_unrolling = unrolling
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)


# Every function starts on a cache line, the x86 decoders' and uop cache's
# window: a function's code then meets those windows the same way whatever
# was emitted before it. A recursive function's serial clone ran 11% slower
# than the same machine code compiled alone (fib(35)) only by where it fell.
FUNCTION_ALIGNMENT = 64


def aligned_functions(ir_text: str) -> str:
    """`ir_text` with `align FUNCTION_ALIGNMENT` on each definition
    (llvmlite's IR builder has no alignment for functions): at the end of
    its header, before a `{` there. A quoted name is read whole: llvmlite
    escapes its quotes but not its newlines, so a header may span lines.
    (LLVM takes no `align` after function metadata or a personality, which
    llvmlite writes last: the code sets neither, and LLVM would name the line.)"""
    return DEFINITION.sub(rf"\1 align {FUNCTION_ALIGNMENT}\2", ir_text)


DEFINITION = re.compile(r'^(define (?:"[^"]*"|[^"\n])*?)(\s*\{)?$', re.M)


def compile_object(ir_text: str, timings: dict[str, float] | None = None,
                   level: int | None = None, rows: bool = False) -> bytes:
    """An object file of `ir_text` optimised at `level` (default OPT_LEVEL);
    `timings` gets the CPU seconds of each step (parse, verify, optimize,
    codegen). `rows`: the module is batched code over rows, compiled
    without the loop unroller, the SLP vectorizer and loop strength
    reduction (`ROW_CODE`)."""
    clock, times = time.process_time, {}
    start = clock()
    machine = target_machine()
    module = llvm.parse_assembly(aligned_functions(ir_text))
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    times["llvm-parse"], start = clock() - start, clock()
    module.verify()
    times["llvm-verify"], start = clock() - start, clock()
    optimize(module, machine, OPT_LEVEL if level is None else level, unrolling=not rows,
             slp=not rows)
    times["llvm-optimize"], start = clock() - start, clock()
    with LSR_GATE.setting(not rows):
        obj = machine.emit_object(module)
    times["llvm-codegen"] = clock() - start
    if timings is not None:
        timings.update(times)
    return obj


class CodegenSetting:
    """A codegen option that LLVM holds process-wide (`llvm.set_option`
    sets a command-line flag), chosen per object: emits under one setting
    overlap one another, and one under the other setting waits for them to
    finish, so a compile on another thread never runs under a flag that was
    not its own. `flag` names one of LLVM's `disable-...` options."""

    def __init__(self, flag: str):
        self.flag = flag
        self.changed = threading.Condition()
        self.current = True  # LLVM's default: the pass runs
        self.active = 0  # emits running under `current`

    @contextlib.contextmanager
    def setting(self, enabled: bool) -> Iterator[None]:
        with self.changed:
            while self.active and self.current != enabled:
                self.changed.wait()
            if self.current != enabled:
                _initialize()
                llvm.set_option("", f"-{self.flag}={'false' if enabled else 'true'}")
                self.current = enabled
            self.active += 1
        try:
            yield
        finally:
            with self.changed:
                self.active -= 1
                if not self.active:
                    self.changed.notify_all()


# ROW_CODE: batched code over rows (`rows=True`) skips three passes.
# Its functions hold many row loops, each vectorized and interleaved, with
# epilogue and scalar forms and runtime alias checks between its row
# buffers. The trip count of a row loop is the row width, a constant: the
# full unroller then copies each vectorized body a few times over, doubling
# the code the rest of the pipeline and codegen work through for a few loop
# branches saved per row. Its straight-line code is the loops' setup, which
# the SLP vectorizer finds nothing worth packing in, yet it searches the long
# blocks of a fused loop's scalar form and alias checks, which grow with the
# product of the loop's outputs and inputs (a TreeLSTM `_fwd`'s cell loop
# writes eight rows and reads seven; `bench/run.py compile` times it).
# Loop strength reduction's search over the addressing formulas of a loop's
# induction-variable uses grows faster than linearly with them; such
# functions spend most of their codegen there, while the loops step their
# rows with unit or constant strides that x86 addressing modes cover anyway.
# The code runs as fast either way (`bench/run.py batching` cells and
# TreeRNN, RNTN and TreeLSTM batches, alternated in one process).
LSR_GATE = CodegenSetting("disable-lsr")


# llvmlite's one lock, which every call into LLVM takes (None where its
# internals differ: forks are then as llvmlite leaves them)
_LLVM_LOCK = getattr(getattr(getattr(llvm.ffi, "lib", None), "_lock", None), "_lock", None)


def _llvm_held() -> None:
    """Before a fork: wait for any LLVM call another thread is in, and
    hold the lock across the fork. Held by a compile's thread at the fork,
    it would stay held in the child, where that thread does not exist: its
    first LLVM call (finishing the compile itself, `background.Deferred`)
    would wait forever."""
    if _LLVM_LOCK is not None:
        _LLVM_LOCK.acquire()


def _llvm_released() -> None:
    if _LLVM_LOCK is not None:
        _LLVM_LOCK.release()


def _forked() -> None:
    """In a fork's child: LLVM free again, and no emit under way (a
    thread counted in `LSR_GATE.active` is the parent's)."""
    _llvm_released()
    LSR_GATE.changed, LSR_GATE.active = threading.Condition(), 0


os.register_at_fork(before=_llvm_held, after_in_parent=_llvm_released,
                    after_in_child=_forked)


def serve(source: BinaryIO, sink: BinaryIO, level: int, rows: bool) -> int:
    """A child's work: the IR text read from `source` (to its end) compiled
    at `level` (its parent's `OPT_LEVEL`; `rows` as `compile_object`'s), the
    object written to `sink`; an exit status (1: LLVM refused the IR, its
    message on stderr)."""
    text = source.read().decode()
    try:
        obj = compile_object(text, level=level, rows=rows)
    except RuntimeError as error:  # llvmlite's: a parse or verify failure
        sys.stderr.write(f"{error}\n")
        return 1
    sink.write(obj)
    sink.flush()
    return 0
