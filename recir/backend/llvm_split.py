"""A module's LLVM IR cut into parts that LLVM compiles at once.

llvmlite holds one lock around every call into LLVM, so a process optimises
and emits one module at a time, and a recursive gradient's module spends
most of that in two functions (`node_fwd` and `node_bwd`: 300 and 260 ms of
its 0.6 s on the 2-core VM, `bench/run.py compile --llvm-passes`).
`split_module` gives each function of at least `PART_LINES` lines but the
largest a part of its own (`llvm_workers` compiles it in a child process),
with what only it reaches: the functions and globals that nothing else
uses. Internal helpers it shares with the rest, which use no global, are
copied into the part. The moved function becomes external, its name
suffixed with the module's key so that no other module's function of that
name is taken for it (`Engine`'s `exports` resolve it before the rest
loads). A function whose part would reach anything else stays; a module
with metadata or attribute groups stays whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

# A part costs a child process's start (about 60 ms: Python and llvmlite),
# which the first part's compile hides where the part holds at least as much
# LLVM work: about 0.2 ms a line of a large function (node_bwd: 1,400 lines,
# 260 ms), 300 lines. Twice that, so that the child's part also repays
# the copies of its helpers.
PART_LINES = 600

ENTITY = re.compile(r'^(?:define [^\n]*?@"(?P<function>[^"]+)"\(.*?^\}\n'
                    r'|@"(?P<global>[^"]+)" = [^\n]*(?:\n|\Z))', re.S | re.M)
REFERENCE = re.compile(r'@"([^"]+)"')
DECLARATION = re.compile(r'^declare [^\n]*@"([^"]+)"\(', re.M)


class Entity(NamedTuple):
    text: str
    internal: bool
    references: frozenset[str]
    function: bool


def split_module(text: str, suffix: str, least: int = PART_LINES
                 ) -> tuple[list[str], list[str]]:
    """The parts' IR (the rest first) and the moved functions' new names,
    which the rest calls; `[text], []` where nothing moves."""
    if re.search(r"^(?:!|attributes )", text, re.M):
        return [text], []
    text = text if text.endswith("\n") else text + "\n"
    entities = parsed(text)
    declared = set(DECLARATION.findall(text))
    heavy = sorted((name for name, e in entities.items()
                    if e.function and e.text.count("\n") >= least),
                   key=lambda name: -entities[name].text.count("\n"))
    users: dict[str, set[str]] = {name: set() for name in entities}
    for name, entity in entities.items():
        for used in entity.references & users.keys():
            users[used].add(name)
    parts, exports, moved = [], [], set()
    for root in heavy[1:]:
        members = reached(root, entities, users, moved | {heavy[0]})
        copies = copied(members, entities, declared)
        if copies is None or signature(entities[root].text) is None:
            continue
        exports.append((root, f"{root}.{suffix}"))
        parts.append(part(text, entities, members, copies, *exports[-1]))
        moved |= members
    rest = "".join(without(text, entities, moved))
    for root, exported in exports:
        rest = rest.replace(f'@"{root}"', f'@"{exported}"') + declaration(
            entities[root].text, exported)
    return [rest, *parts], [exported for _, exported in exports]


def parsed(text: str) -> dict[str, Entity]:
    entities = {}
    for match in ENTITY.finditer(text):
        name = match.group("function") or match.group("global")
        body = match.group(0)
        head = body.split("\n", 1)[0]
        internal = " internal " in f" {head} " or " private " in f" {head} "
        entities[name] = Entity(body, internal, frozenset(REFERENCE.findall(body)) - {name},
                                match.group("function") is not None)
    return entities


def reached(root: str, entities: dict[str, Entity], users: dict[str, set[str]],
            kept: set[str]) -> set[str]:
    """`root` and the internal functions and globals that only it (and what
    it reaches so) uses."""
    members = {root}
    grown = True
    while grown:
        grown = False
        for name in list(members):
            for used in entities[name].references & entities.keys():
                if used not in members and used not in kept and entities[used].internal and (
                        users[used] - {used} <= members):
                    members.add(used)
                    grown = True
    return members


def copied(members: set[str], entities: dict[str, Entity], declared: set[str]
           ) -> list[str] | None:
    """The helpers `members` use beyond themselves, which a part copies:
    internal functions that reach declarations alone; None where they use
    anything else of the module's."""
    copies = []
    for name in sorted(set().union(*(entities[m].references for m in members)) - members):
        if name in declared or name.startswith("llvm."):
            continue
        helper = entities.get(name)
        if helper is None or not (helper.function and helper.internal) or not (
                helper.references <= declared):
            return None
        copies.append(name)
    return copies


def part(text: str, entities: dict[str, Entity], members: set[str], copies: list[str],
         root: str, exported: str) -> str:
    """A part's IR: the module's header and declarations, the copies, the
    members as they are, and an external `exported` that calls the root:
    kept internal, LLVM compiles the root as it did in the whole module."""
    header = DECLARATION_LINE.sub("", text[:min(text.find(e.text) for e in entities.values())])
    return header + "".join(DECLARATION_LINE.findall(text)) + "".join(
        entities[name].text for name in copies) + "".join(
        entities[name].text for name in entities if name in members) + entry(
        entities[root].text, root, exported)


DECLARATION_LINE = re.compile(r"^declare [^\n]*\n", re.M)


def without(text: str, entities: dict[str, Entity], moved: set[str]) -> Iterator[str]:
    """`text` without the moved entities."""
    at = 0
    for name, entity in entities.items():
        start = text.index(entity.text, at)
        yield text[at:start]
        if name not in moved:
            yield entity.text
        at = start + len(entity.text)
    yield text[at:]


def signature(definition: str) -> tuple[str, str] | None:
    """A definition's return type and parameters (`(ptr %".1", ...)`); None
    where its header has more than a plain return type before the name."""
    head = definition.split("\n", 1)[0]
    found = re.match(r'define internal (void|float|double|i\d+|ptr) @"[^"]+"(\(.*)', head)
    if found is None:
        return None
    depth, rest = 0, found.group(2)
    for end, char in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if not depth:
            return found.group(1), rest[:end + 1]
    return None


def declaration(definition: str, name: str) -> str:
    returned, parameters = signature(definition)  # type: ignore[misc]
    return f'declare {returned} @"{name}"{parameters}\n'


def entry(definition: str, root: str, name: str) -> str:
    """An external function `name` that calls the internal `root`."""
    returned, parameters = signature(definition)  # type: ignore[misc]
    call = f'tail call {returned} @"{root}"{parameters}'
    body = f"  {call}\n  ret void" if returned == "void" else (
        f'  %"r" = {call}\n  ret {returned} %"r"')
    return f'define {returned} @"{name}"{parameters}\n{{\n{body}\n}}\n'
