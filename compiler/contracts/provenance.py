"""P0: the manifest's plan is the planner's, for the geometry, deployment and schedule table the
manifest itself records.

The other contracts take the manifest's plan records as the specification the code is held to:
C1–C5 read its stages, regions and edges, the IR contracts its argument roles. Nothing there
would notice a record that no planner wrote: two arguments' names swapped (the runtime binds
by name, so the layer's weights reach the wrong parameters), a step that skips a layer or runs
one twice, a launch flag or a constant changed. So ``check`` plans the package again with the
compiler's own planner and requires every plan-derived field of every program record, and
every step's launches, to be what it makes, and each record's cache key to be the key of the
program this compiler emits for it (so a package of another build of the compiler is compiled
again, not vouched for); the fields the code objects decide (symbol, block, shared memory,
resources, tensor maps) are C3's and I0's.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...manifest import Manifest
from ..cache import cache_key
from ..emit import emit, emitter_digest
from ..errors import InputError
from ..package import planned_record, steps_record
from ..plan import plan_recipe
from ..recipe import Deployment, Recipe
from ..schedule import schedule_from_json
from ..targets import TARGETS
from .violations import Violation


def _recipe(manifest: Manifest, src: str) -> Recipe:
    d = manifest.deployment
    deployment = Deployment(TARGETS[manifest.target], manifest.sm_count, d.dtypes.weights, d.kv_cache, d.bands,
                            d.max_context, d.head, d.modes, d.lifetime_steps, d.debug_wait_spins, d.stage_clock,
                            d.quant, d.draft_probs, d.tensor_parallel)
    return Recipe(manifest.recipe, src, src, manifest.geometry, deployment)


def _first_difference(recorded, planned, path: str = "") -> str | None:
    """Where two JSON values first differ (``args[3].name: 'w_o' where the planner has 'w_qkv'``)."""
    if isinstance(recorded, dict) and isinstance(planned, dict):
        for key in sorted(set(recorded) | set(planned)):
            if key not in recorded or key not in planned:
                return f"{path}{key}: {'missing' if key not in recorded else 'not the planner’s'}"
            found = _first_difference(recorded[key], planned[key], f"{path}{key}.")
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(planned, list):
        for k, (a, b) in enumerate(zip(recorded, planned)):
            found = _first_difference(a, b, f"{path.rstrip('.')}[{k}].")
            if found:
                return found
        if len(recorded) != len(planned):
            return f"{path.rstrip('.')}: {len(recorded)} entries where the planner has {len(planned)}"
        return None
    if recorded != planned or type(recorded) is not type(planned):
        return f"{path.rstrip('.')}: {recorded!r} where the planner has {planned!r}"
    return None


def provenance_violations(package: Path, manifest: Manifest) -> list[Violation]:
    src = str(package / "manifest.json")
    doc = json.loads((package / "manifest.json").read_text())
    try:
        recipe = _recipe(manifest, src)
        plan = plan_recipe(recipe, schedule_from_json(doc.get("schedule"), src))
    except (InputError, ValueError, KeyError, TypeError) as e:
        return [Violation("package", "manifest", "P0", f"the planner cannot plan the manifest's own geometry, "
                                                       f"deployment and schedule: {e}")]
    out: list[Violation] = []
    derived = _first_difference(manifest.deployment.to_json(), recipe.deployment.package_record().to_json())
    if derived:  # the roles' dtypes follow from the dtype and the quantization, as the compiler writes them
        out.append(Violation("package", "deployment", "P0", f"the record is not what its own fields make: {derived}"))
    programs = {p.name: p for p in plan.programs}
    target, digest = TARGETS[manifest.target], emitter_digest()
    planned = {p.name: json.loads(json.dumps(planned_record(p))) for p in plan.programs}
    recorded = {p["name"]: p for p in doc["programs"]}
    for name in sorted(set(recorded) - set(planned)):
        out.append(Violation(name, "manifest", "P0", "a program the planner does not make for this deployment"))
    for name, want in planned.items():
        if name not in recorded:
            out.append(Violation(name, "manifest", "P0", "the planner makes this program; the manifest lacks it"))
            continue
        found = _first_difference({k: recorded[name].get(k) for k in want}, want)
        if found:
            out.append(Violation(name, "manifest", "P0", f"the record is not the planner's: {found}"))
        elif recorded[name].get("cache_key") != (key := cache_key(emit(programs[name]), target, digest)):
            out.append(Violation(name, "manifest", "P0", f"cache_key {str(recorded[name].get('cache_key'))[:16]}… is "
                                                         f"not the key of the program this compiler emits for it "
                                                         f"({key[:16]}…): the package was built by another build of "
                                                         "monobuild, or the key was edited; compile it again"))
    steps = json.loads(json.dumps(steps_record(plan)))
    for k, step in enumerate(doc["steps"]):
        want = next((s for s in steps if s["band"] == step.get("band") and s["mode"] == step.get("mode")), None)
        where = f"steps[{k}] ({_band(step)} {step.get('mode')})"
        if want is None:
            out.append(Violation("package", where, "P0", "a step the planner does not make for this deployment"))
            continue
        found = _launch_difference(step["launches"], want["launches"])
        if found:
            program, why = found
            out.append(Violation(program, where, "P0", f"the step's launches are not the planner's: {why}"))
    for want in steps:
        if not any(s.get("band") == want["band"] and s.get("mode") == want["mode"] for s in doc["steps"]):
            out.append(Violation("package", f"steps ({_band(want)} {want['mode']})", "P0",
                                 "the planner makes this step; the manifest lacks it"))
    return out


def _band(step: dict) -> str:
    band = step.get("band") or {}
    return f"r{band.get('rows')}t{band.get('tokens')}"


def _launch(x: dict) -> str:
    return x["program"] + (f" (layer {x['layer']})" if x.get("layer") is not None else "")


def _launch_difference(recorded: list, planned: list) -> tuple[str, str] | None:
    """(the program concerned, how) where a step's launches first part from the planner's."""
    for k, (a, b) in enumerate(zip(recorded, planned)):
        if a != b:
            return b["program"], f"launch {k} is {_launch(a)} where the planner launches {_launch(b)}"
    if len(recorded) != len(planned):
        longer = planned if len(planned) > len(recorded) else recorded
        return longer[min(len(recorded), len(planned))]["program"], \
            f"{len(recorded)} launches where the planner has {len(planned)}"
    return None
