"""Check a package (or a recipe, compiled through the cache first) against every contract.

Residency is recomputed from the code objects themselves (cuobjdump's resource report on a
cubin; the metadata in the AMDGCN text), not taken from the manifest, so a manifest that
misreports a program is caught too. The manifest's plan is proved to be the planner's (P0), the
contracts are proved on the IR beside each binary, and the binary is proved to be that IR's by
building it again (I0).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ...manifest import Manifest, PackageError, ProgramSpec, read_code, read_manifest
from ..errors import CompileError, InputError
from ..resources import Resources, amd_resources, nvidia_resources
from ..targets import TARGETS, Target
from ..toolchain import CHECKED_IR, code_from_ir
from .plan_rules import plan_violations
from .provenance import provenance_violations
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


def _code_resources(p: ProgramSpec, binary: bytes, amdgcn: str | None, target: Target) -> Resources:
    if target.is_nvidia:
        return nvidia_resources(binary, p.shared_bytes, p.block, target)
    return amd_resources(amdgcn, p.shared_bytes, p.block, target)


_PTX_THREADS = re.compile(r"^\s*\.(?:reqntid|maxntid)\s+(\d+)(?:\s*,\s*1){0,2}\s*$", re.M)
_AMD_THREADS = re.compile(r"^\s*\.max_flat_workgroup_size:\s+(\d+)", re.M)
_PTX_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(")
_AMD_NAME = re.compile(r"^\s*\.name:\s+([\w$.]+)\s*$", re.M)


def _launch_violations(p: ProgramSpec, checked: str, amdgcn: str | None, target: Target) -> list[Violation]:
    """C3: the launch the manifest describes is the one the code was compiled for: its kernel
    symbol is the code's, and its block the threads the code requires (sm_90's ``.reqntid``, which
    the driver enforces; gfx9's flat workgroup size, which nothing enforces: fewer threads would
    leave a slice of every tile uncomputed)."""
    symbols = _PTX_ENTRY.findall(checked) if target.is_nvidia else _AMD_NAME.findall(amdgcn or "")
    threads = (_PTX_THREADS if target.is_nvidia else _AMD_THREADS).findall(checked if target.is_nvidia else amdgcn)
    out = []
    if p.symbol not in symbols:
        out.append(Violation(p.name, "launch", "C3", f"symbol {p.symbol!r} is not the code's kernel "
                                                     f"({', '.join(symbols) or 'none found'})"))
    if [int(t) for t in threads] != [p.block]:
        out.append(Violation(p.name, "launch", "C3", f"block {p.block} is not the threads the code was compiled for "
                                                     f"({', '.join(threads) or 'not stated'})"))
    return out


def _not_built_from_its_ir(checked: str, amdgcn: str | None, binary: bytes, target: Target) -> str | None:
    """Why the shipped binary is not what the IR the contracts read (``checked``) builds to, or
    None: the compile's last steps run again (``code_from_ir``) and must give the binary byte for
    byte, and on gfx9 the shipped AMDGCN too (C3 reads its metadata)."""
    try:
        rebuilt, rebuilt_amdgcn = code_from_ir(checked, target)
    except CompileError as e:
        return f"its IR does not build ({e}), so the binary cannot be the checked IR's"
    if rebuilt_amdgcn is not None and rebuilt_amdgcn != amdgcn:
        return "its AMDGCN is not what its LLVM IR translates to"
    if rebuilt != binary:
        return "the binary is not what its IR builds to: it was built from other code than the IR checked here"
    return None


def check_program(package: Path, manifest: Manifest, p: ProgramSpec) -> list[Violation]:
    try:  # I0: every other check reads this binary or the IR it was built with
        binary = read_code(package, p)
    except PackageError as e:
        return [Violation(p.name, "code", "I0", str(e))]
    target = TARGETS[manifest.target]
    checked = _ir_text(package, p, CHECKED_IR[target.backend])
    amdgcn = None if target.is_nvidia else _ir_text(package, p, "amdgcn")
    llir = _ir_text(package, p, "llir") if target.is_nvidia else checked
    why = _not_built_from_its_ir(checked, amdgcn, binary, target)
    if why is None and hashlib.sha256(llir.encode()).hexdigest() != p.fingerprint:
        why = "the manifest's fingerprint is not the sha256 of the program's LLVM IR: the record or the IR was edited"
    if why:
        return [Violation(p.name, "code", "I0", why)]
    found = _launch_violations(p, checked, amdgcn, target)
    found += plan_violations(manifest, p, _code_resources(p, binary, amdgcn, target))
    if target.is_nvidia:
        from .nvidia import check_ptx
        from .ptx import parse_ptx

        found += check_ptx(p, parse_ptx(checked))
    else:
        from .amd import check_llir
        from .llir import LlvmFunction

        found += check_llir(p, LlvmFunction(checked))
    return found


def check_package(package: str | Path, progress: Callable[[int, int, str], None] | None = None,
                  jobs: int = 1) -> PackageReport:
    package = Path(package)
    manifest = read_manifest(package)
    if manifest.target not in TARGETS:
        raise InputError(str(package / "manifest.json"), "target", f"unknown target {manifest.target!r}")
    found: list[Violation] = provenance_violations(package, manifest)
    # threads: most of a program's check is ptxas and cuobjdump, processes of their own
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = [pool.submit(check_program, package, manifest, p) for p in manifest.programs]
        for n, (p, result) in enumerate(zip(manifest.programs, results), 1):
            found += result.result()
            if progress:
                progress(n, len(manifest.programs), p.name)
    return PackageReport(str(package), manifest.recipe, manifest.target, len(manifest.programs), tuple(found))
