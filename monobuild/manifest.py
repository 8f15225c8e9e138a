"""The package manifest: the named ABI between the compiler and the runtime.

The compiler writes ``manifest.json``; the runtime reads it back into frozen dataclasses, the
per-program records being the planner's own (``monobuild.schema``). Only the standard library is
used here, so a serving image needs nothing of the compiler.
"""

from __future__ import annotations

import functools
import hashlib
import json
import types
import typing
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path, PurePosixPath

from .schema import Arg, Band, CrossRankSite, Geometry, Launch, PackageDeployment, Region, Stage, Step, SyncEdge, TensorMap

MANIFEST_FORMAT = 9  # 9: the ranks of tensor parallelism (``deployment.tensor_parallel``) and cross-rank sites


class PackageError(Exception):
    """A package directory that cannot be loaded: says which file and what is wrong."""


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
    band: Band
    symbol: str
    code: str  # path of the code object, relative to the package
    code_sha256: str  # its sha256: load and check refuse a code object that is not the one built
    ir: tuple[tuple[str, str], ...]  # (kind, relative path)
    args: tuple[Arg, ...]
    grid: int
    block: int  # threads per CTA
    shared_bytes: int  # dynamic shared memory at launch
    launch_pdl: bool
    launch_cooperative: bool
    pdl_wait: bool  # the code waits for the previous launch (griddepcontrol.wait) before reading what it wrote
    stages: tuple[Stage, ...]
    regions: tuple[Region, ...]
    syncs: tuple[SyncEdge, ...]
    counters: int  # sync counters a launch uses (its edges)
    hang_slots: int  # a debug build's hang-log records (0 otherwise)
    clock_slots: int  # int64 per CTA of a profiling build's stage clock (0: not clocked)
    params: tuple[tuple[str, object], ...]  # the planner's constants, for people reading a package; the runtime reads none
    resources: ResourceSpec
    fingerprint: str
    cache_key: str
    executor: str  # triton | gluon: which executor's driver wrote the program
    tensor_maps: tuple[TensorMap, ...]  # how the runtime encodes each TMA descriptor argument
    scalars: tuple[tuple[str, int], ...]  # the value of each band argument (role ``band``), which the runtime passes
    cross_rank: tuple[CrossRankSite, ...] = ()  # tensor parallelism: its signals and waits across ranks

    def tensor_map(self, arg: str) -> TensorMap:
        for t in self.tensor_maps:
            if t.arg == arg:
                return t
        raise KeyError(arg)


@dataclass(frozen=True)
class Manifest:
    recipe: str
    target: str
    sm_count: int
    geometry: Geometry
    deployment: PackageDeployment
    toolchain: tuple[tuple[str, str], ...]
    programs: tuple[ProgramSpec, ...]
    steps: tuple[Step, ...]

    def program(self, name: str) -> ProgramSpec:
        for p in self.programs:
            if p.name == name:
                return p
        raise KeyError(name)


def _program(d: dict) -> ProgramSpec:
    return ProgramSpec(
        name=d["name"], kind=d["kind"], mode=d["mode"], band=Band(**d["band"]), symbol=d["symbol"],
        code=_inside(d["code"]), code_sha256=d["code_sha256"],
        ir=tuple(sorted((k, _inside(v)) for k, v in d["ir"].items())),
        args=tuple(Arg(**a) for a in d["args"]),
        grid=d["grid"], block=d["block"], shared_bytes=d["shared_bytes"], launch_pdl=d["launch"]["pdl"],
        launch_cooperative=d["launch"]["cooperative"], pdl_wait=d["launch"]["pdl_wait"],
        stages=tuple(Stage(**s) for s in d["stages"]),
        regions=tuple(Region(r["name"], r["kind"], r["dtype"], tuple(r["shape"]), r["writer"],
                             tuple(r["readers"]), r.get("same_stage")) for r in d["regions"]),
        syncs=tuple(SyncEdge(s["counter"], s["producer"], s["consumer"], tuple(s["regions"]),
                             s["signals_per_epoch"]) for s in d["syncs"]),
        counters=d["counters"], hang_slots=d["hang_slots"], clock_slots=d["clock_slots"],
        params=tuple(sorted(d["params"].items())), resources=ResourceSpec(**d["resources"]),
        fingerprint=d["fingerprint"], cache_key=d["cache_key"], executor=d["executor"],
        tensor_maps=tuple(TensorMap(t["arg"], tuple(t["box"]), t["swizzle"], t["elem_bytes"]) for t in d["tensor_maps"]),
        scalars=tuple(sorted(d["scalars"].items())),
        cross_rank=tuple(CrossRankSite(**c) for c in d["cross_rank"]),
    )


def _inside(rel) -> str:
    """A path the manifest names, which must stay inside the package: relative, no '..'."""
    if not isinstance(rel, str) or not rel or PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
        raise ValueError(f"{rel!r} is not a path inside the package")
    return rel


def _typed(value, hint, where: str) -> None:
    """Raise TypeError naming ``where`` unless ``value`` has the annotated type ``hint`` (the
    records' own annotations: int, float, str, bool, X | None, tuple[X, ...], tuple[X, Y],
    nested records; ``object`` is anything). JSON gives lists where records hold tuples, so the
    readers build the records first and this walks them: a string where a count belongs, a
    list where a name belongs, a bool where an int belongs are refused here, not met later."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is object:
        return
    if origin in (typing.Union, types.UnionType):
        if not any(_accepts(value, a) for a in args):
            raise TypeError(f"{where}: {type(value).__name__} where {hint} belongs")
        for a in args:
            if _accepts(value, a):
                _typed(value, a, where)
                return
    if origin is tuple:
        if not isinstance(value, tuple):
            raise TypeError(f"{where}: {type(value).__name__} where a list belongs")
        items = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        if len(items) != len(value):
            raise TypeError(f"{where}: {len(value)} items where {len(items)} belong")
        for k, (v, h) in enumerate(zip(value, items)):
            _typed(v, h, f"{where}[{k}]")
        return
    if is_dataclass(hint):
        if not isinstance(value, hint):
            raise TypeError(f"{where}: {type(value).__name__} where a record belongs")
        hints = _hints(hint)
        for f in fields(hint):
            _typed(getattr(value, f.name), hints[f.name], f"{where}.{f.name}")
        return
    if not _accepts(value, hint):
        raise TypeError(f"{where}: {type(value).__name__} {str(value)[:40]!r} where {hint.__name__} belongs")


@functools.cache
def _hints(record: type) -> dict:
    return typing.get_type_hints(record)


def _accepts(value, hint) -> bool:
    if hint is type(None):
        return value is None
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    base = typing.get_origin(hint) or hint
    return isinstance(value, base) if isinstance(base, type) else True


def manifest_from_json(doc: dict) -> Manifest:
    """The manifest's records from its JSON, every field of the declared type (TypeError naming
    the field otherwise: ``read_manifest`` reports it)."""
    manifest = _manifest_records(doc)
    _typed(manifest, Manifest, "manifest")
    return manifest


def _manifest_records(doc: dict) -> Manifest:
    if not isinstance(doc, dict):
        raise PackageError("the manifest is not a JSON object")
    if type(doc.get("format")) is not int or doc["format"] != MANIFEST_FORMAT:
        raise PackageError(f"manifest format {doc.get('format')!r} is not {MANIFEST_FORMAT}")
    return Manifest(
        recipe=doc["recipe"], target=doc["target"], sm_count=doc["sm_count"],
        geometry=Geometry.from_json(doc["geometry"]), deployment=PackageDeployment.from_json(doc["deployment"]),
        toolchain=tuple(sorted(doc["toolchain"].items())),
        programs=tuple(_program(p) for p in doc["programs"]),
        steps=tuple(Step(Band(**s["band"]), s["mode"],
                             tuple(Launch(x["program"], x["layer"]) for x in s["launches"]))
                    for s in doc["steps"]),
    )


def read_code(package_dir: str | Path, p: ProgramSpec) -> bytes:
    """The code object of ``p``, checked against the manifest's sha256 (a stale, truncated or
    tampered binary is refused, naming it)."""
    code = Path(package_dir) / p.code
    try:
        binary = code.read_bytes()
    except OSError:
        raise PackageError(f"{code}: missing or unreadable (named by {p.name} in the manifest)") from None
    if hashlib.sha256(binary).hexdigest() != p.code_sha256:
        raise PackageError(f"{code}: not the code object the package was built with (its sha256 differs from the "
                           f"manifest's): rebuild the package")
    return binary


def read_manifest(package_dir: str | Path) -> Manifest:
    if Path(package_dir).is_file():
        raise PackageError(f"{package_dir}: a file, not a package directory (a package is what monobuild compile "
                           "writes; monobuild plan shows a recipe's programs)")
    path = Path(package_dir) / "manifest.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise PackageError(f"{path}: not found (is {package_dir} a package directory?)") from None
    except json.JSONDecodeError as e:
        raise PackageError(f"{path}: malformed JSON at line {e.lineno}: {e.msg}") from None
    except (OSError, UnicodeDecodeError, RecursionError) as e:
        raise PackageError(f"{path}: cannot read: {getattr(e, 'strerror', None) or type(e).__name__}") from None
    try:
        return manifest_from_json(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise PackageError(f"{path}: missing or malformed field {e}") from None
