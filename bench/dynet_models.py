"""`run.py batching`'s DyNet contestant: the same TreeLSTM, one graph per
minibatch, DyNet's autobatching on (its CPU build runs one thread)."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.common import Skipped


def dynet_autobatch(params, mode, threads):
    if threads != 1:
        raise Skipped("DyNet's CPU build runs one thread")
    dy = import_dynet()
    model = DynetTreeLSTM(dy, params)
    return lambda trees: model.run(trees, train=mode == "train")


def import_dynet() -> Any:
    try:
        import dynet_config

        dynet_config.set(autobatch=1, mem=2048, random_seed=1)
        import dynet as dy
    except ImportError as e:
        raise Skipped(f"dynet not importable ({e}); pip install dynet38") from e
    return dy


class DynetTreeLSTM:
    """The same TreeLSTM in DyNet: one graph per minibatch, autobatched."""

    def __init__(self, dy: Any, params: dict[str, np.ndarray]):
        self.dy = dy
        self.pc = dy.ParameterCollection()
        self.p = {k: self.pc.add_parameters(v.shape, init=dy.NumpyInitializer(v))
                  for k, v in params.items() if k != "emb"}
        self.emb = self.pc.lookup_parameters_from_numpy(params["emb"])
        self.h = params["w_out"].shape[1]

    def node(self, t: Any, i: int, losses: list[Any]) -> tuple[Any, Any]:
        dy, p, h = self.dy, self.p, self.h
        if t.left[i] < 0:
            pre = p["w_leaf"] * dy.lookup(self.emb, int(t.word[i])) + p["b_leaf"]
            ig, og = dy.logistic(dy.pick_range(pre, 0, h)), dy.logistic(dy.pick_range(pre, h, 2 * h))
            c = dy.cmult(ig, dy.tanh(dy.pick_range(pre, 2 * h, 3 * h)))
        else:
            hl, cl = self.node(t, int(t.left[i]), losses)
            hr, cr = self.node(t, int(t.right[i]), losses)
            pre = p["u"] * dy.concatenate([hl, hr]) + p["b"]
            g = dy.logistic(dy.pick_range(pre, 0, 4 * h))
            ig, fl, fr, og = (dy.pick_range(g, k * h, (k + 1) * h) for k in range(4))
            c = (dy.cmult(ig, dy.tanh(dy.pick_range(pre, 4 * h, 5 * h)))
                 + dy.cmult(fl, cl) + dy.cmult(fr, cr))
        hv = dy.cmult(og, dy.tanh(c))
        losses.append(dy.pickneglogsoftmax(p["w_out"] * hv + p["b_out"], int(t.label[i])))
        return hv, c

    def run(self, trees: list[Any], train: bool) -> list[float]:
        dy = self.dy
        dy.renew_cg()
        per_tree = []
        for t in trees:
            losses: list[Any] = []
            self.node(t, t.root, losses)
            per_tree.append(dy.esum(losses))
        total = dy.esum(per_tree)
        total.forward()
        if train:
            total.backward()
        return [float(x.value()) for x in per_tree]
