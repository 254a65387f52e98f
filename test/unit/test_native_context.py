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
    LINE_BYTES,
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
    multiple of its size, and arrays of contexts keep every field aligned,
    each context on whole cache lines."""
    end = 0
    for name, kind in CONTEXT_FIELDS:
        size = ctypes.sizeof(C_TYPES[kind])
        assert OFFSETS[name] >= end and OFFSETS[name] % size == 0, name
        end = OFFSETS[name] + size
    assert end <= CONTEXT_BYTES < end + LINE_BYTES and CONTEXT_BYTES % LINE_BYTES == 0


def test_a_teams_contexts_and_outer_logs_each_have_whole_cache_lines():
    """No two threads' contexts, nor their log descriptors, share a line:
    each thread writes its own often (a tape frame, a log record)."""
    from recir.backend.contexts import team_contexts
    from recir.backend.outer_logs import LogDescriptor, OuterLogs

    for threads in (1, 2, 3, 5):
        contexts = team_contexts(threads)
        starts = [ctypes.addressof(ctx) for ctx in contexts.views]
        assert all(at % LINE_BYTES == 0 for at in starts)
        assert starts == [starts[0] + k * CONTEXT_BYTES for k in range(threads)]
        assert all(ctx.stack_limit == 0 and ctx.error == 0 for ctx in contexts.views)
        for arguments in (1, 3, 7):
            logs = OuterLogs(contexts.views, arguments, [(arguments - 1, 4, 4)])
            tables = [ctx.outer_logs for ctx in contexts.views]
            assert all(at % LINE_BYTES == 0 for at in tables)
            assert all(b - a >= arguments * ctypes.sizeof(LogDescriptor)
                       for a, b in zip(tables, tables[1:], strict=False))
            logs.add_into([0] * arguments)  # gives the logs' buffers back
