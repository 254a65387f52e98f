"""SGD, Adagrad and Adam over a dict of float32 arrays, updated in place.

Compiled functions read the parameter arrays by reference, so an update must
never rebind them. Rows of a 2-D parameter whose gradient is zero (the
embedding rows of words not in the minibatch) are skipped, as sparse
Adagrad in Tai et al. does: a dense update of the 18,000-word SST table
per minibatch costs a large share of the step, or more: for Adam, more than
the minibatch's gradients (TreeLSTM h=150, 25 trees). Skipped rows also skip weight decay and,
for Adam, momentum ("lazy" updates, like PyTorch's SparseAdam). SGD and
Adagrad take each row set in one native pass (`fused_step`), the same bits
as the NumPy step that Adam and unusual arrays still take.
"""

from __future__ import annotations

import numbers

import numpy as np

from recir.train.fused_step import ADAGRAD, SGD_KIND, fits, fused_step

Arrays = dict[str, np.ndarray]
FLOAT32_MAX = float(np.finfo(np.float32).max)  # the largest rate a float32 step takes


class TrainConfigError(ValueError):
    """An option that cannot work (`TrainConfig`'s or an optimizer's); the
    message is one line."""


def check_rate(what: str, rate: object) -> None:
    """A learning rate or weight decay: a number, 0 or more, within float32's
    range (the steps compute in float32; NaN fails both compares)."""
    if (not isinstance(rate, numbers.Real) or isinstance(rate, bool)
            or not 0 <= rate <= FLOAT32_MAX):
        raise TrainConfigError(f"the {what} must be a number, 0 or more, within "
                               f"float32's range, got {rate!r}")


def check_eps(eps: object) -> None:
    """Adagrad's and Adam's eps: above 0 (0 divides a zero step by 0, a
    negative one steps uphill where the root is below it), within float32."""
    if (not isinstance(eps, numbers.Real) or isinstance(eps, bool)
            or not 0 < eps <= FLOAT32_MAX):
        raise TrainConfigError(f"the optimizer's eps must be a number above 0, within "
                               f"float32's range, got {eps!r}")


def check_betas(betas: object) -> None:
    """Adam's betas: two numbers in [0, 1) (a beta of 1 divides by 1 - 1)."""
    if not (isinstance(betas, tuple | list) and len(betas) == 2
            and all(isinstance(b, numbers.Real) and 0 <= b < 1 for b in betas)):
        raise TrainConfigError(f"the optimizer's betas must be two numbers in [0, 1), "
                               f"got {betas!r}")


def touched_rows(grad: np.ndarray) -> np.ndarray | slice:
    """Rows of a large matrix with a nonzero gradient; a slice when that is all
    of them (fancy indexing every row of `u` costs 3x a slice)."""
    if grad.ndim != 2 or grad.shape[0] < 64:
        return slice(None)
    rows = np.flatnonzero(np.any(grad != 0, axis=1))
    return slice(None) if len(rows) == grad.shape[0] else rows


class Optimizer:
    SLOTS: tuple[str, ...] = ()  # per-parameter state every step creates
    SQUARES: tuple[str, ...] = ()  # the slots that sum squares (never negative)
    FUSED: int | None = None  # the `fused_step` kind that does `delta` in one pass

    def __init__(self, params: Arrays, lr: float, weight_decay: float = 0.0):
        # (used alone, a NaN or negative rate stepped silently, a str one was
        # a ctypes error; `train` checks them again, as set at its start)
        check_rate("learning rate", lr)
        check_rate("weight decay", weight_decay)
        self.params, self.lr, self.weight_decay = params, lr, weight_decay
        self.state: dict[str, Arrays] = {}
        self.steps = 0
        # kept fixed; their gradient rows are still cleared
        self.frozen: frozenset[str] = frozenset()

    def step(self, grads: Arrays, scale: float = 1.0,
             rows: dict[str, np.ndarray] | None = None, zero: bool = False) -> None:
        """One update from `grads * scale` (scale = 1 / batch size for means).

        `rows` names the rows of a parameter that can have a gradient (the
        minibatch's word ids for `emb`), sparing a scan for them; with `zero`
        the gradient rows used are cleared for the next minibatch.
        """
        self.check(grads)
        self.steps += 1
        for name, param in self.params.items():
            used = (rows or {}).get(name)
            used = touched_rows(grads[name]) if used is None else used
            if name in self.frozen:
                if zero:
                    grads[name][used] = 0
                continue
            if self.FUSED is not None and self.fused(name, used, grads[name], scale, zero):
                continue
            g = grads[name][used] * np.float32(scale)
            # a row list gathers copies: read and write each row set once
            values = param[used]
            if self.weight_decay:
                g += np.float32(self.weight_decay) * values
            values -= self.delta(name, used, g)
            if not isinstance(used, slice):
                param[used] = values
            if zero:
                grads[name][used] = 0

    def check(self, grads: Arrays) -> None:
        """Every gradient of its parameter's shape and every updated parameter
        writable, before any update."""
        for name, param in self.params.items():
            shape = np.shape(grads[name]) if name in grads else None
            if shape != param.shape:  # (NumPy would broadcast a (1,) gradient silently)
                raise ValueError(f"the gradient of '{name}' has shape {shape}, the "
                                 f"parameter's is {param.shape}")
            if not param.flags.writeable and name not in self.frozen:
                raise ValueError(f"parameter '{name}' is read-only (a memory map opened "
                                 "read-only?): the optimizer updates it in place")

    def fused(self, name: str, rows, grad: np.ndarray, scale: float, zero: bool) -> bool:
        """The step on `rows` of `name` in one native pass, where the arrays
        allow (else False: the NumPy step does it)."""
        param = self.params[name]
        slots = [self.slot(name, kind) for kind in self.SLOTS]
        if isinstance(rows, slice):
            if rows != slice(None):
                return False
        elif np.asarray(rows).dtype.kind not in "iu":  # a mask selects, not lists
            return False
        if not fits(param, grad, *slots):
            return False
        fused_step(self.FUSED, param, grad, slots[0] if slots else None, rows, scale,
                   self.weight_decay, self.lr, getattr(self, "eps", 0.0), zero)
        return True

    def delta(self, name: str, rows, g: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def slot(self, name: str, kind: str) -> np.ndarray:
        # not setdefault(name, zeros_like(...)): that zeroes a whole new
        # table (11 MB for SST's embeddings) on every step, then drops it
        slots = self.state.setdefault(kind, {})
        if name not in slots:
            slots[name] = np.zeros_like(self.params[name])
        return slots[name]

    def state_dict(self) -> Arrays:
        flat = {f"{kind}/{name}": v for kind, arrays in self.state.items()
                for name, v in arrays.items()}
        flat["steps"] = np.array(self.steps)
        return flat

    def load_state_dict(self, flat: Arrays) -> None:
        self.steps = int(flat.get("steps", 0))
        self.state = {}
        for key, value in flat.items():
            if "/" in key:
                kind, name = key.split("/", 1)
                self.state.setdefault(kind, {})[name] = np.array(value, np.float32)


class SGD(Optimizer):
    FUSED = SGD_KIND

    def delta(self, name, rows, g):
        return np.float32(self.lr) * g


class Adagrad(Optimizer):
    """Tai et al.'s optimizer (lr 0.05, weight decay 1e-4)."""

    SLOTS = SQUARES = ("sum_sq",)
    FUSED = ADAGRAD

    def __init__(self, params: Arrays, lr: float = 0.05, weight_decay: float = 0.0,
                 eps: float = 1e-8):
        super().__init__(params, lr, weight_decay)
        check_eps(eps)
        self.eps = eps

    def delta(self, name, rows, g):
        total = self.slot(name, "sum_sq")
        summed = total[rows]
        summed += g * g
        if not isinstance(rows, slice):
            total[rows] = summed
        root = np.sqrt(summed)
        root += np.float32(self.eps)
        g *= np.float32(self.lr)
        g /= root
        return g


class Adam(Optimizer):
    SLOTS = ("m", "v")
    SQUARES = ("v",)

    def __init__(self, params: Arrays, lr: float = 1e-3, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        super().__init__(params, lr, weight_decay)
        check_eps(eps)
        check_betas(betas)
        self.betas, self.eps = betas, eps

    def delta(self, name, rows, g):
        b1, b2 = self.betas
        m, v = self.slot(name, "m"), self.slot(name, "v")
        m[rows] = b1 * m[rows] + (1 - b1) * g
        v[rows] = b2 * v[rows] + (1 - b2) * g * g
        m_hat = m[rows] / (1 - b1 ** self.steps)
        v_hat = v[rows] / (1 - b2 ** self.steps)
        return (np.float32(self.lr) * m_hat / (np.sqrt(v_hat) + np.float32(self.eps))
                ).astype(np.float32)


OPTIMIZERS = {"sgd": SGD, "adagrad": Adagrad, "adam": Adam}
