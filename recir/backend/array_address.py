"""Where a NumPy array's data is, as fast as Python can tell.

Every native call passes several arrays by address. NumPy's own answers
(`array.ctypes.data`, `__array_interface__`) build Python objects; ctypes'
`from_buffer` works only for writable, non-empty arrays. Reading the array
object's `data` field is several times faster than either: on CPython `id` is the object's
address, and NumPy's array struct has the pointer right after the object
header, which `data_field` checks against NumPy at import (elsewhere the
NumPy answer is used).
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np


def data_field() -> int:
    """The offset of the `data` pointer in an array object, 0 where an
    array here does not have it where CPython and NumPy put it."""
    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return 0
    probe = np.zeros(2, np.float32)
    return 16 if ctypes.c_void_p.from_address(id(probe) + 16).value == probe.ctypes.data else 0


DATA_FIELD = data_field()


def data_address(array: np.ndarray) -> int:
    """The address of `array`'s first element."""
    if DATA_FIELD:
        return ctypes.c_void_p.from_address(id(array) + DATA_FIELD).value or 0
    return array.ctypes.data
