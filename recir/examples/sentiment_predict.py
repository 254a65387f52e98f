"""`python -m recir.examples.sentiment predict --model-file PATH [FILE|-]`:
label trees with a saved model.

Reads PTB-format trees, one per line (labels optional: `((It) (works))` and
`(3 (2 It) (3 works))` both do), and writes one JSON line per tree: its
input line number, the root's label and class probabilities and, with
`--all-nodes`, every node's label in post-order (children first, root last).
Words the model never saw read as `<unk>`. A malformed line (a bad tree, a
byte that is not UTF-8) gets `FILE:N: error: ...` (`line N: error: ...` for
standard input) on stderr and the other lines are still labelled; the exit
status is then 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from recir.data.sst import TreeParseError, parse_tree
from recir.diagnostics import RecirError
from recir.train.checkpoint import CheckpointError
from recir.train.model_file import LoadedModel, load

CHUNK = 256  # lines labelled per batch: a pipe sees results as it goes


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m recir.examples.sentiment predict",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", default="-",
                   help="trees, one per line (default: standard input)")
    p.add_argument("--model-file", type=Path, required=True, metavar="PATH",
                   help="a checkpoint (--checkpoint) or exported model (--save-model)")
    p.add_argument("--all-nodes", action="store_true", help="also every node's label")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="trees labelled side by side (default %(default)s)")
    return p.parse_args(argv)


def label_lines(model: LoadedModel, lines: Iterable[str | bytes], out: IO[str],
                err: IO[str], all_nodes: bool, threads: int, name: str | None = None
                ) -> int:
    """Labels every well-formed line; returns how many were malformed. Errors
    name the file `name` and the line (standard input: the line)."""
    assert model.vocabulary is not None
    scorer, bad, chunk = model.scorer(threads, roots_only=not all_nodes), 0, []

    def flush() -> None:
        trees = [tree for _, tree in chunk]
        for (number, _), record in zip(chunk, model.predict(trees, scorer, all_nodes),
                                       strict=True):
            out.write(json.dumps({"line": number, **record}) + "\n")
        out.flush()
        chunk.clear()

    for number, raw in enumerate(lines, start=1):
        where = f"line {number}" if name is None else f"{name}:{number}"
        try:  # (bytes decoded here: a bad byte is this line's error, not a guess;
            # a file's byte order mark, from Windows editors, is no part of its tree)
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8") if isinstance(
                raw, bytes) else raw
        except UnicodeDecodeError as e:
            err.write(f"{where}: error: byte 0x{raw[e.start]:02x} at column {e.start + 1} "
                      "is not valid UTF-8\n")
            bad += 1
            continue
        if not text.strip():
            continue
        try:
            chunk.append((number, parse_tree(text, model.vocabulary, line=number,
                                             grow=False, labelled=False)))
        except TreeParseError as e:
            err.write(f"{where}: error: {str(e).split(' error: ', 1)[-1]}\n")
            bad += 1
        if len(chunk) == CHUNK:
            flush()
    flush()
    return bad


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.threads < 1:
        print(f"error: --threads must be at least 1, got {args.threads}",
              file=sys.stderr)
        return 2
    try:
        model = load(args.model_file)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if model.vocabulary is None:
        print(f"error: {args.model_file}: no vocabulary (trained on the synthetic "
              f"treebank), so it cannot read words", file=sys.stderr)
        return 2
    if args.file == "-" and sys.stdin is None:  # (started with it closed: `<&-`)
        print("error: no standard input to read trees from: name a file", file=sys.stderr)
        return 2
    try:  # bytes where there are: `label_lines` decodes each line
        source = (contextlib.nullcontext(getattr(sys.stdin, "buffer", sys.stdin))
                  if args.file == "-" else open(args.file, "rb"))
    except OSError as e:
        print(f"error: cannot read '{args.file}': {e.strerror}", file=sys.stderr)
        return 2
    with source as lines:
        try:
            bad = label_lines(model, lines, sys.stdout, sys.stderr, args.all_nodes,
                              args.threads, None if args.file == "-" else args.file)
        except BrokenPipeError:  # (standard output's reader left: not the input's fault)
            raise
        except OSError as e:  # (a folder opens, then fails to read)
            print(f"error: cannot read '{args.file}': {e.strerror}", file=sys.stderr)
            return 2
        except RecirError as e:  # (the scorer's compile or a call: out of memory, say)
            print(e, file=sys.stderr)
            return 2
    return 1 if bad else 0
