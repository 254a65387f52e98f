"""`array_address.data_address` against NumPy's own answer."""

from __future__ import annotations

import numpy as np
import pytest

from recir.backend import array_address


@pytest.mark.parametrize("read_field", [True, False])
def test_data_address_is_numpys(monkeypatch, read_field):
    """Read from the array object where its layout was confirmed at import,
    else asked of NumPy: the same address either way."""
    if not read_field:
        monkeypatch.setattr(array_address, "DATA_FIELD", 0)
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    frozen = base.copy()
    frozen.flags.writeable = False
    for array in (base, base[1:], base[:, 2:], base.T, frozen, np.empty(0, np.int32),
                  np.zeros((), np.float32)):
        assert array_address.data_address(array) == array.ctypes.data
