"""Read tensors from a safetensors checkpoint (one file or a directory of shards).

The format is an 8-byte little-endian header length, a JSON header (dtype, shape and byte range
of each tensor) and the raw data; it is read here with the standard library and torch, memory-
mapped, so the runtime needs no other package and a tensor is only read when it is bound.
"""

from __future__ import annotations

import json
import mmap
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

DTYPES = {"F8_E4M3": torch.float8_e4m3fn, "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
          "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
          "U8": torch.uint8, "BOOL": torch.bool}


class CheckpointError(Exception):
    """A checkpoint that cannot be read: names the file and what is wrong."""


class _File:
    def __init__(self, path: Path):
        self.path = path
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise CheckpointError(f"{path}: too short to be a safetensors file")
            size = int.from_bytes(head, "little")
            try:
                self.header = json.loads(f.read(size))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise CheckpointError(f"{path}: malformed safetensors header: {e}") from None
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if path.stat().st_size > 8 + size else None
        self.data_start = 8 + size
        self.header.pop("__metadata__", None)

    def tensor(self, name: str) -> torch.Tensor:
        info = self.header[name]
        dtype = DTYPES.get(info["dtype"])
        if dtype is None:
            raise CheckpointError(f"{self.path}: {name} has dtype {info['dtype']}, which the runtime does not read")
        start, end = info["data_offsets"]
        shape = tuple(info["shape"])
        numel = 1
        for d in shape:
            numel *= d
        if end - start != numel * dtype.itemsize or self.data_start + end > len(self._map or b""):
            raise CheckpointError(f"{self.path}: {name}'s byte range does not match its shape {list(shape)}")
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        with warnings.catch_warnings():  # the map is read-only, and so is the tensor: binding copies it
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.frombuffer(self._map, dtype=dtype, count=numel, offset=self.data_start + start)
        return flat.view(shape)


class SafetensorsCheckpoint(Mapping):
    """A read-only mapping name → CPU tensor over a checkpoint's files; tensors are read on access."""

    def __init__(self, path: str | Path):
        path = Path(path)
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
        if not files or not files[0].exists():
            raise CheckpointError(f"{path}: no .safetensors files")
        self._where: dict[str, _File] = {}
        for f in files:
            opened = _File(f)
            for name in opened.header:
                self._where[name] = opened

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._where[name].tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)
