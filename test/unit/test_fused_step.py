"""The optimizers' row step (native for SGD and Adagrad, NumPy for Adam)
against a plain loop over rows in NumPy float32: the same bits for SGD and
Adagrad, float32 rounding for Adam."""

from __future__ import annotations

import numpy as np
import pytest

from recir.train import SGD, Adagrad, Adam
from recir.train.fused_step import fits

f32 = np.float32
ROWS = np.array([0, 3, 4, 9, 30, 63, 64, 99])  # gaps, both ends, a 64-row boundary
LR, DECAY, SCALE, EPS = 0.05, 1e-4, 1 / 25, 1e-8


def reference_step(kind: str, param: np.ndarray, grad: np.ndarray, state: dict,
                   rows, steps: int) -> None:
    """One optimizer step, row by row, each operation as float32."""
    for r in rows:
        g = grad[r] * f32(SCALE)
        g = g + f32(DECAY) * param[r]
        if kind == "sgd":
            param[r] = param[r] - f32(LR) * g
        elif kind == "adagrad":
            total = state.setdefault("sum_sq", np.zeros_like(param))
            total[r] = total[r] + g * g
            param[r] = param[r] - (g * f32(LR)) / (np.sqrt(total[r]) + f32(EPS))
        else:
            b1, b2, lr = 0.9, 0.999, 1e-3
            m = state.setdefault("m", np.zeros_like(param))
            v = state.setdefault("v", np.zeros_like(param))
            m[r] = f32(b1) * m[r] + f32(1 - b1) * g
            v[r] = f32(b2) * v[r] + f32(1 - b2) * g * g
            m_hat = m[r] / f32(1 - b1 ** steps)
            v_hat = v[r] / f32(1 - b2 ** steps)
            param[r] = param[r] - f32(lr) * m_hat / (np.sqrt(v_hat) + f32(EPS))


OPTIMIZERS = {"sgd": (SGD, LR), "adagrad": (Adagrad, LR), "adam": (Adam, 1e-3)}


def random_grads(rng, shapes: dict, rows) -> dict[str, np.ndarray]:
    grads = {k: np.zeros(s, np.float32) for k, s in shapes.items()}
    grads["emb"][rows] = rng.standard_normal((len(rows), shapes["emb"][1]))
    grads["w"][:] = rng.standard_normal(shapes["w"])
    grads["b"][:] = rng.standard_normal(shapes["b"])
    return grads


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "adam"])
def test_row_step_equals_a_plain_row_loop(kind) -> None:
    rng = np.random.default_rng(0)
    shapes = {"emb": (100, 300), "w": (7, 5), "b": (6,), "frozen": (100, 3)}
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    expected = {k: v.copy() for k, v in params.items()}
    cls, lr = OPTIMIZERS[kind]
    optimizer = cls(params, lr=lr, weight_decay=DECAY)
    optimizer.frozen = frozenset({"frozen"})
    states: dict[str, dict] = {k: {} for k in shapes}
    for step in range(1, 4):
        grads = random_grads(rng, shapes, ROWS)
        grads["frozen"][ROWS] = 1.0
        before = {k: g.copy() for k, g in grads.items()}
        optimizer.step(grads, SCALE, {"emb": ROWS, "frozen": ROWS}, zero=True)
        reference_step(kind, expected["emb"], before["emb"], states["emb"], ROWS, step)
        for name in ("w", "b"):
            flat = expected[name].reshape(1, -1)
            reference_step(kind, flat, before[name].reshape(1, -1), states[name], [0], step)
        assert all(not g.any() for g in grads.values()), "gradient rows not cleared"
    for name, value in params.items():
        if kind == "adam":
            np.testing.assert_allclose(value, expected[name], rtol=2e-6, atol=1e-7)
        else:
            assert np.array_equal(value, expected[name]), name
    untouched = np.setdiff1d(np.arange(100), ROWS)
    assert np.array_equal(params["emb"][untouched], expected["emb"][untouched])


@pytest.mark.parametrize("cls", [SGD, Adagrad])
def test_row_order_repeats_and_layout_do_not_change_the_step(cls) -> None:
    rng = np.random.default_rng(1)
    base = rng.standard_normal((100, 300)).astype(np.float32)
    grad = np.zeros_like(base)
    grad[ROWS] = rng.standard_normal((len(ROWS), 300))
    sorted_rows = {"emb": base.copy()}
    cls(sorted_rows, lr=LR, weight_decay=DECAY).step({"emb": grad.copy()}, SCALE, {"emb": ROWS})
    shuffled = {"emb": base.copy()}
    repeated = np.concatenate([ROWS[::-1], ROWS[:3]])
    cls(shuffled, lr=LR, weight_decay=DECAY).step({"emb": grad.copy()}, SCALE, {"emb": repeated})
    fortran = {"emb": np.asfortranarray(base)}  # not C order: the NumPy step
    assert not fits(fortran["emb"])
    cls(fortran, lr=LR, weight_decay=DECAY).step({"emb": grad.copy()}, SCALE, {"emb": ROWS})
    assert np.array_equal(shuffled["emb"], sorted_rows["emb"])
    assert np.array_equal(fortran["emb"], sorted_rows["emb"])


def test_a_row_outside_the_table_is_an_error() -> None:
    emb = np.zeros((10, 4), np.float32)
    with pytest.raises(IndexError, match="out of range for a table of 10 rows"):
        SGD({"emb": emb}, lr=LR).step({"emb": np.zeros_like(emb)}, rows={"emb": np.array([2, 10])})
    with pytest.raises(IndexError, match="out of range"):
        Adagrad({"emb": emb}).step({"emb": np.zeros_like(emb)}, rows={"emb": np.array([-1])})


def test_a_boolean_row_mask_selects_rows_as_in_numpy() -> None:
    rng = np.random.default_rng(2)
    base = rng.standard_normal((100, 4)).astype(np.float32)
    grad = rng.standard_normal((100, 4)).astype(np.float32)
    mask = np.zeros(100, bool)
    mask[ROWS] = True
    by_mask, by_list = {"emb": base.copy()}, {"emb": base.copy()}
    Adagrad(by_mask, lr=LR).step({"emb": grad.copy()}, rows={"emb": mask})
    Adagrad(by_list, lr=LR).step({"emb": grad.copy()}, rows={"emb": ROWS})
    assert np.array_equal(by_mask["emb"], by_list["emb"])
