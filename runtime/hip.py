"""HIP's module API (ROCm), behind the same kernel interface as ``cuda.CudaKernel``.

ctypes over ``libamdhip64``: load an hsaco, find the kernel, launch it (cooperatively where the
manifest says). Kept small on purpose: no machine here has an AMD GPU, so this path has never
run; it is written against the HIP API's documented signatures and must be validated on a
gfx942/gfx950 machine before anyone relies on it. PDL has no HIP counterpart; the launch
boundary orders layer programs there.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from .cuda import DriverError

_lib = None


def _hip():
    global _lib
    if _lib is None:
        name = ctypes.util.find_library("amdhip64") or "libamdhip64.so"
        try:
            _lib = ctypes.CDLL(name)
        except OSError as e:
            raise DriverError(f"cannot load the HIP runtime ({name}): {e}") from e
    return _lib


def _check(code: int, call: str) -> None:
    if code != 0:
        lib = _hip()
        lib.hipGetErrorName.restype = ctypes.c_char_p
        raise DriverError(f"{call} failed: {lib.hipGetErrorName(code).decode()}")


class HipKernel:
    """One kernel of a loaded hsaco, launched with hipModuleLaunch(Cooperative)Kernel."""

    def __init__(self, binary: bytes, symbol: str, grid: int, block: int, shared_bytes: int,
                 pdl: bool, cooperative: bool):
        lib = _hip()
        self._image = ctypes.create_string_buffer(binary, len(binary))
        self._module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib.hipModuleLoadData(ctypes.byref(self._module), self._image), "hipModuleLoadData")
        _check(lib.hipModuleGetFunction(ctypes.byref(self.function), self._module, symbol.encode()),
               f"hipModuleGetFunction({symbol})")
        self.grid, self.block, self.shared_bytes = grid, block, shared_bytes
        self.cooperative, self.symbol = cooperative, symbol

    def resident_ctas_per_sm(self) -> int:
        count = ctypes.c_int()
        _check(_hip().hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(count), self.function, self.block, ctypes.c_size_t(self.shared_bytes)),
            "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor")
        return count.value

    def launch(self, stream: int, params_address: int) -> None:
        lib = _hip()
        geometry = (ctypes.c_uint(self.grid), ctypes.c_uint(1), ctypes.c_uint(1),
                    ctypes.c_uint(self.block), ctypes.c_uint(1), ctypes.c_uint(1), ctypes.c_uint(self.shared_bytes))
        params, stream_ptr = ctypes.c_void_p(params_address), ctypes.c_void_p(stream)
        if self.cooperative:
            code = lib.hipModuleLaunchCooperativeKernel(self.function, *geometry, stream_ptr, params)
        else:
            code = lib.hipModuleLaunchKernel(self.function, *geometry, stream_ptr, params, None)
        _check(code, f"launch of {self.symbol}")
