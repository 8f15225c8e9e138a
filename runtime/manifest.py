"""The package manifest: the named ABI between the compiler and the runtime.

The compiler writes ``manifest.json``; the runtime reads it into these frozen dataclasses. Only
the standard library is used here, so a serving image needs nothing of the compiler.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MANIFEST_FORMAT = 1
DTYPE_BYTES = {"bf16": 2, "fp32": 4, "i32": 4, "i64": 8}


class PackageError(Exception):
    """A package directory that cannot be loaded: says which file and what is wrong."""


@dataclass(frozen=True)
class ArgSpec:
    name: str
    type: str  # *bf16, *fp32, *i32, *i64 (device pointers) or i32


@dataclass(frozen=True)
class BandSpec:
    rows: int
    tokens: int

    @property
    def m(self) -> int:
        return self.rows * self.tokens

    @property
    def name(self) -> str:
        return f"r{self.rows}t{self.tokens}"


@dataclass(frozen=True)
class RegionSpec:
    name: str
    kind: str
    dtype: str
    shape: tuple[int, ...]
    writer: str | None
    readers: tuple[str, ...]
    same_stage: str | None = None  # why a same-stage reader needs no sync (see compiler/plan.py)

    @property
    def nbytes(self) -> int:
        n = DTYPE_BYTES[self.dtype]
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class StageSpec:
    name: str
    tasks: int
    weight_bytes: int
    kv_bytes_per_token: int
    io_bytes: int


@dataclass(frozen=True)
class SyncSpec:
    counter: int
    producer: str
    consumer: str
    regions: tuple[str, ...]
    signals_per_epoch: int


@dataclass(frozen=True)
class ResourceSpec:
    registers: int
    spill_bytes: int
    stack_bytes: int
    shared_bytes: int
    threads: int
    ctas_per_unit: int


@dataclass(frozen=True)
class ProgramSpec:
    name: str
    kind: str
    mode: str
    band: BandSpec
    symbol: str
    code: str  # path of the code object, relative to the package
    ir: tuple[tuple[str, str], ...]  # (kind, relative path)
    args: tuple[ArgSpec, ...]
    grid: int
    block: int  # threads per CTA
    shared_bytes: int  # dynamic shared memory at launch
    launch_pdl: bool
    launch_cooperative: bool
    stages: tuple[StageSpec, ...]
    regions: tuple[RegionSpec, ...]
    syncs: tuple[SyncSpec, ...]
    constexprs: tuple[tuple[str, object], ...]
    resources: ResourceSpec
    fingerprint: str
    cache_key: str


@dataclass(frozen=True)
class LaunchSpec:
    program: str
    layer: int | None


@dataclass(frozen=True)
class StepSpec:
    band: BandSpec
    mode: str
    launches: tuple[LaunchSpec, ...]


@dataclass(frozen=True)
class Manifest:
    recipe: str
    target: str
    sm_count: int
    geometry: dict
    deployment: dict
    toolchain: tuple[tuple[str, str], ...]
    programs: tuple[ProgramSpec, ...]
    steps: tuple[StepSpec, ...]

    def program(self, name: str) -> ProgramSpec:
        for p in self.programs:
            if p.name == name:
                return p
        raise KeyError(name)


def _program(d: dict) -> ProgramSpec:
    return ProgramSpec(
        name=d["name"], kind=d["kind"], mode=d["mode"], band=BandSpec(**d["band"]), symbol=d["symbol"],
        code=d["code"], ir=tuple(sorted(d["ir"].items())), args=tuple(ArgSpec(**a) for a in d["args"]),
        grid=d["grid"], block=d["block"], shared_bytes=d["shared_bytes"], launch_pdl=d["launch"]["pdl"],
        launch_cooperative=d["launch"]["cooperative"], stages=tuple(StageSpec(**s) for s in d["stages"]),
        regions=tuple(RegionSpec(r["name"], r["kind"], r["dtype"], tuple(r["shape"]), r["writer"],
                                 tuple(r["readers"]), r.get("same_stage")) for r in d["regions"]),
        syncs=tuple(SyncSpec(s["counter"], s["producer"], s["consumer"], tuple(s["regions"]),
                             s["signals_per_epoch"]) for s in d["syncs"]),
        constexprs=tuple(sorted(d["constexprs"].items())), resources=ResourceSpec(**d["resources"]),
        fingerprint=d["fingerprint"], cache_key=d["cache_key"],
    )


def manifest_from_json(doc: dict) -> Manifest:
    if doc.get("format") != MANIFEST_FORMAT:
        raise PackageError(f"manifest format {doc.get('format')!r} is not {MANIFEST_FORMAT}")
    return Manifest(
        recipe=doc["recipe"], target=doc["target"], sm_count=doc["sm_count"], geometry=doc["geometry"],
        deployment=doc["deployment"], toolchain=tuple(sorted(doc["toolchain"].items())),
        programs=tuple(_program(p) for p in doc["programs"]),
        steps=tuple(StepSpec(BandSpec(**s["band"]), s["mode"],
                             tuple(LaunchSpec(x["program"], x["layer"]) for x in s["launches"]))
                    for s in doc["steps"]),
    )


def read_manifest(package_dir: str | Path) -> Manifest:
    path = Path(package_dir) / "manifest.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise PackageError(f"{path}: not found (is {package_dir} a package directory?)") from None
    except json.JSONDecodeError as e:
        raise PackageError(f"{path}: malformed JSON at line {e.lineno}: {e.msg}") from None
    try:
        return manifest_from_json(doc)
    except (KeyError, TypeError) as e:
        raise PackageError(f"{path}: missing or malformed field {e}") from None
