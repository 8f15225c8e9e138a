"""The compile pipeline, as one ordered list of named steps:

    load_recipe → plan_recipe → emit → (cache | compile_program) → write_package

``build`` runs it for one recipe and target; misses compile in parallel worker processes
(``jobs``), hits come straight from the content-addressed cache.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

from .cache import CodeCache, cache_key
from .emit import Program, emit, emitter_digest
from .errors import InputError, Refusal
from .package import write_package
from .plan import Plan, plan_recipe
from .recipe import Recipe
from .schedule import Schedule
from .targets import TARGETS, Target
from .toolchain import CodeObject, compile_program


@dataclass(frozen=True)
class BuildResult:
    package: Path
    programs: int
    compiled: int  # cache misses
    cached: int  # cache hits


def retarget(recipe: Recipe, target_name: str | None, sm_count: int | None = None) -> Recipe:
    """The recipe for another target or device size (``--target``, ``--sm-count``).

    The grids and attention splits are sized by the SM/CU count, and the runtime refuses a device
    of another count: another target needs its own count (an sm_90 recipe's 132 SMs are no
    gfx942 device's), so a target change without one is refused rather than guessed."""
    d = recipe.deployment
    target = TARGETS[target_name] if target_name else d.target
    if target != d.target and sm_count is None:
        raise InputError(recipe.source, "sm_count", f"{d.sm_count} is {d.target.name}'s; compiling for {target.name} "
                                                    "needs that device's SM/CU count: give --sm-count")
    if target == d.target and sm_count in (None, d.sm_count):
        return recipe
    return replace(recipe, deployment=replace(d, target=target, sm_count=sm_count or d.sm_count))


def with_debug_waits(recipe: Recipe, spins: int | None) -> Recipe:
    """The recipe's debug build (``--debug-wait-spins``): waits that give up and report."""
    if spins is None:
        return recipe
    return replace(recipe, name=f"{recipe.name}-debug", deployment=replace(recipe.deployment, debug_wait_spins=spins))


def with_stage_clock(recipe: Recipe, on: bool) -> Recipe:
    """The recipe's profiling build (``--stage-clock``): every CTA clocks its stages."""
    if not on:
        return recipe
    return replace(recipe, name=f"{recipe.name}-clock", deployment=replace(recipe.deployment, stage_clock=True))


def _compile_one(args: tuple[Program, Target]) -> CodeObject:
    program, target = args
    return compile_program(program, target)


def _refuse_unservable(recipe: Recipe, plan: Plan, codes: dict[str, CodeObject]) -> None:
    """Refuse, before a package is written, a persistent program the compiled code cannot serve:
    a grid it cannot hold co-resident would fail its cooperative launch (or, without it,
    deadlock); state kept in local memory even with every register (the compile's second try)
    breaks contract C3, which ``monobuild check`` would report only later, and which ``monobuild
    tune`` must not write into a table. A profiling build is exempt from the second rule: its
    clock stores may need a stack frame, and it is never served."""
    d = recipe.deployment
    for p in plan.programs:
        if not p.launch_cooperative:
            continue
        r = codes[p.name].resources
        fits = r.ctas_per_unit * d.sm_count
        if p.grid > fits:
            raise Refusal(recipe.source, f"{p.name}: the schedule asks for {p.grid} co-resident CTAs "
                                         f"({p.schedule.ctas_per_sm} per SM/CU) but the compiled program fits {fits} "
                                         f"({r.registers} registers, {r.shared_bytes} B shared memory); lower "
                                         f"ctas_per_sm or block_k in schedules/{d.target.name}.yaml")
        if (r.stack_bytes or r.spill_bytes) and not d.stage_clock:
            raise Refusal(recipe.source, f"{p.name}: the compiled persistent program keeps {r.stack_bytes} B a thread "
                                         f"in local memory at {r.registers} registers (a persistent program must "
                                         f"not: contract C3); lower block_n, kv_tile, norm_rows or a pipeline depth "
                                         f"(weight_stages, kv_stages, long_kv_stages) for this band "
                                         f"in schedules/{d.target.name}.yaml")


def build(recipe: Recipe, out_dir: Path, cache_dir: Path, jobs: int = 1,
          progress: Callable[[int, int, str], None] | None = None, schedule: Schedule | None = None) -> BuildResult:
    """Compile ``recipe`` into ``out_dir``; ``schedule`` replaces the target's shipped table (tuning)."""
    target = recipe.deployment.target
    if recipe.deployment.stage_clock and not target.is_nvidia:
        raise Refusal(recipe.source, f"stage_clock: profiling builds read the global timer with PTX (sm_90 only), "
                                     f"not {target.name}")
    plan: Plan = plan_recipe(recipe, schedule)
    digest = emitter_digest()
    cache = CodeCache(cache_dir)
    programs = {p.name: emit(p) for p in plan.programs}
    keys = {name: cache_key(prog, target, digest) for name, prog in programs.items()}
    codes: dict[str, CodeObject] = {}
    misses: dict[str, list[str]] = {}  # key → program names (identical programs compile once)
    for name, key in keys.items():
        hit = cache.get(key, name)
        if hit is not None:
            codes[name] = hit
        else:
            misses.setdefault(key, []).append(name)
    total, done = len(misses), 0

    def finish(key: str, code: CodeObject) -> None:
        nonlocal done
        cache.put(key, code)
        for name in misses[key]:
            codes[name] = replace(code, program=name)
        done += 1
        if progress:
            progress(done, total, misses[key][0])

    work = [(key, (programs[names[0]], target)) for key, names in misses.items()]
    if jobs <= 1 or len(work) <= 1:
        for key, item in work:
            finish(key, _compile_one(item))
    else:
        context = multiprocessing.get_context("spawn" if sys.platform == "darwin" else "forkserver")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = {pool.submit(_compile_one, item): key for key, item in work}
            for future in as_completed(futures):
                finish(futures[future], future.result())
    _refuse_unservable(recipe, plan, codes)
    package = write_package(out_dir, plan, programs, codes, keys)
    return BuildResult(package, len(programs), len(work), len(programs) - sum(len(v) for v in misses.values()))
