"""LLVM IR to machine code with llvmlite, and an MCJIT engine to run it.

`compile_object` optimizes at O3 with the loop and SLP vectorizers for the
host CPU and emits an object file; `Engine` loads such an object (fresh or
from the on-disk cache, so a warm start skips LLVM entirely). Every engine
gets its own TargetMachine: llvmlite crashes if one outlives its engine.
"""

from __future__ import annotations

import functools

import llvmlite
import llvmlite.binding as llvm


@functools.cache
def _initialize() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def target_machine() -> llvm.TargetMachine:
    _initialize()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=3,
        reloc="pic",
        codemodel="jitdefault",
    )


@functools.cache
def host_description() -> str:
    """What a cached object depends on besides the IR: CPU and library versions."""
    _initialize()
    return "|".join((llvm.get_process_triple(), llvm.get_host_cpu_name(),
                     llvm.get_host_cpu_features().flatten(), llvmlite.__version__))


def optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> None:
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_unrolling = True
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)


def compile_object(ir_text: str) -> bytes:
    machine = target_machine()
    module = llvm.parse_assembly(ir_text)
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    module.verify()
    optimize(module, machine)
    return machine.emit_object(module)


def optimized_ir(ir_text: str) -> str:
    """The O3 LLVM IR, for inspection (`recir-run --print-llvm`)."""
    machine = target_machine()
    module = llvm.parse_assembly(ir_text)
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    optimize(module, machine)
    return str(module)


class Engine:
    """An MCJIT engine holding one object file's functions."""

    def __init__(self, obj: bytes):
        self.machine = target_machine()
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.machine)
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self.engine.finalize_object()

    def has(self, name: str) -> bool:
        return bool(self.engine.get_function_address(name))

    def address(self, name: str) -> int:
        address = self.engine.get_function_address(name)
        if not address:
            raise KeyError(f"no native function named {name}")
        return address


_libgomp: list[bool] = []


def load_libgomp() -> bool:
    """Makes libgomp's task API visible to generated code; False if missing."""
    if not _libgomp:
        try:
            llvm.load_library_permanently("libgomp.so.1")
            _libgomp.append(True)
        except RuntimeError:
            _libgomp.append(False)
    return _libgomp[0]
