"""The ``monobuild`` command: compile, plan, inspect, check, bench, tune.

Bad input (a missing or malformed file, an unknown family, an unserved deployment) prints one
line naming the file and field and exits 2, before anything is written.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import time
from pathlib import Path

import click

from ..compiler.errors import CompileError, InputError, Refusal
from ..manifest import PackageError

EXIT_BAD_INPUT = 2


def _one_line_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (InputError, Refusal, PackageError) as e:
            click.echo(f"monobuild: error: {e}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except CompileError as e:
            click.echo(f"monobuild: compile failed: {e}", err=True)
            sys.exit(1)

    return wrapper


@click.group()
@click.version_option(package_name="monobuild")
def main():
    """Ahead-of-time compiler of per-layer persistent decode kernels."""


@main.command()
@click.argument("recipes", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Package root directory.")
@click.option("--target", type=click.Choice(["sm_90", "gfx942", "gfx950"]),
              help="Compile for this target instead (with --sm-count: its device's SMs or CUs).")
@click.option("--sm-count", type=click.IntRange(1, 1024), help="SMs (NVIDIA) or CUs (AMD) of the device to plan for.")
@click.option("--jobs", "-j", default=1, show_default=True, type=click.IntRange(1, 256),
              help="Parallel compile processes.")
@click.option("--cache", "cache_dir", type=click.Path(path_type=Path),
              help="Code-object cache (default: $MONOBUILD_CACHE_DIR or ~/.cache/monobuild).")
@click.option("--debug-wait-spins", type=click.IntRange(1),
              help="Debug build (recipe name + '-debug'): each wait gives up after N polls and the runtime "
                   "raises WaitTimeout naming the CTA, counter and epoch, instead of hanging the GPU.")
@click.option("--stage-clock", is_flag=True,
              help="Profiling build (recipe name + '-clock'): every CTA records its SM and the global timer at "
                   "each stage's start and end; tools/stage_clock.py reads them (sm_90).")
@click.option("--schedule", "schedule_path", type=click.Path(path_type=Path),
              help="Use this schedule table instead of the shipped schedules/<target>.yaml (e.g. one "
                   "`monobuild tune --out` wrote, or an ablation).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON (one object a package).")
@click.option("--quiet", "-q", "verbosity", flag_value=0, help="No progress on stderr.")
@click.option("--verbose", "-v", "verbosity", flag_value=2, help="A line on stderr for each program compiled.")
@_one_line_errors
def compile(recipes, out_dir, target, sm_count, jobs, cache_dir, debug_wait_spins, stage_clock,  # noqa: A001 (the name)
            schedule_path, as_json, verbosity):
    """Compile RECIPES into packages under OUT/<recipe>/<target>/.

    Progress goes to stderr: a bar on a terminal, otherwise a line every few seconds (--verbose:
    one a program, --quiet: none)."""
    from ..compiler.build import build, retarget, with_debug_waits, with_stage_clock
    from ..compiler.env import default_cache_dir
    from ..compiler.recipe import load_recipe
    from ..compiler.schedule import read_schedule

    signal.signal(signal.SIGTERM, _terminated)
    # validate all before writing
    loaded = [with_stage_clock(with_debug_waits(retarget(load_recipe(path), target, sm_count), debug_wait_spins),
                               stage_clock) for path in recipes]
    schedule = read_schedule(schedule_path) if schedule_path else None
    cache_dir = cache_dir or default_cache_dir()
    results = []
    for recipe in loaded:
        with _progress(f"{recipe.name} → {recipe.deployment.target.name}", 1 if verbosity is None else verbosity) \
                as report:
            result = build(recipe, out_dir, cache_dir, jobs, progress=report, schedule=schedule)
        results.append({"package": str(result.package), "recipe": recipe.name,
                        "target": recipe.deployment.target.name, "programs": result.programs,
                        "code_objects": result.code_objects, "compiled": result.compiled, "cached": result.cached,
                        "derived": list(result.derived)})
        if not as_json:
            click.echo(f"{result.package}: {result.programs} programs in {result.code_objects} code objects "
                       f"({result.compiled} compiled, {result.cached} from cache)")
            for note in result.derived:
                click.echo(f"  schedule {note}")
    if as_json:
        click.echo(json.dumps(results, indent=1))


def _terminated(signum, _frame):
    """SIGTERM ends a compile as an interrupt does: its temporary directories are removed (the
    workers end by themselves, compiler/build.py) and nothing half-written is left."""
    raise SystemExit(128 + signum)


class _progress:
    """Progress on stderr for the compiles (or checks) of one recipe (silent when all are cached):
    a bar on a terminal; elsewhere (CI logs, pipes) a line every ``EVERY_S`` seconds and one at
    the end, or with verbosity 2 a line a program (``compile``; ``check``'s report is its
    output, so it shows progress on a terminal only); verbosity 0: nothing."""

    EVERY_S = 5.0

    def __init__(self, label: str, verbosity: int = 1, verb: str = "compiled", off_terminal: bool = True):
        self.label, self.verbosity, self.verb, self.bar, self.last = label, verbosity, verb, None, None
        self.off_terminal = off_terminal  # whether to print lines where stderr is not a terminal

    def __enter__(self):
        return self.report

    def report(self, done: int, total: int, name: str) -> None:
        terminal = sys.stderr.isatty()
        if self.verbosity == 0 or not terminal and not self.off_terminal:
            return
        if terminal and self.verbosity == 1:
            if self.bar is None:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=self.label, unit="program", file=sys.stderr, leave=False)
            self.bar.set_postfix_str(name, refresh=False)
            self.bar.update(1)
            return
        now = time.monotonic()
        if self.last is None:
            self.last = now
        if self.verbosity == 2 or done == total or now - self.last >= self.EVERY_S:
            self.last = now
            click.echo(f"monobuild: {self.label}: {done} of {total} {self.verb}, last {name}", err=True)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()


@main.command()
@click.argument("recipe", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--bandwidth", default=4.15e12, show_default=True, type=float,
              help="Memory bandwidth (bytes/s) for the roofline estimate.")
@click.option("--context", default=1024, show_default=True, type=click.IntRange(1),
              help="Tokens of context per row for the roofline estimate.")
@click.option("--schedule", "schedule_path", type=click.Path(path_type=Path),
              help="Plan with this schedule table instead of the shipped schedules/<target>.yaml (as compile "
                   "--schedule does).")
@_one_line_errors
def plan(recipe, as_json, bandwidth, context, schedule_path):
    """Show RECIPE's programs: stages, tasks, regions, syncs, bytes and roofline."""
    from ..compiler.plan import plan_recipe
    from ..compiler.recipe import load_recipe
    from ..compiler.schedule import read_schedule
    from .report import plan_json, plan_text

    loaded = load_recipe(recipe)
    p = plan_recipe(loaded, read_schedule(schedule_path) if schedule_path else None)
    if as_json:
        click.echo(json.dumps(plan_json(p, bandwidth, context), indent=1))
    else:
        click.echo(plan_text(p, bandwidth, context))


@main.command()
@click.argument("package", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_one_line_errors
def inspect(package, as_json):
    """List PACKAGE's programs: resources, occupancy and fingerprints."""
    from ..manifest import read_manifest
    from .report import inspect_json, inspect_text

    manifest = read_manifest(package)
    click.echo(json.dumps(inspect_json(manifest), indent=1) if as_json else inspect_text(manifest))


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--jobs", "-j", default=1, show_default=True, type=click.IntRange(1, 256),
              help="Parallel compile processes (for recipes), and programs checked at once.")
@click.option("--cache", "cache_dir", type=click.Path(path_type=Path),
              help="Code-object cache for recipes (default: $MONOBUILD_CACHE_DIR or ~/.cache/monobuild).")
@_one_line_errors
def check(paths, as_json, jobs, cache_dir):
    """Verify the memory-model contracts of PATHS (packages, or recipes compiled first), on CPU.

    Exit 0 when every contract holds, 1 when one is violated (one line each: program, place,
    contract, why), 2 for bad input.
    """
    import tempfile

    from ..compiler.build import build
    from ..compiler.contracts.check import check_package
    from ..compiler.env import default_cache_dir
    from ..compiler.recipe import load_recipe

    recipes = {path: load_recipe(path) for path in paths if not path.is_dir()}  # validate all first
    reports = []
    with tempfile.TemporaryDirectory(prefix="monobuild-check-") as tmp:
        for path in paths:
            if path in recipes:
                recipe = recipes[path]
                with _progress(f"{recipe.name} → {recipe.deployment.target.name}", off_terminal=False) as report:
                    package = build(recipe, Path(tmp), cache_dir or default_cache_dir(), jobs, progress=report).package
            else:
                package = path
            with _progress(f"check {package}", verb="checked", off_terminal=False) as report:
                reports.append(check_package(package, progress=report, jobs=jobs))
    if as_json:
        click.echo(json.dumps([r.to_json() for r in reports], indent=1))
    else:
        for r in reports:
            for v in r.violations:
                click.echo(v.line())
            verdict = "every contract holds" if r.ok else f"{len(r.violations)} violation(s)"
            click.echo(f"{r.recipe} ({r.target}): {r.programs} programs checked, {verdict}")
    sys.exit(0 if all(r.ok for r in reports) else 1)


def _int_list(ctx, param, value: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers") from None
    if any(v < 1 for v in values):
        raise click.BadParameter(f"{value!r}: every context must be at least 1")
    return values


@main.command()
@click.argument("package", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--context", "contexts", default="1024", show_default=True, callback=_int_list,
              help="Tokens of context per row; a comma-separated list runs each.")
@click.option("--mode", "modes", multiple=True, type=click.Choice(["persistent", "staged"]),
              help="Program mode(s) to time (default: every mode in the package).")
@click.option("--band", "bands", multiple=True, help="Only these bands (e.g. r1t1, r8t1, r1t6).")
@click.option("--iters", default=200, show_default=True, type=click.IntRange(10), help="Timed replays per case.")
@click.option("--no-baseline", is_flag=True, help="Skip the torch.compile + CUDA graph baseline.")
@click.option("--no-pin-occupancy", is_flag=True,
              help="Ablation: launch persistent programs without pinning their CTAs per SM.")
@click.option("--no-pdl", is_flag=True, help="Ablation: launch without programmatic dependent launch.")
@click.option("--floor", is_flag=True,
              help="Also time the floors of each persistent step: its bytes through the same launches and sync "
                   "edges and nothing else, per layer and in one launch, each also with the copies running ahead of "
                   "the waits (compiled here: needs Triton).")
@_one_line_errors
def bench(package, as_json, contexts, modes, bands, iters, no_baseline, no_pin_occupancy, no_pdl, floor):
    """Time PACKAGE's decode step on this GPU against the roofline and a PyTorch baseline."""
    from ..bench.run import bench as run_bench
    from .report import bench_text

    def progress(line: str) -> None:
        click.echo(line, err=True)

    result = run_bench(package, contexts, modes or None, bands or None, iters, not no_baseline, progress,
                       pin_occupancy=not no_pin_occupancy, pdl=not no_pdl, floor=floor)
    click.echo(json.dumps(result.to_json(), indent=1) if as_json else bench_text(result))


@main.command()
@click.argument("recipe", type=click.Path(path_type=Path))
@click.option("--band", "bands", multiple=True, help="Only these bands (e.g. r1t1, r8t1, r1t6); default: all.")
@click.option("--context", default=1024, show_default=True, type=click.IntRange(1),
              help="Tokens of context per row while timing.")
@click.option("--iters", default=50, show_default=True, type=click.IntRange(10), help="Timed replays per candidate.")
@click.option("--out", "out_path", type=click.Path(path_type=Path),
              help="Schedule table to write (default: the shipped schedules/<target>.yaml).")
@click.option("--jobs", "-j", default=4, show_default=True, type=click.IntRange(1, 256),
              help="Parallel compile processes.")
@click.option("--cache", "cache_dir", type=click.Path(path_type=Path),
              help="Code-object cache (default: $MONOBUILD_CACHE_DIR or ~/.cache/monobuild).")
@_one_line_errors
def tune(recipe, bands, context, iters, out_path, jobs, cache_dir):
    """Measure schedule candidates for RECIPE's layer programs on this GPU; write the winners.

    Needs the GPU the recipe targets and the compiler (Triton) on the same machine. Writes entries
    matching (kind layer, hidden, rows, tokens) into the schedule table, so `monobuild compile`
    picks them up without tuning.
    """
    import torch

    from ..bench.tune import as_trial_rows, default_table, write_table
    from ..bench.tune import tune as run_tune
    from ..compiler.env import default_cache_dir
    from ..compiler.recipe import load_recipe
    from ..compiler.schedule import read_schedule

    loaded = load_recipe(recipe)
    target = loaded.deployment.target.name
    chosen = tuple(b for b in loaded.deployment.bands if not bands or b.name in bands)
    unknown = sorted(set(bands) - {b.name for b in loaded.deployment.bands})
    if unknown:
        raise InputError(str(recipe), "bands", f"no band {unknown[0]} (the recipe has "
                                               f"{', '.join(b.name for b in loaded.deployment.bands)})")
    if not torch.cuda.is_available():
        raise InputError(str(recipe), "target", f"tuning times candidates on a {target} GPU; none is visible")
    out_path = out_path or default_table(target)
    table = out_path if out_path.exists() else default_table(target)  # an --out table is extended
    result = run_tune(loaded, read_schedule(table), chosen, cache_dir or default_cache_dir(), jobs, context, iters,
                      lambda line: click.echo(line, err=True))
    write_table(table, out_path, loaded, result)
    click.echo("\n".join(as_trial_rows(result)))
    click.echo(f"wrote {len(result.winners)} entries to {out_path}")


if __name__ == "__main__":
    main()
