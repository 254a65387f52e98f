"""The native context's layout is declared once (`CONTEXT_FIELDS`): the
offsets the passes emit, LLVM's layout of the generated struct type and the
runtime's ctypes `Context` must agree field by field."""

import ctypes

import llvmlite.binding as llvm
from xdsl.backend.llvm.convert_type import convert_type

from recir.backend.contexts import Context
from recir.backend.engine import target_machine
from recir.passes.native_context import (
    CONTEXT_BYTES,
    CONTEXT_FIELDS,
    OFFSETS,
    context_type,
    layout,
)


def test_llvm_lays_out_the_struct_as_the_declaration_says():
    typ = convert_type(context_type())
    module = llvm.parse_assembly(f"@ctx = external global {typ}")
    data = target_machine().target_data
    struct = module.get_global_variable("ctx").global_value_type
    assert data.get_abi_size(struct) == CONTEXT_BYTES
    for k, (name, _) in enumerate(CONTEXT_FIELDS):
        assert data.get_element_offset(struct, k) == OFFSETS[name], name


def test_ctypes_lays_out_the_struct_as_the_declaration_says():
    assert ctypes.sizeof(Context) == CONTEXT_BYTES
    assert [(name, getattr(Context, name).offset) for name, _ in CONTEXT_FIELDS] == list(
        OFFSETS.items())


def test_layout_aligns_each_field_and_pads_the_end():
    offsets, size = layout((("a", "i32"), ("b", "ptr"), ("c", "i32")))
    assert offsets == {"a": 0, "b": 8, "c": 16}
    assert size == 24
