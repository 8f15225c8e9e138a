"""The compile pipeline, as one ordered list of named steps:

    load_recipe → plan_recipe → emit → (cache | compile_program) → write_package

``build`` runs it for one recipe and target; misses compile in parallel worker processes
(``jobs``), hits come straight from the content-addressed cache.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

from ..schema import Band
from .cache import CodeCache, cache_key
from .emit import Program, emit, emitter_digest
from .errors import InputError, Refusal
from .fallback import LADDER, Derived, with_derived
from .package import write_package
from .plan import Plan, ProgramPlan, plan_recipe
from .recipe import Recipe
from .schedule import Schedule, load_schedule
from .targets import TARGETS, Target
from .toolchain import CodeObject, compile_program


@dataclass(frozen=True)
class BuildResult:
    package: Path
    programs: int
    code_objects: int  # distinct code objects in the package (programs alike share one)
    compiled: int  # code objects compiled: cache misses (of every plan tried)
    cached: int  # the package's code objects that came from the cache
    derived: tuple[str, ...] = ()  # schedules the compiler derived where the table's did not serve


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


def _worker_init(compile_pid: int) -> None:
    """A compile worker lives only as long as the compile that started it: Ctrl-C is the
    compile's to handle (not a traceback from every worker), and a thread that looks for the
    compile's process every fifth of a second ends the worker, and the assembler it may be
    running, once that process has ended, however it ended (an exception, SIGTERM, SIGKILL).
    Without it a killed compile's workers, whose task queue never closes, kept running and
    holding the terminal's output."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_end_with, args=(compile_pid,), daemon=True, name="end-with-compile").start()


def _end_with(compile_pid: int) -> None:
    while _alive(compile_pid):
        time.sleep(0.2)
    for child in _children(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)
    os._exit(1)


def _alive(pid: int) -> bool:
    """Whether the compile's process still runs (a pid another user's process took means it ended)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc; elsewhere none are known)."""
    out = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(entry.parent.name))
    return out


def _compile_one(args: tuple[Program, Target]) -> CodeObject:
    program, target = args
    return compile_program(program, target)


def _unservable(recipe: Recipe, plan: Plan, codes: dict[str, CodeObject]) -> list[tuple[ProgramPlan, str, str]]:
    """The persistent programs the compiled code cannot serve, each with what went wrong (short)
    and the refusal's whole reason: a grid it cannot hold co-resident would fail its cooperative
    launch (or, without it, deadlock); state kept in local memory even with every register (the
    compile's second try) breaks contract C3, which ``monobuild check`` would report only later,
    and which ``monobuild tune`` must not write into a table. A profiling build is exempt from the
    second rule: its clock stores may need a stack frame, and it is never served."""
    d = recipe.deployment
    out = []
    for p in plan.programs:
        if not p.launch_cooperative:
            continue
        r = codes[p.name].resources
        fits = r.ctas_per_unit * d.sm_count
        if p.grid > fits:
            out.append((p, f"fits {fits} of its {p.grid} co-resident CTAs",
                        f"{p.name}: the schedule asks for {p.grid} co-resident CTAs ({p.schedule.ctas_per_sm} per "
                        f"SM/CU) but the compiled program fits {fits} ({r.registers} registers, {r.shared_bytes} B "
                        f"shared memory)"))
        elif (r.stack_bytes or r.spill_bytes) and not d.stage_clock:
            out.append((p, f"keeps {r.stack_bytes} B a thread in local memory",
                        f"{p.name}: the compiled persistent program keeps {r.stack_bytes} B a thread in local memory "
                        f"at {r.registers} registers (a persistent program must not: contract C3)"))
    return out


def _refuse_unservable(recipe: Recipe, plan: Plan, codes: dict[str, CodeObject]) -> None:
    """Refuse the first unservable program (``_unservable``), with its reason."""
    bad = _unservable(recipe, plan, codes)
    if bad:
        raise Refusal(recipe.source, bad[0][2])


def build(recipe: Recipe, out_dir: Path, cache_dir: Path, jobs: int = 1,
          progress: Callable[[int, int, str], None] | None = None, schedule: Schedule | None = None,
          derive: bool = True) -> BuildResult:
    """Compile ``recipe`` into ``out_dir``; ``schedule`` replaces the target's shipped table (tuning).

    A persistent program the table's entry does not make servable gets a schedule the compiler
    derives (``fallback.py``), unless ``derive`` is off (``monobuild tune``: a refused candidate
    is a measurement, not something to replace)."""
    target = recipe.deployment.target
    if recipe.deployment.stage_clock and not target.is_nvidia:
        raise Refusal(recipe.source, f"stage_clock: profiling builds read the global timer with PTX (sm_90 only), "
                                     f"not {target.name}")
    table = schedule or load_schedule(target.name)
    digest = emitter_digest()
    cache = CodeCache(cache_dir)
    derived: dict[tuple[str, Band], Derived] = {}
    compiled = 0
    while True:
        plan = plan_recipe(recipe, with_derived(table, recipe.geometry.hidden, recipe.deployment.dtypes.projection,
                                                 tuple(derived.values())))
        programs, keys, codes, misses = _compile_plan(plan, target, cache, digest, jobs, progress)
        compiled += misses
        bad = _unservable(recipe, plan, codes)
        if not bad:
            break
        for p, what, reason in bad:  # one rung further for each program that is still unservable
            now = derived.get((p.kind, p.band))
            rung = now.rung if now else 0
            if not derive:
                raise Refusal(recipe.source, f"{reason}; lower block_n, kv_tile, norm_rows, a pipeline depth or "
                                             f"ctas_per_sm for {p.kind} {p.band.name}")
            if rung == len(LADDER):
                raise Refusal(recipe.source, f"{reason}, with the table's entry and every schedule the compiler "
                                             f"derives (compiler/fallback.py); write an entry for {p.kind} "
                                             f"{p.band.name} in schedules/{target.name}.yaml")
            derived[(p.kind, p.band)] = Derived(p.kind, p.band, rung + 1, now.why if now else what)
    package = write_package(out_dir, plan, codes, keys)
    distinct = len(set(keys.values()))
    return BuildResult(package, len(programs), distinct, compiled, distinct - misses,
                       tuple(d.describe() for d in derived.values()))


def _compile_plan(plan: Plan, target: Target, cache: CodeCache, digest: str, jobs: int,
                  progress: Callable[[int, int, str], None] | None):
    """Every program of ``plan``, from the cache or compiled (misses in ``jobs`` worker processes):
    (programs, cache keys, code objects, how many code objects were compiled)."""
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
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_init,
                                   initargs=(os.getpid(),))
        done_ok = False
        try:
            futures = {pool.submit(_compile_one, item): key for key, item in work}
            for future in as_completed(futures):
                finish(futures[future], future.result())
            done_ok = True
        finally:  # on an error or an interrupt, not waiting for the running compiles (their workers end with us)
            pool.shutdown(wait=done_ok, cancel_futures=True)
    return programs, keys, codes, len(misses)
