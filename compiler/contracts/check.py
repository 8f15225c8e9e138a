"""Check a package (or a recipe, compiled through the cache first) against every contract.

Residency is recomputed from the code objects themselves (cuobjdump's resource report on a
cubin; the metadata in the AMDGCN text), not taken from the manifest, so a manifest that
misreports a program is caught too. The contracts are proved on the IR beside each binary, and
the binary is proved to be that IR's by building it again (I0).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ...manifest import Manifest, PackageError, ProgramSpec, read_code, read_manifest
from ..errors import CompileError, InputError
from ..resources import amd_resources, nvidia_resources
from ..targets import TARGETS, Target
from ..toolchain import amdgcn_from_llir, assemble
from .plan_rules import plan_violations
from .violations import Violation


@dataclass(frozen=True)
class PackageReport:
    package: str
    recipe: str
    target: str
    programs: int
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict:
        return {"package": self.package, "recipe": self.recipe, "target": self.target, "programs": self.programs,
                "ok": self.ok, "violations": [v.to_json() for v in self.violations]}


def _ir_text(package: Path, p: ProgramSpec, kind: str) -> str:
    rel = dict(p.ir).get(kind)
    if rel is None:
        raise InputError(str(package / "manifest.json"), f"programs[{p.name}].ir.{kind}", "missing")
    try:
        return (package / rel).read_text()
    except FileNotFoundError:
        raise InputError(str(package / rel), None, f"missing (the {kind} of {p.name})") from None


def _ctas_per_unit(package: Path, manifest: Manifest, p: ProgramSpec, binary: bytes) -> int:
    target = TARGETS[manifest.target]
    if target.is_nvidia:
        return nvidia_resources(binary, p.shared_bytes, p.block, target).ctas_per_unit
    return amd_resources(_ir_text(package, p, "amdgcn"), p.shared_bytes, p.block, target).ctas_per_unit


def _not_built_from_its_ir(package: Path, p: ProgramSpec, binary: bytes, target: Target) -> str | None:
    """Why the shipped binary is not what the IR beside it builds to, or None: the last steps of
    the compile run again (sm_90: the PTX the contracts read, through ptxas; gfx9: the LLVM IR
    they read, to AMDGCN — which must be the AMDGCN shipped, whose metadata C3 reads — and that
    assembled and linked) and must give the binary byte for byte."""
    try:
        if target.is_nvidia:
            rebuilt = assemble(_ir_text(package, p, "ptx"), target)
            source = "its PTX"
        else:
            amdgcn = amdgcn_from_llir(_ir_text(package, p, "llir"), target)
            if amdgcn != _ir_text(package, p, "amdgcn"):
                return "its AMDGCN is not what its LLVM IR translates to"
            rebuilt = assemble(amdgcn, target)
            source = "its AMDGCN"
    except CompileError as e:
        return f"its IR does not build ({e}), so the binary cannot be the checked IR's"
    if rebuilt != binary:
        return f"the binary is not what {source} assembles to: it was built from other code than the IR checked here"
    return None


def check_program(package: Path, manifest: Manifest, p: ProgramSpec) -> list[Violation]:
    try:  # I0: every other check reads this binary or the IR it was built with
        binary = read_code(package, p)
    except PackageError as e:
        return [Violation(p.name, "code", "I0", str(e))]
    why = _not_built_from_its_ir(package, p, binary, TARGETS[manifest.target])
    if why:
        return [Violation(p.name, "code", "I0", why)]
    found = plan_violations(manifest, p, _ctas_per_unit(package, manifest, p, binary))
    if TARGETS[manifest.target].is_nvidia:
        from .nvidia import check_ptx
        from .ptx import parse_ptx

        found += check_ptx(p, parse_ptx(_ir_text(package, p, "ptx")))
    else:
        from .amd import LlvmFunction, check_llir

        found += check_llir(p, LlvmFunction(_ir_text(package, p, "llir")))
    return found


def check_package(package: str | Path, progress: Callable[[int, int, str], None] | None = None,
                  jobs: int = 1) -> PackageReport:
    package = Path(package)
    manifest = read_manifest(package)
    if manifest.target not in TARGETS:
        raise InputError(str(package / "manifest.json"), "target", f"unknown target {manifest.target!r}")
    found: list[Violation] = []
    # threads: most of a program's check is ptxas and cuobjdump, processes of their own
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = [pool.submit(check_program, package, manifest, p) for p in manifest.programs]
        for n, (p, result) in enumerate(zip(manifest.programs, results), 1):
            found += result.result()
            if progress:
                progress(n, len(manifest.programs), p.name)
    return PackageReport(str(package), manifest.recipe, manifest.target, len(manifest.programs), tuple(found))
