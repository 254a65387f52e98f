"""What the tape holds per TreeLSTM node, against what PyTorch's autograd saves.

PyTorch (bench/torch_models.py, counted with `saved_tensors_hooks`) saves per
inner node 10h floats: the concatenated children (2h), the sigmoid gate block
(4h), u, tanh(c), h for the output layer and c for the parent; per leaf 7h:
the embedding row, the gate block (2h) and the same four. The recompute rule
of `synthesize-gradients` leaves an inner node's gates (5h), its children's
cells (2h) and their concatenated states (2h), and a leaf's gates (3h), each
with its logits; h, c and tanh(c) come back from those, the embedding row
from the table. A leaf's frame holds only the leaf branch's values.
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import TensorType

import recir
from recir.gradients import GradFunction
from recir.data import make_tree
from recir.dialects import tape
from recir.models import tree_lstm

H, CLASSES = 32, 5
ARENA_ALIGN = 64  # recir_tape_alloc rounds every frame up to this


def params() -> dict[str, np.ndarray]:
    return tree_lstm.init_params(np.random.default_rng(0), hidden=H, embed=H, vocab=20,
                                 classes=CLASSES)


@pytest.fixture(scope="module")
def gradient() -> GradFunction:
    return recir.value_and_grad(tree_lstm.trace_model(params()))


def node_fwd(module) -> func.FuncOp:
    """The recursive `_fwd`: the one whose body branches on leaf or inner node."""
    found = [f for f in module.ops if isinstance(f, func.FuncOp)
             and f.sym_name.data.endswith("_fwd")
             and any(isinstance(op, scf.IfOp) for op in f.body.block.ops)]
    assert len(found) == 1
    return found[0]


def saved_tensor_bytes(region) -> int:
    return sum(4 * int(np.prod(op.value.type.get_shape())) for op in region.block.ops
               if isinstance(op, tape.SaveOp) and isinstance(op.value.type, TensorType))


def frame_bytes(region) -> int:
    new = region.block.ops.first
    assert isinstance(new, tape.NewOp), "a branch that saves allocates its frame first"
    return new.bytes.value.data


def arena(size: int) -> int:
    return -(-size // ARENA_ALIGN) * ARENA_ALIGN


def test_a_node_saves_its_gates_and_its_childrens_states_only(gradient) -> None:
    branch = next(op for op in node_fwd(gradient.module).body.block.ops
                  if isinstance(op, scf.IfOp))
    leaf, inner = branch.regions
    assert saved_tensor_bytes(leaf) == 4 * (3 * H + CLASSES)
    assert saved_tensor_bytes(inner) == 4 * (9 * H + CLASSES)
    assert saved_tensor_bytes(leaf) < 4 * 7 * H  # PyTorch's leaf
    assert saved_tensor_bytes(inner) < 4 * 10 * H  # PyTorch's inner node


@pytest.mark.parametrize("shape", ["balanced", "linear"])
def test_native_tape_is_each_nodes_taken_branch(gradient, shape: str) -> None:
    fwd = node_fwd(gradient.module)
    top = fwd.body.block.ops.first
    assert isinstance(top, tape.NewOp)
    branch = next(op for op in fwd.body.block.ops if isinstance(op, scf.IfOp))
    leaf, inner = (arena(top.bytes.value.data) + arena(frame_bytes(r))
                   for r in branch.regions)
    entry = next(f for f in gradient.module.ops if isinstance(f, func.FuncOp)
                 and f.sym_name.data == "tree_lstm_fwd")
    tree = make_tree(shape, 7, np.random.default_rng(3), vocab_size=20)
    tree.label[:] = tree.label % CLASSES
    gradient(tree.left, tree.right, tree.word, tree.label, tree.root)
    leaves = int((tree.left < 0).sum())
    want = (arena(frame_bytes(entry.body)) + leaves * leaf
            + (tree.num_nodes - leaves) * inner)
    assert gradient.last_tape_bytes == want
    torch_bytes = 4 * H * (7 * leaves + 10 * (tree.num_nodes - leaves))
    assert gradient.last_tape_bytes < torch_bytes
