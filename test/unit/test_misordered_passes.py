"""recir-opt given IR a pass cannot take (passes run out of the pipeline's
order, out-of-range options, dead code) gives one located error line or
handles it: these raised a traceback or an unlocated xDSL message."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from recir.tools import recir_opt

FIB = Path(__file__).resolve().parents[2] / "examples/ir/fib.mlir"

FRAMES = """\
func.func private @g_fwd(%x: f32) -> (f32, !tape.frame) {
  %f = tape.new 8 : !tape.frame
  func.return %x, %f : f32, !tape.frame
}
"""
BWD = """\
func.func private @g_bwd(%f: !tape.frame, %d: f32) -> f32 {
  func.return %d : f32
}
"""
BRANCHES = """\
func.func @f(%x: f32, %c: i1) -> f32 {
  cf.cond_br %c, ^bb1, ^bb2
^bb1:
  func.return %x : f32
^bb2:
  %y = arith.mulf %x, %x : f32
  func.return %y : f32
}
"""
SQUARE_IF = """\
func.func @f(%x: f32, %c: i1) -> f32 {
  %y = scf.if %c -> (f32) {
    scf.yield %x : f32
  } else {
    %s = arith.mulf %x, %x : f32
    scf.yield %s : f32
  }
  func.return %y : f32
}
"""
DEAD = """\
func.func @f(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
{dead}  %c = tmath.tanh %x : tensor<{n}xf32>
  func.return %c : tensor<{n}xf32>
}}
"""
DEAD_CHAIN = """\
  %a = tmath.exp %x : tensor<{n}xf32>
  %b = tmath.neg %a : tensor<{n}xf32>
"""


def opt(path: Path, passes: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = recir_opt.main([str(path), "-p", passes])
    return code, out.getvalue(), err.getvalue()


def refused(tmp_path: Path, text: str, passes: str) -> str:
    path = tmp_path / "hand.mlir"
    path.write_text(text)
    code, out, err = opt(path, passes)
    assert (code, out) == (1, ""), err
    assert err.count("\n") == 1, err
    return err.removeprefix(f"{path}:").removesuffix("\n")


@pytest.mark.parametrize("text, message", [
    (FRAMES, "3:3: error: 'func.return' op is not handled by convert-recir-to-llvm: run "
             "convert-tmath-to-loops before convert-recir-to-llvm"),
    # a frame only in the signature (a `_bwd` that reads nothing of it)
    (BWD, "1:1: error: 'func.func' op is not handled by convert-recir-to-llvm: run "
          "convert-tmath-to-loops before convert-recir-to-llvm"),
])
def test_frames_are_lowered_by_convert_tmath_to_loops_first(tmp_path, text, message):
    assert refused(tmp_path, text, "convert-recir-to-llvm") == message
    path = tmp_path / "ordered.mlir"
    path.write_text(text)
    code, out, err = opt(path, "convert-tmath-to-loops,convert-recir-to-llvm")
    assert (code, err) == (0, "") and "!tape.frame" not in out


def test_invoke_clone_serial_needs_one_block_per_body(tmp_path):
    message = refused(tmp_path, FIB.read_text(), "capture-outer-refs,invoke-mark-concurrent,"
                      "convert-scf-to-cf,invoke-clone-serial")
    assert message == (
        "4:3: error: 'func.func' op holds 'cf.cond_br', which is not handled by "
        "invoke-clone-serial: run invoke-clone-serial before convert-scf-to-cf (it wraps "
        "each body, one block, in an scf.if)")


@pytest.mark.parametrize("text, passes, at", [
    (BRANCHES, "synthesize-gradients", "2:3: error: 'cf.cond_br' op branches"),
    (SQUARE_IF, "convert-scf-to-cf,synthesize-gradients",  # its branches have no location
     "1:1: error: 'func.func' op holds 'cf.cond_br', which branches"),
])
def test_synthesize_gradients_refuses_branches_between_blocks(tmp_path, text, passes, at):
    assert refused(tmp_path, text, passes) == (
        f"{at} between blocks: synthesize-gradients differentiates structured control "
        "flow (scf.if); run it before convert-scf-to-cf")


@pytest.mark.parametrize("before, option, message", [
    ("invoke-mark-concurrent", "invoke-clone-serial{budget=2147483648}",
     "option budget=2147483648 must be at most 2147483647"),  # an i32: VerifyException
    ("convert-scf-to-cf", "convert-recir-to-llvm{max-depth=18446744073709551616}",
     "option max_depth=18446744073709551616 must be at most 18446744073709551615"),
])
def test_options_beyond_their_constants_are_refused(tmp_path, before, option, message):
    path = tmp_path / "fib.mlir"
    path.write_text(FIB.read_text())
    passes = f"capture-outer-refs,{before},{option}"
    code, out, err = opt(path, passes)
    name = option.split("{")[0]
    assert (code, out, err) == (1, "", f"error: pass '{name}': {message}\n")
    largest = option.replace("2147483648", "2147483647").replace(
        "18446744073709551616", "18446744073709551615")
    assert opt(path, passes.replace(option, largest))[0] == 0


@pytest.mark.parametrize("n, lower", [
    ("3", "convert-recir-to-llvm"),
    ("?x3", "convert-recir-to-llvm{entries=false arith-cf=false}"),  # a row function
])
def test_a_fused_chain_nothing_reads_lowers_to_nothing(tmp_path, n, lower):
    """Fusing dead elementwise ops gives a `tmath.fused` with no results; its
    kernel indexed its first result. Reference: the function without them."""
    passes = f"tmath-fuse-elementwise,convert-tmath-to-loops,convert-scf-to-cf,{lower}"
    outputs = []
    for dead in (DEAD_CHAIN.format(n=n), ""):
        path = tmp_path / "dead.mlir"
        path.write_text(DEAD.format(n=n, dead=dead))
        code, out, err = opt(path, passes)
        assert (code, err) == (0, "")
        outputs.append(out)
    assert outputs[0] == outputs[1]


DECLARED = """\
func.func private @ext(%x: f32) -> f32
func.func @f(%x: f32) -> f32 {
  %r = invoke.invoke @ext(%x) : (f32) -> f32
  func.return %r : f32
}
"""


@pytest.mark.parametrize("passes, message", [
    ("lower-invoke-to-call-return",
     "3:3: error: 'invoke.invoke' op callee @ext is a declaration: the graph needs its body"),
    ("synthesize-gradients{entry=f}",
     "3:3: error: 'invoke.invoke' op calls @ext, a declaration: it has no body to "
     "differentiate"),
    ("synthesize-gradients{entry=ext}",
     "1:1: error: 'func.func' op is a declaration: it has no body to differentiate"),
])
def test_an_invoked_declaration_is_refused_where_its_body_is_needed(tmp_path, passes, message):
    """These read the callee's block arguments: xDSL's AssertionError."""
    assert refused(tmp_path, DECLARED, passes) == message


def test_invoke_to_frontier_refuses_more_inputs_than_the_entry_takes(tmp_path):
    """inputs=N beyond the entry's arguments was accepted (or a gather's
    unrelated error); the entry of examples/ir/tree_lstm.mlir takes 9."""
    text = (FIB.parent / "tree_lstm.mlir").read_text()
    message = refused(tmp_path, text, "capture-outer-refs,invoke-to-frontier{inputs=10}")
    assert message.endswith("error: 'func.func' op takes 9 arguments: inputs=10 counts "
                            "more inputs than that")
    path = tmp_path / "tree_lstm.mlir"
    path.write_text(text)
    assert opt(path, "capture-outer-refs,invoke-to-frontier{inputs=4}")[0] == 0



@pytest.mark.parametrize("text, message", [
    ("func.func @f(%n: index) -> index {\n  func.return %n : index\n}\n",
     "1:1: error: 'func.func' op"),
    ("func.func @f(%m: i64) -> i64 {\n  %n = arith.index_cast %m : i64 to index\n"
     "  %w = arith.index_cast %n : index to i64\n  func.return %w : i64\n}\n",
     "2:3: error: 'arith.index_cast' op"),
])
def test_index_values_are_refused_where_they_are_made(tmp_path, text, message):
    """The native backend lowers no index value (`recir-run --jit` says so):
    xDSL's unlocated 'LLVM function argument #1 has incompatible type' or
    'llvm.add' verifier error."""
    assert refused(tmp_path, text, "convert-recir-to-llvm") == (
        f"{message} is not handled by convert-recir-to-llvm: the native backend lowers "
        "no index value: use i64 (the interpreter takes it)")


ROWS_INVOKED = """\
func.func @g(%x: tensor<?x3xf32>) -> tensor<?x3xf32> {
  %y = tmath.tanh %x : tensor<?x3xf32>
  func.return %y : tensor<?x3xf32>
}
func.func @f(%x: tensor<?x3xf32>) -> tensor<?x3xf32> {
  %z = invoke.invoke @g(%x) : (tensor<?x3xf32>) -> tensor<?x3xf32>
  func.return %z : tensor<?x3xf32>
}
"""


def test_an_invoked_function_over_rows_is_refused_at_the_invoke(tmp_path):
    """Lowered, a function over rows takes each table's rows too: the invoke
    was an unlocated '@g expects 4 arguments, got 2'."""
    assert refused(tmp_path, ROWS_INVOKED, "convert-tmath-to-loops") == (
        "6:3: error: 'invoke.invoke' op is not handled by convert-tmath-to-loops: its "
        "callee computes rows, which a frontier.schedule calls, not an invoke")
