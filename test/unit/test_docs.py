"""The IR examples in docs/ir.md parse and verify: the reference stays true."""

import functools
import re
from pathlib import Path

import pytest

from recir.context import make_context
from recir.parsing import parse_module

IR_DOC = Path(__file__).resolve().parents[2] / "docs" / "ir.md"
BLOCK = re.compile(r"^```mlir\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[int, str]]:
    """(line number, text) of every ```mlir block."""
    text = IR_DOC.read_text()
    return [(text.count("\n", 0, m.start(1)), m.group(1)) for m in BLOCK.finditer(text)]


def test_doc_has_examples():
    assert len(blocks()) >= 5


@pytest.mark.parametrize(("line", "text"), blocks(), ids=lambda v: str(v)[:40])
def test_ir_example_parses_and_verifies(line: int, text: str):
    parse_module(make_context(), text, str(IR_DOC), line_offset=line)


def test_ir_examples_of_scalars_run_natively_as_interpreted(tmp_path):
    """A doc's example whose public functions take i32 scalars runs with
    `recir-run` as the page invites: its native result is the interpreter's
    (the `concurrent` fib's `invoke.join` was no op the one-thread code had)."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import i32

    from recir.interpreter import run_function
    from recir.pipeline import compile_module

    ran = []
    for line, text in blocks():
        module = parse_module(make_context(), text, str(IR_DOC), line_offset=line)
        for f in [f for f in module.ops if isinstance(f, func.FuncOp) and f.body.blocks
                  and f.sym_visibility is None]:
            if all(t == i32 for t in f.function_type.inputs.data):
                args = [6] * len(f.function_type.inputs.data)
                native = compile_module(parse_module(make_context(), text, str(IR_DOC),
                                                     line_offset=line),
                                        f.sym_name.data, cache_dir=tmp_path, threads=1)
                assert native(*args) == run_function(module, f.sym_name.data, args), line
                ran.append(f.sym_name.data)
    assert "fib" in ran and len(ran) >= 3


README = IR_DOC.parents[1] / "README.md"


def test_readme_example_runs():
    """The README's example (trace, compile, grad, train) runs as printed, and
    its native loss is the interpreter's."""
    code = re.search(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M).group(1)
    scope: dict[str, object] = {}
    exec(compile(code, str(README), "exec"), scope)
    assert abs(scope["loss"] - scope["loss_ref"]) <= 1e-4 * abs(scope["loss_ref"])
    assert scope["grads"]["w"].shape == (16, 32)
    history = scope["history"]
    assert len(history) == 2
    assert history[1]["loss"] < history[0]["loss"]


# --- claims the docs make about the code, checked mechanically --------------

ROOT = README.parent
MAP_DOCS = [ROOT / "README.md", ROOT / "docs" / "architecture.md", ROOT / "docs" / "usage.md",
            IR_DOC, ROOT / "docs" / "tutorial-pass.md", ROOT / "docs" / "distributed.md",
            ROOT / "bench" / "README.md"]
# recir's pass names start so (a doc's other hyphenated words do not)
PASS_NAME = re.compile(r"\b(?:capture|convert|invoke|lower|synthesize|tmath)(?:-[a-z]+)+\b")


def registered_passes() -> dict[str, object]:
    from recir.universe import RECIR_PASSES, RECIR_REPLACEMENTS

    return {**RECIR_PASSES, **RECIR_REPLACEMENTS}


def test_every_dialect_op_is_in_the_ir_reference():
    from recir.universe import RECIR_DIALECTS

    text = IR_DOC.read_text()
    missing = [op.name for dialect in RECIR_DIALECTS.values() for op in dialect().operations
               if op.name not in text and f"`{op.name.split('.', 1)[1]}`" not in text]
    assert not missing, f"docs/ir.md names no {missing}"


def test_passes_named_in_the_docs_are_registered():
    passes = registered_passes()
    unknown = sorted({f"{doc.name}: {name}" for doc in MAP_DOCS
                      for name in PASS_NAME.findall(doc.read_text()) if name not in passes})
    assert not unknown, f"no such pass: {unknown}"


def test_every_pass_is_on_the_map_with_a_lit_test_of_its_name():
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    for name in registered_passes():
        assert name in architecture, f"architecture.md does not name {name}"
        assert (ROOT / "test" / "passes" / f"{name}.mlir").is_file(), f"no lit test {name}"


def test_pass_options_in_the_docs_parse():
    """`pass{option=value}` as the docs write it is a pass list recir-opt takes."""
    from xdsl.passes import PassPipeline

    passes = registered_passes()
    specs = [m.group(0) for doc in MAP_DOCS
             for m in re.finditer(r"\b([a-z-]+)\{[^}]*\}", doc.read_text())
             if m.group(1) in passes]
    assert specs, "no pass options found: the pattern is broken"
    for spec in specs:
        PassPipeline.parse_spec(passes, spec)


def test_tutorial_example_is_the_lit_test_it_describes():
    tutorial = (ROOT / "docs" / "tutorial-pass.md").read_text()
    lit = (ROOT / "test" / "passes" / "tmath-fuse-elementwise.mlir").read_text()
    run, case = BLOCK.search(tutorial).group(1).split("\n", 1)
    assert lit.startswith(run + "\n")
    assert case.strip() in lit


def test_tutorial_error_example_fails_with_its_check_line():
    from recir.diagnostics import RecirError

    text = BLOCK.findall((ROOT / "docs" / "tutorial-pass.md").read_text())[1]
    check = re.search(r"^// CHECK: (.*)$", text, re.M).group(1)
    with pytest.raises(RecirError, match=re.escape(check)):
        parse_module(make_context(), text, "tutorial.mlir")


def test_option_tables_name_real_parameters():
    import inspect

    import recir
    from recir import gradients, pipeline

    def names(heading: str) -> set[str]:
        """Every name in the first column of the section's table (a row may
        name several: `threads`, `fuse`, `cache_dir`)."""
        section = (ROOT / "docs" / "usage.md").read_text().split(heading, 1)[1]
        section = section.split("\n## ", 1)[0]
        cells = re.findall(r"^\| (`\w+`(?:, `\w+`)*) \|", section, re.M)
        found = {n for cell in cells for n in re.findall(r"`(\w+)`", cell)}
        assert len(found) >= 4, f"{heading}: the table's pattern is broken"
        return found

    def parameters(*functions: object) -> set[str]:
        return {p for f in functions for p in inspect.signature(f).parameters}

    assert names("## `recir.compile") <= parameters(recir.compile, pipeline.compile)
    assert names("## `recir.value_and_grad") <= parameters(
        recir.value_and_grad, gradients.GradFunction.__init__)


def test_train_config_table_gives_the_defaults():
    import ast
    import dataclasses

    from recir.train import TrainConfig

    usage = (ROOT / "docs" / "usage.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", usage.split("`TrainConfig` field", 1)[1]
                      .split("\n\n", 1)[0], re.M)
    fields = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert len(rows) >= 10
    for name, default in rows:
        assert ast.literal_eval(default) == fields[name], f"TrainConfig.{name}"


@functools.cache
def bench_options() -> dict[str, set[str]]:
    """Each `bench/run.py` section's options, from its parser (in a child
    process: `bench/run.py` pins BLAS threads in the environment)."""
    import json
    import subprocess
    import sys

    code = ("import argparse, importlib.util, json\n"
            "spec = importlib.util.spec_from_file_location('bench_run', 'bench/run.py')\n"
            "run = importlib.util.module_from_spec(spec); spec.loader.exec_module(run)\n"
            "options = {}\n"
            "for name, module in run.SUBCOMMANDS.items():\n"
            "    parser = argparse.ArgumentParser(); module.add_arguments(parser)\n"
            "    options[name] = [s for a in parser._actions for s in a.option_strings]\n"
            "print(json.dumps(options))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return {name: set(options) for name, options in json.loads(out).items()}


def bench_commands(text: str) -> list[str]:
    """What follows `bench/run.py` in each command of a Markdown text: a line
    of a code block (continuations joined, comment cut), or an inline span."""
    commands = []
    for language, fence in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if language not in ("", "sh"):
            continue
        for line in fence.replace("\\\n", " ").splitlines():
            commands += line.split(" #", 1)[0].split("bench/run.py")[1:]
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for span in re.findall(r"`([^`]*bench/run\.py[^`]*)`", prose):
        commands += span.split("bench/run.py")[1:]
    return [" ".join(c.split()) for c in commands]


@pytest.mark.parametrize("doc", [*MAP_DOCS, ROOT / "docs" / "benchmarks.md"],
                         ids=lambda p: p.name)
def test_bench_commands_name_real_sections_and_options(doc: Path):
    options = bench_options()
    for command in bench_commands(doc.read_text()):
        words = command.replace("[", " ").replace("]", " ").split()
        if not words or words[0].startswith("-"):  # `bench/run.py --help`
            continue
        section = words[0]
        assert section in options, f"{doc.name}: no bench section '{section}': {command}"
        for word in words[1:]:
            if re.fullmatch(r"--[a-z][a-z-]*", word):
                assert word in options[section], f"{doc.name}: {section} has no {word}"


def test_bench_readme_covers_every_section():
    text = (ROOT / "bench" / "README.md").read_text()
    missing = [s for s in bench_options() if f"## `{s}`" not in text]
    assert not missing, f"bench/README.md has no section for {missing}"


def sentiment_commands(text: str) -> list[list[str]]:
    """The arguments of each `python -m recir.examples.sentiment` line of a
    Markdown text's shell blocks (continuations joined, comments cut)."""
    commands = []
    for language, fence in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if language in ("", "sh"):
            for line in fence.replace("\\\n", " ").splitlines():
                line = line.split(" #", 1)[0]
                commands += [c.split() for c in line.split("recir.examples.sentiment")[1:]]
    return commands


@pytest.mark.parametrize("doc", ["README.md", "docs/distributed.md"])
def test_sentiment_commands_parse(doc: str, monkeypatch: pytest.MonkeyPatch):
    """Each command's options and values are the job's (its files need not exist)."""
    from recir.examples import sentiment, sentiment_predict

    monkeypatch.setattr(sentiment, "check_args", lambda args: None)
    commands = [c for c in sentiment_commands((ROOT / doc).read_text()) if "--help" not in c]
    assert commands
    for argv in commands:
        if argv[:1] == ["predict"]:
            sentiment_predict.parse_args(argv[1:])
        else:
            sentiment.parse_args(argv)


def test_sentiment_options_named_in_prose_exist():
    from recir.examples.sentiment import argument_parser

    options = {s for a in argument_parser()._actions for s in a.option_strings}
    for doc in ("docs/usage.md", "docs/distributed.md"):
        prose = re.sub(r"^```.*?^```", "", (ROOT / doc).read_text(), flags=re.S | re.M)
        named = set(re.findall(r"`(--[a-z][a-z-]*)", prose))
        assert named, doc
        assert named <= options, f"{doc}: the job has no {sorted(named - options)}"


def test_layer_list_follows_the_import_contract():
    """architecture.md lists the layers bottom up as pyproject.toml's
    importlinter contract has them (top down): every module named, each
    layer's first mention after the layers below it."""
    import tomllib

    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in contract["contracts"] if c["type"] == "layers"]
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Layers and imports", 1)[1].split("\n## ", 1)[0]

    def position(module: str) -> int:
        name = module.removeprefix("recir.")
        doc_name = f"`{name}/`" if (ROOT / "recir" / name).is_dir() else f"`{name}.py`"
        assert doc_name in section, f"the layer list does not name {doc_name}"
        return section.index(doc_name)

    last = -1
    for layer in reversed(layers):
        places = [position(m.strip()) for m in layer.split("|")]
        assert min(places) > last, f"layer {layer!r} is listed before a layer below it"
        last = max(places)
