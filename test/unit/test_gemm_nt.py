"""The forward product `x @ w.T` (`gemm.gemm(x, w.T)`: the nt kernel) against NumPy."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from recir.backend.kernels import gemm


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 9, 17])
@pytest.mark.parametrize("n,k", [(1, 1), (3, 7), (5, 8), (7, 13), (750, 300), (1280, 512)])
def test_nt_matches_numpy(m, n, k):
    """Every tile size (4 x 3 and its edges) and k tail (masked loads)."""
    rng = np.random.default_rng(m * 1000 + n + k)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    np.testing.assert_allclose(gemm.gemm(x, w.T), want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_nt_reads_rows_of_views():
    """x and w with row strides longer than their rows (column slices)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 40), dtype=np.float32)[:, 3:30]
    w = rng.standard_normal((10, 33), dtype=np.float32)[:, 1:28]
    np.testing.assert_allclose(gemm.gemm(x, w.T), x @ w.T, rtol=1e-4, atol=1e-4)


def test_nt_stays_inside_its_arrays():
    """x, w and y each end at a page followed by an inaccessible one: a read
    or write past any of them would kill the child process."""
    code = textwrap.dedent("""
        import ctypes, mmap
        import numpy as np
        from recir.backend.kernels.compiled_gemm import kernel

        PAGE = mmap.PAGESIZE
        libc = ctypes.CDLL(None)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        keep = []

        def at_page_end(shape):
            size = int(np.prod(shape)) * 4
            pages = -(-size // PAGE)
            buf = mmap.mmap(-1, (pages + 1) * PAGE)
            base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
            assert libc.mprotect(base + pages * PAGE, PAGE, 0) == 0
            keep.append(buf)
            a = np.frombuffer(buf, np.float32, int(np.prod(shape)), pages * PAGE - size)
            return a.reshape(shape)

        rng = np.random.default_rng(0)
        for m, n, k in [(5, 7, 13), (3, 4, 1), (4, 3, 8), (2, 1280, 512), (9, 750, 300)]:
            x, w = at_page_end((m, k)), at_page_end((n, k))
            x[...] = rng.standard_normal((m, k))
            w[...] = rng.standard_normal((n, k))
            y = at_page_end((m, n))
            kernel("nt")(m, n, k, x.ctypes.data, k, w.ctypes.data, k, y.ctypes.data, n, 0)
            np.testing.assert_allclose(y, x @ w.T, rtol=1e-4, atol=1e-3)
        print("inside")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "inside" in done.stdout

