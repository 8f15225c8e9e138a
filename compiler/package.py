"""Writing a package: ``DIR/<recipe>/<target>/manifest.json`` plus code objects and their IR.

The manifest is the named ABI the runtime launches from (every program's arguments, grid,
block, shared memory, launch flags), the layer → program map (each step's ordered launches)
and the bytes each stage must move. Keys are sorted and nothing depends on time or place, so
the same inputs give a byte-identical package. The package is assembled in a temporary
directory beside its destination and renamed into place: a failed compile leaves nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from ..manifest import MANIFEST_FORMAT
from .plan import Plan, ProgramPlan
from .schedule import schedule_to_json
from .toolchain import CodeObject


def planned_record(p: ProgramPlan) -> dict:
    """The part of a program's manifest record the plan alone decides (``check`` plans the
    package again and compares this): its ABI, grid, launch, stages, regions, edges, constants."""
    return {
        "name": p.name, "kind": p.kind, "mode": p.mode, "band": asdict(p.band),
        "args": [asdict(a) for a in p.args], "grid": p.grid,
        "launch": {"pdl": p.launch_pdl, "cooperative": p.launch_cooperative,
                   "pdl_wait": any(op.after_previous_launch for op in p.ops) and p.launch_pdl},
        "stages": [asdict(s) for s in p.stages], "regions": [asdict(r) for r in p.regions],
        "syncs": [asdict(s) for s in p.syncs], "counters": p.counters, "hang_slots": p.hang_slots,
        "clock_slots": p.clock_slots, "params": dict(p.params), "executor": p.executor, "scalars": dict(p.scalars),
        "cross_rank": [asdict(c) for c in p.cross_rank],
    }


def steps_record(plan: Plan) -> list[dict]:
    """Each step's ordered launches, as the manifest records them."""
    return [{"band": {"rows": s.band.rows, "tokens": s.band.tokens}, "mode": s.mode,
             "launches": [{"program": x.program, "layer": x.layer} for x in s.launches]} for s in plan.steps]


def _program_json(p: ProgramPlan, code: CodeObject, key: str, suffix: str) -> dict:
    return {
        **planned_record(p),
        "symbol": code.symbol, "code": f"code/{p.name}.{suffix}", "code_sha256": hashlib.sha256(code.binary).hexdigest(),
        "ir": {kind: f"ir/{p.name}.{kind}" for kind, _ in code.ir}, "block": code.resources.threads,
        "shared_bytes": code.shared_bytes, "resources": asdict(code.resources), "fingerprint": code.fingerprint,
        "cache_key": key, "tensor_maps": [asdict(t) for t in code.tensor_maps],
    }


def write_package(out_dir: Path, plan: Plan, codes: dict[str, CodeObject],
                  keys: dict[str, str]) -> Path:
    """Write the package for ``plan`` under ``out_dir``; return its directory."""
    recipe = plan.recipe
    target = recipe.deployment.target
    dest = Path(out_dir) / recipe.name / target.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=dest.parent))
    try:
        (tmp / "code").mkdir()
        (tmp / "ir").mkdir()
        entries = []
        for p in plan.programs:
            code = codes[p.name]
            (tmp / "code" / f"{p.name}.{target.code_suffix}").write_bytes(code.binary)
            for kind, text in code.ir:
                (tmp / "ir" / f"{p.name}.{kind}").write_text(text)
            entries.append(_program_json(p, code, keys[p.name], target.code_suffix))
        manifest = {
            "format": MANIFEST_FORMAT, "recipe": recipe.name, "target": target.name,
            "sm_count": recipe.deployment.sm_count, "geometry": recipe.geometry.to_json(),
            "deployment": recipe.deployment.package_record().to_json(), "toolchain": dict(_toolchain()),
            "schedule": schedule_to_json(plan.schedule), "programs": entries,
            "steps": steps_record(plan),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=dest.parent))
            os.rename(dest, old / "pkg")
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _toolchain():
    from .cache import toolchain_versions

    return toolchain_versions()
