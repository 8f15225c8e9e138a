"""The CUDA driver API, as much of it as the runtime needs: load a cubin, query, launch.

Through ``cuda.bindings.driver`` (NVIDIA's own binding; in the GPU image, ``pip install
cuda-bindings`` elsewhere). Launches go through ``cuLaunchKernelEx`` with a config built once per
launch site: the step only points it at the caller's stream and hands over a prebuilt parameter
block, so a launch costs one driver call. torch owns the context (its primary context); this
module makes that context current in the calling thread and otherwise only borrows it.
"""

from __future__ import annotations


class DriverError(RuntimeError):
    """A CUDA driver call failed; says which call and the driver's error name."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise DriverError("monobuild.runtime needs NVIDIA's driver binding: pip install cuda-bindings") from e
    return driver


def _check(result, call: str):
    """Unwrap a cuda.bindings return tuple, raising on an error code."""
    driver = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise DriverError(f"{call} failed: {name.decode() if name else int(err)}")
    return values[0] if len(values) == 1 else values


_primary_contexts: dict[int, object] = {}  # retained once per device for the process's lifetime


def make_context_current(ordinal: int) -> None:
    """Make the device's primary context (the one torch uses) current in this thread."""
    driver = _driver()
    ctx = _primary_contexts.get(ordinal)
    if ctx is None:
        dev = _check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
        ctx = _primary_contexts[ordinal] = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


class CudaKernel:
    """One kernel of a loaded cubin, with its launch geometry and launch attributes (PDL, cooperative)."""

    def __init__(self, binary: bytes, symbol: str, grid: int, block: int, shared_bytes: int,
                 pdl: bool, cooperative: bool):
        driver = _driver()
        self._module = _check(driver.cuModuleLoadData(binary), "cuModuleLoadData")
        self.function = _check(driver.cuModuleGetFunction(self._module, symbol.encode()), f"cuModuleGetFunction({symbol})")
        if shared_bytes > 48 * 1024:
            _check(driver.cuFuncSetAttribute(
                self.function, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shared_bytes), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
        self.grid, self.block, self.shared_bytes = grid, block, shared_bytes
        self.pdl, self.cooperative, self.symbol = pdl, cooperative, symbol
        self._driver = driver
        self._launch_config, self._stream = self._config(), None

    def resident_ctas_per_sm(self) -> int:
        """What the driver says fits on one SM at this block size and shared memory."""
        driver = _driver()
        return _check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function, self.block, self.shared_bytes),
                      "cuOccupancyMaxActiveBlocksPerMultiprocessor")

    def pin_ctas_per_sm(self, want: int) -> int:
        """Launch with enough unused dynamic shared memory that at most ``want`` CTAs fit per SM.

        A cooperative grid of ``want`` × SMs CTAs is only spread evenly, ``want`` per SM, when no
        more fit: with room for one more, the hardware may stack three CTAs on some SMs and one on
        others, and the busiest SM sets the pace (H200, Llama-3.2-1B planned at 2 per SM with room
        for 3: 1.37 ms unpinned, 1.15 ms pinned). Returns what fits afterwards.
        """
        fits = self.resident_ctas_per_sm()
        if fits <= want:
            return fits
        driver, attr = self._driver, self._driver.CUdevice_attribute
        device = _check(driver.cuCtxGetDevice(), "cuCtxGetDevice")

        def device_attr(a):
            return _check(driver.cuDeviceGetAttribute(a, device), f"cuDeviceGetAttribute({a.name})")

        per_sm = device_attr(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
        reserved = device_attr(attr.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK)
        opt_in = device_attr(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        static = _check(driver.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                                  self.function), "cuFuncGetAttribute(SHARED_SIZE_BYTES)")
        dynamic = min(per_sm // want - reserved - static, opt_in - static)
        if dynamic <= self.shared_bytes:
            return fits
        fn_attr = driver.CUfunction_attribute
        _check(driver.cuFuncSetAttribute(self.function, fn_attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         dynamic), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
        _check(driver.cuFuncSetAttribute(self.function, fn_attr.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                         100), "cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)")
        self.shared_bytes = dynamic
        self._launch_config, self._stream = self._config(), None
        return self.resident_ctas_per_sm()

    def _config(self):
        driver = _driver()
        config = driver.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = self.grid, 1, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = self.block, 1, 1
        config.sharedMemBytes = self.shared_bytes
        attrs = []
        if self.cooperative:
            a = driver.CUlaunchAttribute()
            a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            a.value.cooperative = 1
            attrs.append(a)
        if self.pdl:
            a = driver.CUlaunchAttribute()
            a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            a.value.programmaticStreamSerializationAllowed = 1
            attrs.append(a)
        config.attrs, config.numAttrs = attrs, len(attrs)
        return config

    def launch(self, stream: int, params_address: int) -> None:
        """Launch on the stream whose raw handle is ``stream``, with the void*[] at ``params_address``."""
        if stream != self._stream:
            self._launch_config.hStream = self._driver.CUstream(stream)
            self._stream = stream
        err, = self._driver.cuLaunchKernelEx(self._launch_config, self.function, params_address, 0)
        if err != self._driver.CUresult.CUDA_SUCCESS:
            _check((err,), f"launch of {self.symbol}")
