"""Load a compiled package onto a GPU: check the device against the manifest, load the code objects.

``load`` refuses, with the reason, a device the package was not planned for (another
architecture, another SM/CU count: the persistent grids and the split counts are sized for it),
and a persistent program the driver says cannot be co-resident.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..manifest import Manifest, PackageError, ProgramSpec, read_code, read_manifest
from ..parallel import TensorParallel
from ..schema import Geometry, WeightQuant
from .buffers import TORCH_DTYPES
from .checkpoint import CheckpointError, SafetensorsCheckpoint
from .kvcache import KVCache, KVCacheError, allocate_kv_cache, as_kv_cache
from .weights import PackedWeights, WeightError, pack_hf_state_dict


class DeviceRefused(PackageError):
    """The package cannot run on this device; the message says why and what to do."""


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    arch: str  # sm_90, gfx942, gfx950
    sm_count: int  # SMs (NVIDIA) or CUs (AMD)


def describe_device(index: int) -> DeviceInfo:
    props = torch.cuda.get_device_properties(index)
    if torch.version.hip:
        arch = props.gcnArchName.split(":", 1)[0]
    else:
        arch = f"sm_{props.major}{props.minor}"
    return DeviceInfo(props.name, arch, props.multi_processor_count)


def check_device(manifest: Manifest, device: DeviceInfo) -> None:
    """Refuse a device whose architecture or SM/CU count differs from the package's plan."""
    if device.arch != manifest.target:
        raise DeviceRefused(f"package {manifest.recipe} is compiled for {manifest.target}; this device "
                            f"({device.name}) is {device.arch}: compile the recipe with --target {device.arch}")
    if device.sm_count != manifest.sm_count:
        raise DeviceRefused(f"package {manifest.recipe} is planned for {manifest.sm_count} SMs; this device "
                            f"({device.name}) has {device.sm_count}: set sm_count: {device.sm_count} in the recipe "
                            "and compile again (the persistent grids and attention splits are sized by it)")


def _kernel_class(target: str):
    if target.startswith("sm_"):
        from .cuda import CudaKernel

        return CudaKernel
    from .hip import HipKernel

    return HipKernel


class Package:
    """A package loaded on one device: its manifest and one loaded kernel per program."""

    def __init__(self, path: Path, manifest: Manifest, device: torch.device, kernels: dict):
        self.path, self.manifest, self.device, self.kernels = path, manifest, device, kernels

    @property
    def geometry(self) -> Geometry:
        return self.manifest.geometry

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(self.manifest.deployment.modes)

    @property
    def dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.manifest.deployment.dtypes.weights]

    @property
    def kv_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.manifest.deployment.dtypes.kv]

    @property
    def block_size(self) -> int:
        return self.manifest.deployment.kv_cache.block_size

    @property
    def quant(self) -> WeightQuant | None:
        """The checkpoint's weight quantization the programs were built for (None: unquantized)."""
        return self.manifest.deployment.quant

    def make_current(self) -> None:
        """Make the device's context current in the calling thread (the step does this on a new thread)."""
        if self.manifest.target.startswith("sm_"):
            from .cuda import make_context_current

            make_context_current(self.device.index)

    def allocate_kv_cache(self, num_blocks: int) -> KVCache:
        """A KV cache of ``num_blocks`` blocks per layer on this package's device (uninitialised)."""
        return allocate_kv_cache(self.geometry, self.block_size, self.kv_dtype, num_blocks, self.device)

    def bind_weights(self, weights, geometry: Geometry | None = None) -> PackedWeights:
        """Weights from an HF-named state_dict (any device) or a safetensors file or directory; an
        FP8 package's projections as the checkpoint stores them (E4M3 ``weight`` and its fp32
        ``weight_scale_inv``). ``geometry``: a rank's, whose shard these are (default: the model's)."""
        if isinstance(weights, (str, Path)):
            weights = SafetensorsCheckpoint(weights)
        return pack_hf_state_dict(weights, geometry or self.geometry, self.dtype, self.device, self.quant)

    def bind(self, weights, kv_cache, mode: str | None = None, group=None):
        """A callable decode step over these weights and this KV cache (both used in place).

        A package split over ranks (``tensor_parallel``) binds one rank in this process: ``group``
        is the ranks' ``torch.distributed`` process group (None: the default group), whose rank is
        this rank; ``weights`` its shard (``runtime.shards``, or the engine's own) and ``kv_cache``
        its KV heads'. Collective: every rank binds at once, exchanging its buffers' IPC handles
        (``runtime.peers``)."""
        from .step import DecodeStep

        ranks = self.manifest.deployment.tensor_parallel
        if ranks == 1:
            if group is not None:
                raise PackageError(f"{self.path}: a process group was given to a package that is not split over "
                                   "ranks")
            packed, cache = self._bound(weights, kv_cache, mode, self.geometry)
            return DecodeStep(self, packed, cache, mode or self.modes[0])
        from .peers import agree

        group = self._rank_group(ranks, group)
        try:
            packed, cache = self._bound(weights, kv_cache, mode, TensorParallel(ranks).rank_geometry(self.geometry))
            refusal = None
        except (PackageError, WeightError, KVCacheError, CheckpointError) as e:
            packed = cache = None
            refusal = f"{type(e).__name__}: {e}"
        agree(refusal, group)  # every rank goes on, or every rank raises, naming the ranks that refused
        return DecodeStep(self, packed, cache, mode or self.modes[0], group)

    def _bound(self, weights, kv_cache, mode: str | None, geometry: Geometry) -> tuple[PackedWeights, KVCache]:
        """This process's weights and KV cache (its rank's, under tensor parallelism), checked."""
        if mode is not None and mode not in self.modes:
            raise PackageError(f"{self.path}: mode {mode!r} is not in the package (it has {', '.join(self.modes)})")
        packed = weights if isinstance(weights, PackedWeights) else self.bind_weights(weights, geometry)
        return packed, as_kv_cache(kv_cache, geometry, self.block_size, self.kv_dtype, self.device)

    def _rank_group(self, ranks: int, group):
        """The process group a rank of a split package binds with, checked against the package."""
        import torch.distributed as dist

        if torch.version.hip is not None:
            raise PackageError(f"{self.path}: one rank a process on ROCm needs the cross-rank buffers allocated "
                               "fine-grained, which is not built (bind_ranks runs every rank on this device)")
        if not dist.is_available() or not dist.is_initialized():
            raise PackageError(f"{self.path}: a package of {ranks} tensor-parallel ranks binds one rank a process "
                               "through the ranks' process group: initialise torch.distributed (or pass group=), "
                               "or run every rank on this device with bind_ranks")
        size = dist.get_world_size(group)
        if size != ranks:
            raise PackageError(f"{self.path}: a package of {ranks} tensor-parallel ranks, bound in a process group "
                               f"of {size}")
        return group if group is not None else dist.group.WORLD

    def bind_ranks(self, weights: list, kv_caches: list, mode: str | None = None):
        """Every rank of a package split over ranks, on this device (``step.RanksStep``):
        ``weights[rank]`` the rank's shard (HF-named, ``runtime.shards``) and ``kv_caches[rank]``
        its KV heads' caches, both used in place."""
        from .step import RanksStep

        d = self.manifest.deployment
        tp = TensorParallel(d.tensor_parallel)
        if tp.size == 1 or len(weights) != tp.size or len(kv_caches) != tp.size:
            raise PackageError(f"{self.path}: bind_ranks takes every rank's weights and KV cache: {tp.size} "
                               f"ranks, given {len(weights)} and {len(kv_caches)}")
        mode = mode or self.modes[0]
        if mode not in self.modes:
            raise PackageError(f"{self.path}: mode {mode!r} is not in the package (it has {', '.join(self.modes)})")
        if mode == "persistent":
            raise PackageError(f"{self.path}: the ranks' persistent layer programs each fill the device and wait "
                               "for each other inside it, so on one device only mode 'staged' runs; bind one rank a "
                               "GPU with bind(..., group=)")
        g = tp.rank_geometry(self.geometry)
        packed = [w if isinstance(w, PackedWeights) else self.bind_weights(w, g) for w in weights]
        caches = [as_kv_cache(c, g, self.block_size, self.kv_dtype, self.device) for c in kv_caches]
        return RanksStep(self, packed, caches, mode)


def load(package_dir: str | Path, device: int | str | torch.device | None = None, *,
         pin_occupancy: bool = True, pdl: bool = True) -> Package:
    """Load the package at ``package_dir`` onto ``device`` (default: torch's current CUDA device).

    With ``pin_occupancy`` (CUDA), each cooperative program is launched with unused dynamic
    shared memory so that exactly its planned CTAs per SM fit (``CudaKernel.pin_ctas_per_sm``);
    turning it off is the ablation ``monobuild bench --no-pin-occupancy`` measures. ``pdl=False``
    launches without programmatic dependent launch (its ablation, ``--no-pdl``): the programs'
    ``griddepcontrol.wait`` then returns at once, since the previous launch has finished.
    """
    path = Path(package_dir)
    manifest = read_manifest(path)
    if not torch.cuda.is_available():
        raise DeviceRefused(f"{path}: no GPU is visible to torch (package {manifest.recipe} needs a "
                            f"{manifest.target} device)")
    if manifest.target.startswith("sm_") != (torch.version.hip is None):
        raise DeviceRefused(f"{path}: a {manifest.target} package needs a "
                            f"{'CUDA' if manifest.target.startswith('sm_') else 'ROCm'} build of torch")
    device = _cuda_device(device)
    check_device(manifest, describe_device(device.index))
    package = Package(path, manifest, device, {})
    package.make_current()
    kernel_class = _kernel_class(manifest.target)
    package.kernels.update({p.name: _load_kernel(path, p, kernel_class, pdl) for p in manifest.programs})
    for p in manifest.programs:
        if p.launch_cooperative:
            kernel = package.kernels[p.name]
            if pin_occupancy and hasattr(kernel, "pin_ctas_per_sm"):  # HIP: not measured, not pinned
                kernel.pin_ctas_per_sm(-(-p.grid // manifest.sm_count))
            fits = kernel.resident_ctas_per_sm() * manifest.sm_count
            if fits < p.grid:
                raise DeviceRefused(f"{path}: {p.name} needs {p.grid} co-resident CTAs; the driver fits {fits} "
                                    f"({p.resources.registers} registers, {p.shared_bytes} B shared memory, "
                                    f"{p.block} threads each)")
    return package


def _cuda_device(device) -> torch.device:
    if isinstance(device, int):
        return torch.device("cuda", device)
    d = torch.device(device) if device is not None else torch.device("cuda")
    if d.type != "cuda":
        raise DeviceRefused(f"device {d}: packages run on a GPU (cuda)")
    return torch.device("cuda", torch.cuda.current_device() if d.index is None else d.index)


def _load_kernel(path: Path, p: ProgramSpec, kernel_class, pdl: bool):
    binary = read_code(path, p)
    return kernel_class(binary, p.symbol, p.grid, p.block, p.shared_bytes, p.launch_pdl and pdl, p.launch_cooperative)
