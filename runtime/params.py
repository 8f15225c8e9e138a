"""Kernel parameter blocks: the ``void*[]`` a launch hands the driver, built once per launch site.

A slot per ABI argument (a device address for pointers, an int32 for ``i32``; a TMA descriptor
argument is three kinds of kernel parameter: the 128-byte descriptor by value, then the tensor's
shape as int32 and strides as int64, a dimension each) followed by the two pointers every Triton
3.6 kernel takes last (global and profile scratch; NULL, as the packages need neither). The step
rewrites only the slots of its inputs, so a launch builds nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from .tma import DESCRIPTOR_ALIGN, DESCRIPTOR_BYTES, Descriptor

TRAILING_NULL_POINTERS = 2


def _aligned_copy(data: bytes, align: int):
    """``data`` in a buffer at an ``align``-byte boundary: (the buffer, to keep alive, and the address)."""
    buf = ctypes.create_string_buffer(len(data) + align)
    address = -(-ctypes.addressof(buf) // align) * align
    ctypes.memmove(address, data, len(data))
    return buf, address


class ParamBlock:
    def __init__(self, types: Sequence[str], values: Sequence):
        if len(types) != len(values):
            raise ValueError(f"{len(types)} parameter types for {len(values)} values")
        self._slots: list = []  # per ABI argument: its scalar slot (None for a descriptor)
        self._keep: list = []  # everything the pointer array points into
        addresses: list[int] = []
        for t, v in zip(types, values):
            if t.startswith("tensordesc"):
                if not isinstance(v, Descriptor) or len(v.encoded) != DESCRIPTOR_BYTES:
                    raise ValueError(f"a {t} parameter takes a TMA descriptor, got {type(v).__name__}")
                buf, address = _aligned_copy(v.encoded, DESCRIPTOR_ALIGN)
                parts = [ctypes.c_int32(n) for n in v.shape] + [ctypes.c_int64(s) for s in v.strides]
                self._keep += [buf, *parts]
                addresses += [address, *(ctypes.addressof(p) for p in parts)]
                self._slots.append(None)
            else:
                slot = (ctypes.c_int32 if t == "i32" else ctypes.c_uint64)(v)
                self._keep.append(slot)
                addresses.append(ctypes.addressof(slot))
                self._slots.append(slot)
        nulls = [ctypes.c_uint64(0) for _ in range(TRAILING_NULL_POINTERS)]
        self._keep += nulls
        addresses += [ctypes.addressof(n) for n in nulls]
        self._array = (ctypes.c_void_p * len(addresses))(*addresses)
        self.address = ctypes.addressof(self._array)
        self.count = len(addresses)

    def __setitem__(self, index: int, value: int) -> None:
        self._slots[index].value = value

    def __getitem__(self, index: int) -> int:
        return self._slots[index].value

    def __len__(self) -> int:
        return len(self._slots) + TRAILING_NULL_POINTERS
