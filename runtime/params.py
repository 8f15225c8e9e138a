"""Kernel parameter blocks: the ``void*[]`` a launch hands the driver, built once per launch site.

A slot per ABI argument (a device address for pointers, an int32 for ``i32``) followed by the two
pointers every Triton 3.6 kernel takes last (global and profile scratch; NULL, as the packages
need neither). The step rewrites only the slots of its inputs, so a launch builds nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

TRAILING_NULL_POINTERS = 2


class ParamBlock:
    def __init__(self, types: Sequence[str], values: Sequence[int]):
        if len(types) != len(values):
            raise ValueError(f"{len(types)} parameter types for {len(values)} values")
        self._slots = [(ctypes.c_int32 if t == "i32" else ctypes.c_uint64)(v) for t, v in zip(types, values)]
        self._slots += [ctypes.c_uint64(0) for _ in range(TRAILING_NULL_POINTERS)]
        self._array = (ctypes.c_void_p * len(self._slots))(*(ctypes.addressof(s) for s in self._slots))
        self.address = ctypes.addressof(self._array)

    def __setitem__(self, index: int, value: int) -> None:
        self._slots[index].value = value

    def __getitem__(self, index: int) -> int:
        return self._slots[index].value

    def __len__(self) -> int:
        return len(self._slots)
