"""Plain-Python references for the static-recursion thesis programs.

These are the oracles for `examples/ir/*.mlir`; definitions follow the
static-recursion thesis's Appendix C exactly (`thesis_primes` is the
thesis's own, not the n-th prime). Written with explicit stacks or
memoisation so that large arguments do not hit Python's recursion limit.
"""

from __future__ import annotations

from functools import cache


def fib(n: int) -> int:
    a, b = 1, 1  # fib(0) = fib(1) = 1
    for _ in range(max(n - 1, 0)):
        a, b = b, a + b
    return b if n >= 1 else a


def ack(m: int, n: int) -> int:
    stack = [m]
    while stack:
        m = stack.pop()
        if m == 0:
            n += 1
        elif n == 0:
            stack.append(m - 1)
            n = 1
        else:
            stack += [m - 1, m]
            n -= 1
    return n


@cache
def tak(x: int, y: int, z: int) -> int:
    if y < x:
        return tak(tak(x - 1, y, z), tak(y - 1, z, x), tak(z - 1, x, y))
    return z


def _test(n: int, i: int) -> bool:
    while (6 * i - 1) ** 2 <= n:
        if n % (6 * i - 1) == 0:
            return False
        i += 1
    return True


def thesis_primes(n: int) -> int:
    if n <= 0:
        return 2
    if n == 1:
        return 3
    n, i, minus = n - 2, 1, True  # prime_minus(n - 2, 1)
    while True:
        candidate = 6 * i - 1
        if _test(candidate, 1):
            if n == 0:
                return candidate
            n -= 1
        if not minus:
            i += 1
        minus = not minus


CALLS = {
    "fib": (fib, "fib.mlir"),
    "ack": (ack, "ackermann.mlir"),
    "tak": (tak, "takeuchi.mlir"),
    "thesis_primes": (thesis_primes, "thesis_primes.mlir"),
}
