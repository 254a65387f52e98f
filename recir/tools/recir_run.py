"""`recir-run FILE --entry NAME [--arg VALUE]... [--jit | --interpret] [--out DIR]`.

Runs one function of an IR file, natively by default (`--jit`: compiled
through LLVM, from the object cache when possible) or with the reference
interpreter (`--interpret`). Scalar arguments are literals, tensor
arguments `.npy` paths. Each scalar result prints on its own line as a plain
number; a tensor result prints as its shape and a few values, or is saved to
`DIR/result<i>.npy` with `--out`. Every error is one `error:` line on stderr
and exit status 1.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tokenize
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    TensorType,
)
from xdsl.ir import Attribute
from xdsl.utils.exceptions import DiagnosticException

from recir.context import make_context
from recir.diagnostics import RecirError, emit_error
from recir.interpreter import coerce_argument, find_entry, run_function
from recir.parsing import decode_source, parse_module, read_source


# scalar parameter types: (types, how an `--arg` reads, what it must be)
SCALAR_ARGUMENTS = ((IntegerType | IndexType, lambda text: int(text, 0), "an integer"),
                    (Float32Type | Float64Type, float, "a number"))


def parse_argument(index: int, text: str, typ: Attribute) -> Any:
    """Turn one `--arg` into a value of the entry's parameter type."""
    if isinstance(typ, TensorType):
        return load_npy(index, text)
    for types, read, what in SCALAR_ARGUMENTS:
        if isinstance(typ, types):
            try:
                return read(text)
            except ValueError:
                raise RecirError(f"error: --arg {index + 1} ('{text}') must be {what} "
                                 f"for {typ}") from None
    raise RecirError(f"error: --arg {index + 1}: unsupported parameter type {typ}")


def checked_argument(index: int, text: str, typ: Attribute) -> Any:
    """`parse_argument`, then checked as the run converts it, so that an error
    names the `--arg` the user gave (the interpreter counts from 0)."""
    value = parse_argument(index, text, typ)
    try:
        coerce_argument(index, value, typ)
    except RecirError as e:
        message, name = str(e).removeprefix("error: "), f"argument {index} ({typ})"
        detail = message.removeprefix(name).lstrip(":").strip() or message
        raise RecirError(f"error: --arg {index + 1} ('{text}', {typ}) "
                         f"{detail}") from None
    return value


def attach_values(argv: list[str]) -> list[str]:
    """`--arg -1e-3` as `--arg=-1e-3`: argparse takes a value that starts with
    '-' and is not a plain negative integer or decimal for an option."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--arg" and i + 1 < len(argv) and is_number(argv[i + 1]):
            out.append(f"--arg={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def is_number(text: str) -> bool:
    """What `--arg` reads as a scalar (`-inf`, `-0x10`), not an option name."""
    for read in (float, lambda t: int(t, 0)):
        try:
            read(text)
            return True
        except ValueError:
            pass
    return False


def load_npy(index: int, path: str) -> np.ndarray:
    """A numeric array from a `.npy` file whose header was checked first: its
    dtype (bool, integer or float: strings, dates, complex numbers and
    records have no tensor meaning), its size against the file's (a broken
    or hostile header must not allocate or read past the data)."""
    where = f"--arg {index + 1}: '{path}'"
    try:
        with open(path, "rb") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's note on Python 2 headers
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(f)
            start, end = f.tell(), f.seek(0, 2)
    except OSError as e:
        raise RecirError(f"error: --arg {index + 1}: cannot read '{path}': {e.strerror}") from None
    except (ValueError, EOFError, SyntaxError, TypeError, KeyError, MemoryError,
            RecursionError, tokenize.TokenError) as e:  # what numpy's header parsing raises
        message = e.args[0] if e.args and isinstance(e.args[0], str) else str(e)
        reason = " ".join(message.split(".")[0].split()) or type(e).__name__
        raise RecirError(f"error: {where} is not a .npy file ({reason})") from None
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise RecirError(f"error: {where} is not a .npy file (shape {shape})")
    if dtype.kind not in "biuf":
        raise RecirError(f"error: {where} holds {dtype} values; arguments are numeric "
                         "(bool, integer or float) arrays")
    if end - start < math.prod(shape) * dtype.itemsize:
        raise RecirError(f"error: {where} is truncated: shape {shape} needs "
                         f"{math.prod(shape) * dtype.itemsize} bytes, the file has "
                         f"{end - start}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise RecirError(f"error: {where}: {' '.join(str(e).split())}") from None


def format_scalar(value: Any) -> str:
    if isinstance(value, bool | int | np.integer):
        return str(int(value))
    return str(np.float32(value))


def report(results: tuple[Any, ...], out: Path | None) -> None:
    for i, value in enumerate(results):
        if not isinstance(value, np.ndarray):
            print(format_scalar(value))
        elif out is not None:
            try:
                out.mkdir(parents=True, exist_ok=True)
                np.save(out / f"result{i}.npy", value)
            except OSError as e:
                raise RecirError(f"error: --out '{out}': cannot write "
                                 f"result{i}.npy: {e.strerror}") from None
            print(out / f"result{i}.npy")
        else:
            summary = np.array2string(value.ravel(), threshold=8, edgeitems=3)
            print(f"tensor {'x'.join(map(str, value.shape))} {summary}")


def check_out(out: Path) -> None:
    """Refuses an --out folder that cannot be written before the run, not
    after it: a file, or a folder (or its nearest existing parent) without
    write access."""
    if out.exists() and not out.is_dir():
        raise RecirError(f"error: --out '{out}' is a file, not a directory")
    there = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not there.is_dir() or not os.access(there, os.W_OK | os.X_OK):
        raise RecirError(f"error: --out '{out}': cannot write in '{there}'")


def run(args: argparse.Namespace) -> None:
    if args.out is not None:
        check_out(args.out)
    try:
        with open(args.file, "rb") as stream:
            data = read_source(stream, args.file)
    except OSError as e:
        raise RecirError(f"error: cannot read '{args.file}': {e.strerror}") from None
    module = parse_module(make_context(), decode_source(data, args.file), args.file)
    entry = find_entry(module, args.entry)
    if not entry.body.blocks:  # natively an AssertionError, interpreted unlocated
        raise emit_error(entry, f"@{args.entry} is a declaration without a body: "
                         "only a function with a body can run")
    types = entry.function_type.inputs.data
    if len(args.arg) != len(types):
        raise RecirError(
            f"error: @{args.entry} takes {len(types)} arguments "
            f"({', '.join(map(str, types))}), got {len(args.arg)} --arg"
        )
    values = [checked_argument(i, a, t)
              for i, (a, t) in enumerate(zip(args.arg, types))]
    if args.interpret:
        report(run_function(module, args.entry, values), args.out)
        return
    from recir.pipeline import compile_module

    report(compile_module(module, args.entry)(*values), args.out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="recir-run", description=__doc__.split("\n")[0])
    parser.add_argument("file", help="an IR file (.mlir)")
    parser.add_argument("--entry", required=True, help="the function to run")
    parser.add_argument(
        "--arg", action="append", default=[], help="an argument: a literal or a .npy path"
    )
    engine = parser.add_mutually_exclusive_group()
    engine.add_argument("--jit", action="store_true", help="run native code (the default)")
    engine.add_argument(
        "--interpret", action="store_true", help="run with the reference interpreter"
    )
    parser.add_argument("--out", type=Path, help="save tensor results here as .npy")
    args = parser.parse_args(attach_values(sys.argv[1:] if argv is None else argv))
    try:
        run(args)
    except DiagnosticException as e:
        message = str(e)
        print(message if "error:" in message else f"error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C stops native code too (`backend/interrupts.py`)
        print(f"error: @{args.entry} was interrupted", file=sys.stderr)
        return 130
    except MemoryError as e:  # NumPy's, for a tensor of a huge static shape
        print(f"error: @{args.entry} needs more memory than there is"
              + (f" ({str(e).rstrip('.')})" if str(e) else ""), file=sys.stderr)
        return 1
    except RecursionError:
        print(f"error: '{args.file}' nests too deeply (more levels than Python's "
              "recursion limit allows)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
