"""IR a compiler developer can write by hand (generic syntax, any entry
function) is refused with one located error or runs right natively: never a
traceback from a verifier reading another op's missing property, never
native results read in the wrong order or in the wrong type."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from recir.context import make_context
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.parsing import parse_module
from recir.pipeline import compile_module
from recir.tools import recir_opt, recir_run

FRONTIER_OPS = Path(__file__).resolve().parents[1] / "dialects/frontier/ops.mlir"

RECURSIVE = """func.func @f(%n: i32) -> i32 {{
  "invoke.subgraph"() <{{{props}}}> ({{
  ^bb0(%k: i32):
    "invoke.return"(%k) : (i32) -> ()
  }}) : () -> ()
  %r = invoke.invoke @rec(%n) : (i32) -> i32
  func.return %r : i32
}}"""

DATAFLOW_CALL = """dataflow.graph @g(%x: i32) -> i32 {{
  %y = "dataflow.call"(%x) <{{{props}}}> : (i32) -> i32
  dataflow.output %y : i32
}}"""


def parse(text: str):
    return parse_module(make_context(), text, "hand.mlir")


@pytest.mark.parametrize("text, message", [
    (RECURSIVE.format(props='function_type = (i32) -> i32'), "property 'sym_name' expected"),
    (RECURSIVE.format(props='sym_name = 3 : i64, function_type = (i32) -> i32'),
     "property 'sym_name'"),
    (RECURSIVE.format(props='sym_name = "rec"'), "property 'function_type' expected"),
    (RECURSIVE.format(props='sym_name = "rec", function_type = "x"'),
     "property 'function_type'"),
    (DATAFLOW_CALL.format(props='site = 0 : i64'), "property 'callee' expected"),
    (DATAFLOW_CALL.format(props='callee = "g", site = 0 : i64'), "property 'callee'"),
    (DATAFLOW_CALL.format(props='callee = @g, site = "x"'), "property 'site'"),
])
def test_a_property_another_op_reads_is_checked_first(text, message):
    with pytest.raises(RecirError, match=message) as e:
        parse(text)
    assert str(e.value).startswith("hand.mlir:")


CMPI = """func.func @f(%a: i32, %b: {rhs}) -> i32 {{
  %c = "arith.cmpi"(%a, %b) <{{predicate = {p} : i64}}> : (i32, {rhs}) -> i1
  %r = arith.extui %c : i1 to i32
  func.return %r : i32
}}"""


@pytest.mark.parametrize("p, rhs, message", [
    (-1, "i32", "unknown predicate -1"),  # was read as the last predicate, uge
    (10, "i32", "unknown predicate 10"),
    (2**62, "i32", "unknown predicate"),  # printing it raised IndexError
    (2, "i64", "operands of different types: i32 and i64"),
])
def test_arith_comparisons_are_checked(p, rhs, message):
    with pytest.raises(RecirError, match=message):
        parse(CMPI.format(p=p, rhs=rhs))


def test_a_schedule_with_more_sites_than_results_is_refused():
    text = FRONTIER_OPS.read_text().replace(
        "shared(%step) {sites = 1 : i64} : (tensor<?xi32>), (i32) -> (tensor<?xi32>)",
        "shared(%step) {sites = 4611686018427387904 : i64} : (tensor<?xi32>), (i32) -> "
        "(tensor<?xi32>)")
    assert "4611686018427387904" in text
    with pytest.raises(RecirError, match="sites = 4611686018427387904.*at most 1 sites"):
        parse(text)  # (was a MemoryError: a list of 2**62 types)


MIXED = """func.func @m(%a: i32, %x: tensor<2xf32>) -> (i32, tensor<2xf32>, f32) {
  invoke.subgraph @twice(%v: tensor<2xf32>) -> tensor<2xf32> {
    %y = tmath.add %v, %v : tensor<2xf32>
    invoke.return %y : tensor<2xf32>
  }
  %y = invoke.invoke @twice(%x) : (tensor<2xf32>) -> tensor<2xf32>
  %z = invoke.invoke @twice(%x) : (tensor<2xf32>) -> tensor<2xf32>
  %s = tmath.add %y, %z : tensor<2xf32>
  %b = arith.constant 7.5 : f32
  func.return %a, %s, %b : i32, tensor<2xf32>, f32
}"""


@pytest.mark.parametrize("threads", [1, 2])
def test_scalar_and_tensor_results_come_back_in_order(cache_dir, threads):
    """Two scalar results and a tensor between them: the tensor's data was
    written through the first scalar's 4-byte slot (out of its bounds), the
    scalars read from the tensor's buffer; a batch on a team the same."""
    module = parse(MIXED)
    x = np.array([1.5, -2.0], np.float32)
    inputs = [(5, x), (-3, 2 * x)]
    expected = [run_function(module, "m", list(args)) for args in inputs]
    native = compile_module(module, "m", cache_dir=cache_dir, threads=threads)
    assert bool(native.team) == (threads > 1)
    for got, want in zip([native(*inputs[0]), *native.batch(inputs)], [expected[0], *expected]):
        assert (got[0], got[2]) == (want[0], want[2])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("signature, message", [
    ("func.func private @f(%a: i32) -> i32", "@f is private"),
    ("func.func @f(%a: tensor<3xi32>) -> tensor<3xi32>", "result 0 .*returns tensors of f32"),
    ("func.func @f(%a: tensor<?xf32>) -> tensor<?xf32>", "result 0 .*static shape"),
    ("func.func @f(%a: tensor<3xi64>) -> tensor<3xi64>", "argument 0 .*tensors of f32 or i32"),
    ("func.func @f(%a: index) -> index", "argument 0 \\(index\\)"),
])
def test_a_signature_native_code_cannot_pass_is_refused(cache_dir, signature, message):
    """These compiled, then read an i64 tensor as i32 data, returned an i32
    tensor's bits as floats, or failed with a KeyError or a NumPy error."""
    typ = signature.rsplit("-> ", 1)[1]
    module = parse(f"{signature} {{\n  func.return %a : {typ}\n}}")
    with pytest.raises(RecirError, match=message) as e:
        compile_module(module, "f", cache_dir=cache_dir)
    assert str(e.value).startswith("hand.mlir:1:1: error: 'func.func' op")


@pytest.mark.parametrize("signature", ["func.func @logged()",
                                       "func.func @logged(%a: tensor<4xf32>)",
                                       "func.func @logged(%a: tensor<?x4xf32>)"])
def test_a_log_reserve_slot_must_name_an_f32_matrix_argument(cache_dir, signature):
    """The runtime adds each thread's log into the entry's argument `slot`
    after the call: an IndexError when there was none."""
    module = parse(f"{signature} {{\n  %room = adjoint.log_reserve slot 0 bytes 28\n"
                   "  func.return\n}")
    with pytest.raises(RecirError, match=r"^hand.mlir:2:3: error: 'adjoint.log_reserve' op "
                       r"slot 0 names no static f32 matrix argument of the entry @logged$"):
        compile_module(module, "logged", cache_dir=cache_dir)


DIVISIONS = """func.func @div(%a: i32, %b: i32) -> i32 {
  %c = arith.divsi %a, %b : i32
  func.return %c : i32
}
func.func @rem(%a: i32, %b: i32) -> i32 {
  %c = arith.remsi %a, %b : i32
  func.return %c : i32
}
func.func @remu(%a: i32, %b: i32) -> i32 {
  %c = arith.remui %a, %b : i32
  func.return %c : i32
}"""


@pytest.mark.parametrize("entry, a, b, message", [
    ("div", 1, 0, "division by zero"), ("rem", 1, 0, "division by zero"),
    ("remu", 1, 0, "division by zero"),
    ("div", -2**31, -1, "overflows"), ("rem", -2**31, -1, "overflows"),
])
def test_the_interpreter_checks_divisions_as_native_code_does(cache_dir, entry, a, b, message):
    """xDSL's interpreter asserted (a traceback) on a zero divisor and
    returned INT_MIN for INT_MIN / -1, where native code reports both."""
    module = parse(DIVISIONS)
    for run in (lambda: run_function(module, entry, [a, b]),
                lambda: compile_module(module, entry, cache_dir=cache_dir)(a, b)):
        with pytest.raises(RecirError, match=f"hand.mlir:\\d+:3: error: 'arith.\\w+' op {message}"):
            run()
    assert run_function(module, "div", [-7, 2]) == (-3,)
    assert run_function(module, "rem", [-7, 2]) == (-1,)


@pytest.mark.parametrize("step", [0, -1])
def test_a_loop_step_that_is_not_positive_is_an_error(cache_dir, step):
    """Step 0: a ValueError traceback from the interpreter, native code looped
    forever; step -1: the interpreter ran no iteration (0), native code
    looped until the index wrapped (-2147483647)."""
    module = parse("""func.func @f(%n: i32, %step: i32) -> i32 {
  %z = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  %r = scf.for %i = %z to %n step %step iter_args(%acc = %z) -> (i32) : i32 {
    %a = arith.addi %acc, %one : i32
    scf.yield %a : i32
  }
  func.return %r : i32
}""")
    native = compile_module(module, "f", cache_dir=cache_dir)
    assert run_function(module, "f", [7, 2]) == native(7, 2) == (4,)
    for run in (lambda: run_function(module, "f", [7, step]), lambda: native(7, step)):
        with pytest.raises(RecirError, match="hand.mlir:4:3: error: 'scf.for' op step must "
                                             "be positive"):
            run()


def test_an_i1_result_is_a_bool_in_the_interpreter_as_in_native_code(cache_dir):
    module = parse("""func.func @f(%a: i32) -> (i1, i32) {
  %t = arith.constant true
  func.return %t, %a : i1, i32
}""")
    native = compile_module(module, "f", cache_dir=cache_dir)
    # (the interpreter's was -1, then the int 1 where native code gave True)
    for results in (run_function(module, "f", [3]), native(3)):
        assert results == (True, 3) and type(results[0]) is bool


def test_an_f32_scalar_beyond_float32_is_refused_as_an_array_is(cache_dir):
    """A scalar argument of 1e300 became inf with only NumPy's warning."""
    module = parse("""func.func @f(%a: f32) -> f32 {
  func.return %a : f32
}""")
    native = compile_module(module, "f", cache_dir=cache_dir)
    for value in (1e300, -3.5e38):
        for run in (lambda: run_function(module, "f", [value]), lambda: native(value)):
            with pytest.raises(RecirError, match=rf"^error: argument 0 \(f32\) is "
                               rf"{re.escape(str(value))}, which is beyond float32's range"):
                run()
    assert run_function(module, "f", [np.inf]) == native(np.inf) == (np.inf,)
    assert native(3.4028234e38) == (float(np.float32(3.4028234e38)),)


@pytest.mark.parametrize("engine", ["--interpret", "--jit"])
def test_recir_run_reports_a_tensor_too_large_for_memory(tmp_path, capsys, engine):
    path = tmp_path / "huge.mlir"
    path.write_text("""func.func @f(%s: f32) -> tensor<100000x100000x100xf32> {
  %b = tmath.fill %s : f32 -> tensor<100000x100000x100xf32>
  func.return %b : tensor<100000x100000x100xf32>
}""")
    assert recir_run.main([str(path), "--entry", "f", "--arg", "1.0", engine]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: @f needs more memory than there is") and "Traceback" not in err


def test_recir_run_reports_ctrl_c_in_one_line(tmp_path, capsys, monkeypatch):
    """A program that never ends (native: LLVM makes a loop of the tail
    call) is stopped by Ctrl-C; recir-run printed KeyboardInterrupt's traceback."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt("native @f was interrupted")

    monkeypatch.setattr(recir_run, "run_function", interrupted)
    path = tmp_path / "loop.mlir"
    path.write_text("func.func @f(%a: i32) -> i32 {\n  func.return %a : i32\n}")
    assert recir_run.main([str(path), "--entry", "f", "--arg", "1", "--interpret"]) == 130
    assert capsys.readouterr().err == "error: @f was interrupted\n"


SHIFTS = """func.func @shl(%a: i32, %b: i32) -> i32 {
  %c = arith.shli %a, %b : i32
  func.return %c : i32
}
func.func @shrs(%a: i32, %b: i32) -> i32 {
  %c = arith.shrsi %a, %b : i32
  func.return %c : i32
}
func.func @shru(%a: i32, %b: i32) -> i32 {
  %c = arith.shrui %a, %b : i32
  func.return %c : i32
}"""


@pytest.mark.parametrize("entry", ["shl", "shrs", "shru"])
def test_shifts_agree_and_an_amount_out_of_range_is_an_error(cache_dir, entry):
    """By 32 or more (or a negative amount) native code gave whatever x86 or
    constant folding made of LLVM's poison (shl -100 by 40: -25600), the
    interpreter 0, an AssertionError, or had no shrui at all."""
    module = parse(SHIFTS)
    native = compile_module(module, entry, cache_dir=cache_dir)
    for a, b in [(-100, 0), (-100, 3), (-100, 31), (7, 30), (2**31 - 1, 1)]:
        want = {"shl": (a << b) & 0xFFFFFFFF, "shrs": a >> b,
                "shru": (a & 0xFFFFFFFF) >> b}[entry]
        want = want - (1 << 32) if want >= 1 << 31 else want
        assert run_function(module, entry, [a, b]) == native(a, b) == (want,)
    for b in (32, 40, -1):
        for run in (lambda: run_function(module, entry, [-100, b]),
                    lambda: native(-100, b)):
            with pytest.raises(RecirError, match=r"hand.mlir:\d+:3: error: 'arith.sh\w+' "
                                                  r"op shift amount out of range \(0 to 31\)"):
                run()


@pytest.mark.parametrize("pipeline, message", [
    ("synthesize-gradients{loss=x}", "pass 'synthesize-gradients': Incompatible types"),
    ("capture-outer-refs,invoke-clone-serial{budget=1.5}", "pass 'invoke-clone-serial': "),
    ("convert-recir-to-llvm{entries=maybe}", "pass 'convert-recir-to-llvm': "),
    # out of range: read as another meaning (-1 as no limit, 0 threads as one)
    ("convert-recir-to-llvm{max_depth=-1}", "pass 'convert-recir-to-llvm': option "
     "max_depth=-1 must be an integer of at least 0"),
    ("convert-tmath-to-loops{row_threads=0}", "pass 'convert-tmath-to-loops': option "
     "row_threads=0 must be an integer of at least 1"),
    ("convert-tmath-to-loops{row_team_work=-2}", "pass 'convert-tmath-to-loops': option "
     "row_team_work=-2 must be an integer of at least -1"),
    ("invoke-clone-serial{budget=-3}", "pass 'invoke-clone-serial': option budget=-3 "
     "must be an integer of at least 0"),
    ("invoke-to-frontier{inputs=-7}", "pass 'invoke-to-frontier': option inputs=-7 must "
     "be an integer of at least -1"),
])
def test_recir_opt_names_the_pass_of_an_option_it_cannot_take(tmp_path, capsys, pipeline,
                                                             message):
    path = tmp_path / "f.mlir"
    path.write_text("func.func @f(%a: i32) -> i32 {\n  func.return %a : i32\n}")
    assert recir_opt.main([str(path), "-p", pipeline]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


U32 = 1 << 32


def signed32(x: int) -> int:
    return x - U32 if x >= 1 << 31 else x


@pytest.mark.parametrize("body, types, cases", [
    # unsigned: -1 is 2**32 - 1 (the interpreter divided signed: 1 / -1 = -1)
    ("arith.divui %a, %b : i32", ("i32", "i32", "i32"),
     [((1, -1), 0), ((-1, 2), 2**31 - 1), ((-7, -1), 0), ((9, 4), 2)]),
    ("arith.remui %a, %b : i32", ("i32", "i32", "i32"),  # (a KeyError traceback)
     [((1, -1), 1), ((-1, 10), signed32((U32 - 1) % 10)), ((9, 4), 1)]),
    ("arith.extui %a : i32 to i64", ("i32", "i64"),  # (it sign-extended)
     [((-1,), U32 - 1), ((-2**31,), 2**31), ((7,), 7)]),
    ("arith.trunci %a : i64 to i32", ("i64", "i32"),  # (no implementation)
     [((2**40 + 5,), 5), ((-1,), -1), ((2**31,), -2**31)]),
    ("arith.divf %a, %b : f32", ("f32", "f32", "f32"),  # (1.5 / -0.0 was +inf)
     [((1.5, -0.0), -np.inf), ((-2.5, -0.0), np.inf), ((1.0, 4.0), 0.25)]),
    ("arith.fptosi %a : f32 to i32", ("f32", "i32"),
     [((-2.5,), -2), ((2.0**31 - 128,), 2**31 - 128), ((-2.0**31,), -2**31)]),
])
def test_scalar_arith_agrees_with_python(cache_dir, body, types, cases):
    names = "abc"[:len(types) - 1]
    params = ", ".join(f"%{n}: {t}" for n, t in zip(names, types, strict=False))
    module = parse(f"func.func @f({params}) -> {types[-1]} {{\n  %r = {body}\n"
                   f"  func.return %r : {types[-1]}\n}}")
    native = compile_module(module, "f", cache_dir=cache_dir)
    for args, want in cases:
        assert run_function(module, "f", list(args)) == native(*args) == (want,), args


@pytest.mark.parametrize("value", [1e30, -3e9, 2.0**31, np.inf, np.nan])
def test_a_float_out_of_the_integer_range_is_an_error(cache_dir, value):
    """LLVM makes it poison: native code gave INT_MIN or INT_MAX, the
    interpreter a Python integer beyond 32 bits (1e30) or an error (inf)."""
    module = parse("func.func @f(%a: f32) -> i32 {\n  %r = arith.fptosi %a : f32 to i32\n"
                   "  func.return %r : i32\n}")
    native = compile_module(module, "f", cache_dir=cache_dir)
    for run in (lambda: run_function(module, "f", [value]), lambda: native(value)):
        with pytest.raises(RecirError, match="hand.mlir:2:3: error: 'arith.fptosi' op the "
                                             "value is out of range for i32"):
            run()


@pytest.mark.parametrize("target", ["llvm", "x86-asm", "mps"])
def test_recir_opt_reports_a_target_that_cannot_print_the_ir(tmp_path, capsys, target):
    """xDSL's targets raised NotImplementedError or an AssertionError holding
    the whole op (a traceback) on IR not lowered to their dialects."""
    path = tmp_path / "f.mlir"
    path.write_text("func.func @f(%a: i32) -> i32 {\n  func.return %a : i32\n}")
    assert recir_opt.main([str(path), "--target", target]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: the '{target}' target cannot print this IR (") and (
        err.count("\n") == 1), err


def test_frontier_batching_of_a_module_without_recursion_says_so():
    """It said 'name the entry function (invoke-to-frontier{entry=...});
    candidates: none', an option `recir.compile` users cannot set."""
    import recir
    from recir import frontend as rf

    with recir.trace("flat") as m:
        m.output(rf.sum(m.input("x", recir.vector(3))))
    with pytest.raises(RecirError, match="no public function invokes a subgraph.*"
                                         "batching='recursive'"):
        recir.compile(m.traced, batching="frontier")


@pytest.mark.parametrize("engine", ["static", "dynamic"])
def test_the_dataflow_engines_return_an_i1_as_0_or_1(engine):
    """They returned xDSL's -1 for true, where the interpreter and native
    code return 1 (test/dialects/invoke/ops.mlir's @parity)."""
    from recir import dataflow

    text = (FRONTIER_OPS.parents[1] / "invoke/ops.mlir").read_text().split("// -----")[1]
    module = parse(text)
    for n in (3, 4):
        want = run_function(module, "parity", [n])
        assert want == (int(n % 2 == 0), int(n % 2 == 1))
        assert dataflow.run(module, "parity", [n], engine=engine)[0] == want


def test_softmax_of_an_empty_vector_is_empty_in_both_engines(cache_dir):
    module = parse("func.func @f(%x: tensor<0xf32>) -> tensor<0xf32> {\n"
                   "  %r = tmath.softmax %x : tensor<0xf32>\n  func.return %r : tensor<0xf32>\n}")
    empty = np.zeros(0, np.float32)
    assert run_function(module, "f", [empty])[0].shape == (0,)  # (a NumPy error)
    assert compile_module(module, "f", cache_dir=cache_dir)(empty)[0].shape == (0,)


def test_a_true_comparison_is_minus_one_read_as_signed_as_in_native_code(cache_dir):
    """`arith.extsi` and `arith.sitofp` of the i1 an `arith.cmpi` makes: -1
    natively (its one bit set, read as signed); the interpreter's was 1 (it
    took the comparison's True as is)."""
    module = parse("""func.func @f(%a: i32, %b: i32) -> (i32, f32) {
  %c = arith.cmpi slt, %a, %b : i32
  %r = arith.extsi %c : i1 to i32
  %s = arith.sitofp %c : i1 to f32
  func.return %r, %s : i32, f32
}""")
    native = compile_module(module, "f", cache_dir=cache_dir)
    for a, b, want in [(1, 2, (-1, -1.0)), (2, 1, (0, 0.0))]:
        assert run_function(module, "f", [a, b]) == native(a, b) == want


@pytest.mark.parametrize("element, values", [("f32", [1.5, -2.25, 3.0]), ("i32", [7, -8, 9])])
def test_an_element_of_a_dynamic_vector_is_read_as_its_type(cache_dir, element, values):
    """An f32 vector of dynamic length had its element read as i32: LLVM
    refused the IR (a traceback) where the interpreter read 2.0."""
    module = parse(f"func.func @f(%s: tensor<?x{element}>, %i: i32) -> {element} {{\n"
                   f"  %p = tmath.extract %s[%i] : tensor<?x{element}>, i32 -> {element}\n"
                   f"  func.return %p : {element}\n}}")
    array = np.array(values, np.float32 if element == "f32" else np.int32)
    native = compile_module(module, "f", cache_dir=cache_dir)
    for i in range(3):
        assert native(array, i) == run_function(module, "f", [array, i]) == (values[i],)
    with pytest.raises(RecirError, match="'tmath.extract' op index 3 out of range for length 3 \\(at"):
        native(array, 3)


@pytest.mark.parametrize("width, predicate", [(64, "ult"), (32, "slt")])
def test_a_written_index_check_reports_what_it_compared_only_where_it_can(
        cache_dir, width, predicate):
    """A `cf.assert` on `index ult length` (i64) reports both values, as
    recir's own bounds checks do; another compare keeps its message as written."""
    module = parse(f"func.func @f(%i: i{width}) -> i{width} {{\n"
                   f"  %n = arith.constant 4 : i{width}\n"
                   f"  %ok = arith.cmpi {predicate}, %i, %n : i{width}\n"
                   f'  cf.assert %ok, "index out of range"\n'
                   f"  func.return %i : i{width}\n}}")
    native = compile_module(module, "f", cache_dir=cache_dir)
    assert native(3) == run_function(module, "f", [3]) == (3,)
    with pytest.raises(RecirError, match="^index out of range$"):  # (xDSL has no cf.assert)
        run_function(module, "f", [9])
    found = "index 9 out of range for length 4" if width == 64 else "index out of range"
    with pytest.raises(RecirError, match=f"^{found} \\(at run time, in native @f\\)$"):
        native(9)


USED_EARLY = [
    ("""func.func @f(%n: i32) -> i32 {
  %s = arith.addi %late, %n : i32
  %late = arith.muli %n, %n : i32
  func.return %s : i32
}""", "2:3: error: 'arith.addi' op uses %late"),
    # a subgraph's body reads the result of the very invoke that runs it
    ("""func.func @f(%n: i32) -> i32 {
  invoke.subgraph @sg(%k: i32) -> i32 {
    %x = arith.addi %k, %r : i32
    invoke.return %x : i32
  }
  %r = invoke.invoke @sg(%n) : (i32) -> i32
  func.return %r : i32
}""", "3:5: error: 'arith.addi' op uses %r"),
]


@pytest.mark.parametrize("text, where", USED_EARLY)
def test_a_value_used_before_its_definition_is_a_located_error(text, where):
    """xDSL checks no dominance: both engines failed with a KeyError."""
    with pytest.raises(RecirError, match=rf"^hand.mlir:{where} before the op that defines it$"):
        parse(text)


@pytest.mark.parametrize("text, where", [
    ("""func.func @f(%n: i32, %b: i1) -> i32 {
  %r = scf.if %b -> (i32) {
    scf.yield %s : i32
  } else {
    %s = arith.addi %n, %n : i32
    scf.yield %s : i32
  }
  func.return %r : i32
}""", "3:5: error: 'scf.yield' op uses %s"),  # the other branch's (a KeyError where taken)
    ("""func.func @f(%n: i32) -> i32 {
  %r = scf.if %b -> (i32) {
    %b = arith.cmpi sle, %n, %n : i32
    scf.yield %n : i32
  } else {
    scf.yield %n : i32
  }
  func.return %r : i32
}""", "2:3: error: 'scf.if' op uses %b"),  # its own region's (xDSL's ValueError)
])
def test_a_value_from_a_region_that_does_not_enclose_its_use_is_refused(text, where):
    """xDSL checks no dominance across regions: the engines failed with a
    KeyError, or ran where the branch with the use was not taken."""
    with pytest.raises(RecirError, match=rf"^hand.mlir:{where}, defined in a region that "
                                         "does not enclose this op$"):
        parse(text)


def test_a_subgraph_may_read_a_value_defined_before_it_is_invoked(cache_dir):
    """Its body runs at the invoke: a value defined after the subgraph but
    before the invoke is there."""
    module = parse("""func.func @f(%n: i32) -> i32 {
  invoke.subgraph @sg(%k: i32) -> i32 {
    %x = arith.addi %k, %c : i32
    invoke.return %x : i32
  }
  %c = arith.muli %n, %n : i32
  %r = invoke.invoke @sg(%n) : (i32) -> i32
  func.return %r : i32
}""")
    assert compile_module(module, "f", cache_dir=cache_dir)(3) == run_function(
        module, "f", [3]) == (12,)


def test_a_loss_of_rows_of_vectors_is_refused_by_the_gradient():
    """Rows of a scalar are summed into a loss; rows of a vector were taken
    too, and the pass built IR that failed to verify."""
    from recir.pipeline import run_passes

    module = parse("""func.func @f(%w: tensor<3x4xf32>, %x: tensor<?x4xf32>) -> tensor<?x3xf32> {
  %m = tmath.matvec %w, %x : tensor<3x4xf32>, tensor<?x4xf32> -> tensor<?x3xf32>
  func.return %m : tensor<?x3xf32>
}""")
    with pytest.raises(RecirError, match=r"^hand.mlir:1:1: error: 'func.func' op result 0 must "
                                         r"be an f32 loss \(or rows of one, summed\)"):
        run_passes(module, 'synthesize-gradients{entry="f" loss=0}')


def test_an_index_value_is_a_located_error_natively(cache_dir):
    """`scf.for` over index bounds ran on the interpreter and failed natively
    with an unlocated "Type not supported: index" from the LLVM lowering."""
    module = parse("""func.func @f(%n: i32) -> i32 {
  %lo = arith.constant 0 : index
  %hi = arith.constant 4 : index
  %st = arith.constant 1 : index
  %r = scf.for %i = %lo to %hi step %st iter_args(%a = %n) -> (i32) {
    %b = arith.addi %a, %n : i32
    scf.yield %b : i32
  }
  func.return %r : i32
}""")
    assert run_function(module, "f", [3]) == (15,)
    with pytest.raises(RecirError, match=r"^hand.mlir:2:3: error: 'arith.constant' op makes an "
                                         r"index value, which the native backend does not lower"):
        compile_module(module, "f", cache_dir=cache_dir)


def test_an_entry_named_beyond_ascii_is_a_located_error(cache_dir):
    """llvmlite looks a symbol up as ASCII: a UnicodeEncodeError from inside it."""
    module = parse("""func.func @"ünï"(%a: i32) -> i32 {
  func.return %a : i32
}""")
    assert run_function(module, "ünï", [4]) == (4,)
    with pytest.raises(RecirError, match="hand.mlir:1:1: error: 'func.func' op @ünï: a "
                                         "native entry point's name is ASCII"):
        compile_module(module, "ünï", cache_dir=cache_dir)


@pytest.mark.parametrize("typ", ["i16", "i4", "i128", "ui32", "si8"])
def test_a_scalar_the_entry_cannot_pass_is_refused_at_the_function(cache_dir, typ):
    """i16 and i128 raised a KeyError from the table of C types; ui32 got
    as far as LLVM, whose error named no op."""
    module = parse(f"func.func @f(%a: {typ}) -> {typ} {{\n  func.return %a : {typ}\n}}")
    assert run_function(module, "f", [3]) == (3,)
    with pytest.raises(RecirError, match=rf"^hand.mlir:1:1: error: 'func.func' op argument 0 "
                                         rf"\({typ}\): the native backend passes scalars of "
                                         r"types i1, i8, i32, i64 and f32$"):
        compile_module(module, "f", cache_dir=cache_dir)


def test_a_gather_from_a_table_of_no_rows_is_an_index_error(cache_dir):
    """A row's size was the table's size over its rows: a ZeroDivisionError
    while lowering, where the interpreter reports the index."""
    module = parse("func.func @f(%t: tensor<0x3xf32>, %i: i32) -> tensor<3xf32> {\n"
                   "  %k = tmath.gather %t[%i] : tensor<0x3xf32>, i32 -> tensor<3xf32>\n"
                   "  func.return %k : tensor<3xf32>\n}")
    table = np.zeros((0, 3), np.float32)
    with pytest.raises(Exception) as interpreted:
        run_function(module, "f", [table, 0])
    native = compile_module(module, "f", cache_dir=cache_dir)
    with pytest.raises(RecirError) as raised:
        native(table, 0)
    assert str(raised.value) == (f"{interpreted.value} (at run time, in native @f)")
    assert "index 0 out of range for length 0" in str(raised.value)


@pytest.mark.parametrize("predicate", ["true", "false"])
def test_a_float_compare_with_a_constant_predicate_runs_natively(cache_dir, predicate):
    """llvmlite names no fcmp for them: a ValueError traceback."""
    module = parse(f"func.func @f(%a: f32, %b: f32) -> i1 {{\n"
                   f"  %c = arith.cmpf {predicate}, %a, %b : f32\n  func.return %c : i1\n}}")
    native = compile_module(module, "f", cache_dir=cache_dir)
    for a, b in [(1.0, 2.0), (float("nan"), 2.0)]:
        assert native(a, b) == run_function(module, "f", [a, b]) == (predicate == "true",)


@pytest.mark.parametrize("width", [8, 32, 64])
def test_an_unsigned_integer_converts_to_float_as_the_interpreter_does(cache_dir, width):
    """uitofp was a zero extension to i64 and a signed conversion: from i64
    the IR did not parse (zext i64 to i64), and 2^63 and up came out negative."""
    module = parse(f"func.func @f(%a: i{width}) -> f32 {{\n"
                   f"  %c = arith.uitofp %a : i{width} to f32\n  func.return %c : f32\n}}")
    native = compile_module(module, "f", cache_dir=cache_dir)
    for a in (0, 5, -1, -(1 << (width - 1))):
        assert native(a) == run_function(module, "f", [a]) == (np.float32(a % (1 << width)),)


def test_a_tensor_too_large_to_address_is_refused_at_its_op(cache_dir):
    """Its byte offsets overflowed i64 while lowering: an error that named
    neither the op nor the line."""
    module = parse("func.func @f(%x: f32) -> f32 {\n"
                   "  %t = tmath.fill %x : f32 -> tensor<4611686018427387904x4xf32>\n"
                   "  %s = tmath.sum %t : tensor<4611686018427387904x4xf32> -> f32\n"
                   "  func.return %s : f32\n}")
    with pytest.raises(RecirError, match=r"^hand.mlir:2:3: error: 'tmath.fill' op makes a "
                                         r"tensor<4611686018427387904x4xf32> of more elements "
                                         r"than native code can address$"):
        compile_module(module, "f", cache_dir=cache_dir)


def test_a_function_declared_without_a_body_is_named(cache_dir):
    """Native code said only that a func.func is not supported at module level."""
    module = parse("func.func private @g(i32) -> i32\n"
                   "func.func @f(%n: i32) -> i32 {\n"
                   "  %r = invoke.invoke @g(%n) : (i32) -> i32\n  func.return %r : i32\n}")
    with pytest.raises(RecirError, match=r"^hand.mlir:1:1: error: 'func.func' op @g is declared "
                                         r"without a body: native code has none to call"):
        compile_module(module, "f", cache_dir=cache_dir)


VERIFIER_CASES = {
    "lock_twice": ("""func.func @f(%n: i32) -> i32 {
  %r = arith.constant -5 : i64
  adjoint.lock_row %r
  adjoint.lock_row %r
  func.return %n : i32
}""", ["3"], "3:3: error: 'adjoint.lock_row' op 'adjoint.lock_row' runs before the "
       "row's unlock_row"),
    "tape_new_zero": ("""func.func @f(%x: f32) -> f32 {
  %fr = tape.new 0 : !tape.frame
  func.return %x : f32
}""", ["1.5"], "2:3: error: 'tape.new' op needs bytes > 0, got 0"),
    "load_typemix": ("""func.func @f(%x: f32) -> i32 {
  %fr = tape.new 8 : !tape.frame
  tape.save %x, %fr[0] : f32
  %y = tape.load %fr[0] : i32
  func.return %y : i32
}""", ["1.5"], "4:3: error: 'tape.load' op reads a i32 at offset 0, where tape.save "
       "writes a f32"),
    "save_in_loop": ("""func.func @f(%x: f32, %n: i32) -> f32 {
  %fr = tape.new 8 : !tape.frame
  %z = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  scf.for %i = %z to %n step %one : i32 {
    tape.save %x, %fr[0] : f32
  }
  %y = tape.load %fr[0] : f32
  func.return %y : f32
}""", ["1.5", "0"], "8:3: error: 'tape.load' op reads offset 0 of a frame, but no "
       "tape.save there dominates it: it may run before any save"),
    "fused_outer": ("""func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %h = tmath.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %t = tmath.add %a, %y : tensor<4xf32>
    tmath.yield %t : tensor<4xf32>
  }
  func.return %h : tensor<4xf32>
}""", ["x.npy", "x.npy"], "2:3: error: 'tmath.fused' op 'tmath.add' in the body uses %y "
       "defined outside the op: pass it as an input"),
    "size_i8": ("""func.func @f(%c: tensor<?xi32>) -> i8 {
  %n = tmath.size %c : tensor<?xi32> -> i8
  func.return %n : i8
}""", ["c.npy"], "2:3: error: 'tmath.size' op result must be i32, i64 or index, got i8"),
    "argmax_empty": ("""func.func @f(%x: tensor<0xf32>) -> i32 {
  %k = tmath.argmax %x : tensor<0xf32> -> i32
  func.return %k : i32
}""", ["e.npy"], "2:3: error: 'tmath.argmax' op cannot take the argmax of an empty vector"),
}


@pytest.mark.parametrize("case", sorted(VERIFIER_CASES))
def test_ir_the_engines_ran_apart_is_refused_by_both_alike(tmp_path, capsys, case):
    """Native code hung (a row locked twice), failed with a traceback or gave
    another result than the interpreter on these; both now report the
    verifier's one line."""
    text, args, message = VERIFIER_CASES[case]
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    np.save(tmp_path / "c.npy", np.zeros(300, dtype=np.int32))
    np.save(tmp_path / "e.npy", np.zeros(0, dtype=np.float32))
    path = tmp_path / "f.mlir"
    path.write_text(text)
    argv = [str(path), "--entry", "f"]
    for arg in args:
        argv += ["--arg", str(tmp_path / arg) if arg.endswith(".npy") else arg]
    for engine in ("--interpret", "--jit"):
        assert recir_run.main([*argv, engine]) == 1
        assert capsys.readouterr().err == f"{path}:{message}\n"


FRAME = """func.func @f(%x: f32) -> f32 {{
  %t = tape.new {size} : !tape.frame
  tape.save %x, %t[{offset}] : f32
  %y = tape.load %t[{offset}] : f32
  func.return %y : f32
}}"""


@pytest.mark.parametrize("engine", ["--interpret", "--jit"])
def test_a_frame_too_large_to_allocate_is_refused_at_the_op(tmp_path, capsys, engine):
    """2^63 - 1 bytes verified: natively the arena's rounding wrapped it to a
    negative size (out of memory only by luck), the interpreter ran it."""
    path = tmp_path / "frame.mlir"
    path.write_text(FRAME.format(size=2**63 - 1, offset=0))
    assert recir_run.main([str(path), "--entry", "f", "--arg", "1.5", engine]) == 1
    assert capsys.readouterr().err == (
        f"{path}:2:3: error: 'tape.new' op needs bytes <= 2^62 (4611686018427387904), "
        "got 9223372036854775807: no machine can allocate such a frame\n")


def test_the_largest_frame_fails_natively_as_out_of_memory(cache_dir):
    """2^62 bytes, saved into at its end: the interpreter's frame holds only
    what is saved, native code asks for all of it and reports the failure."""
    module = parse(FRAME.format(size=2**62, offset=2**62 - 4))
    assert run_function(module, "f", [1.5]) == (1.5,)
    native = compile_module(module, "f", cache_dir=cache_dir, threads=1)
    with pytest.raises(RecirError, match="ran out of memory for its gradient tape"):
        native(1.5)
