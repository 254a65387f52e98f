"""One compiled function called from several Python threads at once (ctypes
releases the GIL, so their native code really runs side by side): every
mode, compiled for one thread and for a team, against the same calls made
one at a time beforehand. Each thread makes a few calls with its own trees
and its own fresh gradient buffers."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

import recir
from recir.data import make_tree
from recir.models import tree_lstm

PYTHON_THREADS = 4
CALLS_PER_THREAD = 3
HIDDEN, VOCAB = 16, 100


def tree_args(tree) -> tuple:
    return tree.left, tree.right, tree.word, tree.label, tree.root


@pytest.fixture(autouse=True)
def calls_on_teams(monkeypatch):
    """These trees are small: without this, team functions would run most
    calls on one thread (`policy.team_pays`): a team's start made free."""
    from recir.backend import policy

    measured = policy.costs()
    monkeypatch.setattr(policy, "costs", lambda cache_dir=None: policy.Costs(
        measured.unit_s, measured.task_s, 0.0))


@pytest.fixture(scope="module")
def model():
    params = tree_lstm.init_params(np.random.default_rng(0), hidden=HIDDEN, vocab=VOCAB)
    return tree_lstm.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})


@pytest.fixture(scope="module")
def work():
    """Per Python thread, per call: a batch of 2-3 trees of 16-48 leaves,
    balanced (a frontier call's team steps grow with the height), each call's
    of other sizes and words (the single-call modes use its first tree)."""
    rng = np.random.default_rng(7)
    return [[[tree_args(make_tree("balanced", int(rng.integers(16, 49)), rng, VOCAB))
              for _ in range(2 + (t + c) % 2)]
             for c in range(CALLS_PER_THREAD)]
            for t in range(PYTHON_THREADS)]


@pytest.fixture(scope="module")
def functions(model):
    """Every function under test, by (mode, compiled threads), shared by the tests."""
    made = {}
    for threads in (1, 2):
        made["recursive", threads] = recir.compile(model, threads=threads)
        made["gradient", threads] = recir.value_and_grad(model, threads=threads)
        made["frontier", threads] = recir.compile(model, batching="frontier", threads=threads)
        made["frontier-gradient", threads] = recir.value_and_grad(
            model, batching="frontier", threads=threads)
    return made


def fresh(params) -> dict[str, np.ndarray]:
    return {k: np.zeros_like(v) for k, v in params.items()}


def run_at_once(calls, work) -> list[list]:
    """Thread t makes call(batch) for each of `work[t]`'s batches, all threads
    at once (released together), `call` being `calls` or `calls[t]`; the
    results by thread and call."""
    results = [[None] * len(batches) for batches in work]
    errors: list[BaseException] = []
    start = threading.Barrier(len(work))

    def worker(t: int) -> None:
        call = calls[t] if isinstance(calls, list) else calls
        try:
            start.wait()
            for c, batch in enumerate(work[t]):
                results[t][c] = call(batch)
        except BaseException as e:  # reported on the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(len(work))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def one_at_a_time(call, work) -> list[list]:
    return [[call(batch) for batch in calls] for calls in work]


def assert_outputs(got, expected, rtol: float) -> None:
    """Outputs of one call (a tuple of arrays and scalars) or of a batch (a
    list of them); rtol 0: identical."""
    if isinstance(expected, list):
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert_outputs(g, e, rtol)
        return
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=1e-6 if rtol else 0)


def assert_grads(got: dict, expected: dict, rtol: float) -> None:
    """Within `rtol` of each gradient's largest entry (a sum's small entries
    move most with its order)."""
    assert got.keys() == expected.keys()
    for name, want in expected.items():
        scale = float(np.abs(want).max()) or 1.0
        np.testing.assert_allclose(got[name], want, rtol=0, atol=rtol * scale, err_msg=name)


def check(call, work, compare) -> None:
    expected = one_at_a_time(call, work)
    got = run_at_once(call, work)
    for g_thread, e_thread in zip(got, expected, strict=True):
        for g, e in zip(g_thread, e_thread, strict=True):
            compare(g, e)


# Recursive inference is exact whatever the schedule (or spawn budget);
# gradients on a team add the threads' copies in an order that varies: within
# float32 rounding (and the frontier's results are held to that too).
TEAM_RTOL = 1e-5


@pytest.mark.parametrize("threads", [1, 2])
def test_inference_single_calls(functions, work, threads):
    f = functions["recursive", threads]
    check(lambda batch: f(*batch[0]), work, lambda g, e: assert_outputs(g, e, 0))


@pytest.mark.parametrize("threads", [1, 2])
def test_inference_batches(functions, work, threads):
    f = functions["recursive", threads]
    check(f.batch, work, lambda g, e: assert_outputs(g, e, 0))


def compare_grad_calls(g, e) -> None:
    assert_outputs(g[0], e[0], TEAM_RTOL)
    assert_grads(g[1], e[1], TEAM_RTOL)


@pytest.mark.parametrize("threads", [1, 2])
def test_gradient_single_calls(functions, work, model, threads):
    f = functions["gradient", threads]
    check(lambda batch: f(*batch[0], into=fresh(model.params)), work, compare_grad_calls)


@pytest.mark.parametrize(("threads", "batch_threads"), [(1, 1), (1, 2), (2, 2)])
def test_gradient_batches(functions, work, model, threads, batch_threads):
    """(1, 2): a function compiled for one thread, its trees on a pool of two."""
    f = functions["gradient", threads]
    check(lambda batch: f.batch(batch, into=fresh(model.params), threads=batch_threads),
          work, compare_grad_calls)


@pytest.mark.parametrize("threads", [1, 2])
def test_frontier_inference(functions, work, threads):
    f = functions["frontier", threads]
    check(f.batch, work, lambda g, e: assert_outputs(g, e, TEAM_RTOL))
    one_call = [calls[:1] for calls in work]  # (f(x) is f.batch([x]): several calls above)
    check(lambda batch: f(*batch[0]), one_call, lambda g, e: assert_outputs(g, e, TEAM_RTOL))


@pytest.mark.parametrize("threads", [1, 2])
def test_frontier_gradients(functions, work, model, threads):
    f = functions["frontier-gradient", threads]
    check(lambda batch: f.batch(batch, into=fresh(model.params)), work, compare_grad_calls)
    one_call = [calls[:1] for calls in work]
    check(lambda batch: f(*batch[0], into=fresh(model.params)), one_call, compare_grad_calls)


def test_different_functions_at_once(functions, work, model):
    """Functions of five kinds, each from its own Python thread, all at once:
    what they share (OpenMP teams, BLAS threads, tape and log pools, two
    frontier functions' thread counts)."""
    calls = [lambda b, f=functions["recursive", 2]: f.batch(b),
             lambda b, f=functions["gradient", 2]: f.batch(b, into=fresh(model.params)),
             lambda b, f=functions["frontier", 1]: f.batch(b),
             lambda b, f=functions["frontier-gradient", 2]: f.batch(b, into=fresh(model.params)),
             lambda b, f=functions["gradient", 1]: f(*b[0], into=fresh(model.params))]
    mine = [work[k % len(work)] for k in range(len(calls))]
    expected = [one_at_a_time(call, [batches])[0] for call, batches in zip(calls, mine)]
    for got, want in zip(run_at_once(calls, mine), expected, strict=True):
        for g, e in zip(got, want, strict=True):
            if isinstance(e, tuple) and len(e) == 2 and isinstance(e[1], dict):
                compare_grad_calls(g, e)
            else:
                assert_outputs(g, e, TEAM_RTOL)


def test_team_leaders_start_teams_for_threads_that_end():
    """The main thread forms its own teams; a thread that may end hands the
    start to a lasting leader (`stack.TeamLeaders`)."""
    from recir.backend import stack

    assert stack.LEADERS.run(threading.current_thread) is threading.current_thread()
    seen: list = []
    caller = threading.Thread(target=lambda: seen.append(
        (threading.current_thread(), stack.LEADERS.run(
            lambda: (threading.current_thread(), stack.lasting())))))
    caller.start()
    caller.join()
    (me, (leader, lasting)), = seen
    assert leader is not me and lasting


# Python threads that make team calls and end, round after round: under
# LLVM's libomp each such thread's end freed task memory its team's workers
# still held, and a later team call crashed or added garbage. In a process of
# its own, so that a crash fails this test rather than ending the test run;
# the model is the `model` fixture's, whose code `functions` has cached.
CHURN = f"""
import threading, numpy as np, recir
from recir.backend import policy
from recir.data import make_tree
from recir.models import tree_lstm
measured = policy.costs()  # a team's start free: small trees on teams
policy.costs = lambda cache_dir=None: policy.Costs(measured.unit_s, measured.task_s, 0.0)
params = tree_lstm.init_params(np.random.default_rng(0), hidden={HIDDEN}, vocab={VOCAB})
model = tree_lstm.trace_model({{k: (0.3 * v).astype(np.float32) for k, v in params.items()}})
infer, grad = recir.compile(model, threads=2), recir.value_and_grad(model, threads=2)
rng = np.random.default_rng(3)
trees = [[(t.left, t.right, t.word, t.label, t.root)
          for t in (make_tree("balanced", int(rng.integers(16, 33)), rng, {VOCAB}) for _ in range(3))]
         for _ in range(4)]
def calls(batch):
    into = {{k: np.zeros_like(v) for k, v in model.params.items()}}
    return infer.batch(batch), grad(*batch[0], into=into)
want = [calls(batch) for batch in trees]
def close(got, expected):
    (outs, (values, grads)), (outs_e, (values_e, grads_e)) = got, expected
    assert all(np.array_equal(a, b) for o, e in zip(outs, outs_e) for a, b in zip(o, e))
    assert all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(values, values_e))
    for k, g in grads_e.items():
        assert np.abs(grads[k] - g).max() <= 1e-5 * (np.abs(g).max() or 1.0), k
for round in range(12):
    got = [None] * len(trees)
    def work(t):
        got[t] = calls(trees[t])
    threads = [threading.Thread(target=work, args=(t,)) for t in range(len(trees))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for g, e in zip(got, want):
        close(g, e)
print("same")
"""


def test_team_calls_from_threads_that_end(functions):
    done = subprocess.run([sys.executable, "-c", CHURN],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "same", (
        f"exit status {done.returncode}: {done.stderr[-3000:]}")
