"""The native context's layout is declared once (`CONTEXT_FIELDS`): the
offsets the passes emit (the runtime's ctypes `Context`'s) and LLVM's layout
of the generated struct type must agree field by field."""

import ctypes

import llvmlite.binding as llvm
from xdsl.backend.llvm.convert_type import convert_type

from recir.backend.engine import target_machine
from recir.passes.native_context import (
    C_TYPES,
    CONTEXT_BYTES,
    CONTEXT_FIELDS,
    OFFSETS,
    context_type,
)


def test_llvm_lays_out_the_struct_as_the_declaration_says():
    typ = convert_type(context_type())
    module = llvm.parse_assembly(f"@ctx = external global {typ}")
    data = target_machine().target_data
    struct = module.get_global_variable("ctx").global_value_type
    assert data.get_abi_size(struct) == CONTEXT_BYTES
    for k, (name, _) in enumerate(CONTEXT_FIELDS):
        assert data.get_element_offset(struct, k) == OFFSETS[name], name


def test_fields_are_in_order_and_naturally_aligned():
    """ctypes (C) lays the struct out: each field after the one before, at a
    multiple of its size, and arrays of contexts keep every field aligned."""
    end = 0
    for name, kind in CONTEXT_FIELDS:
        size = ctypes.sizeof(C_TYPES[kind])
        assert OFFSETS[name] >= end and OFFSETS[name] % size == 0, name
        end = OFFSETS[name] + size
    assert end <= CONTEXT_BYTES < end + 8 and CONTEXT_BYTES % 8 == 0
