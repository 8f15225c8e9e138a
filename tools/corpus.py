"""The corpus of published configs through `compile` and `check`, as a user runs them: a summary table.

For each config of ``tests/data/configs/`` (or ``--models``) and each target, a recipe with the
shipped recipes' deployment (bands 1, 2, 4, 8, a 1 × 6 verify band, 32768 tokens of context, both
modes, the target's SM/CU count) is written, compiled with ``monobuild compile`` and checked with
``monobuild check``, each a process of its own. A compile the programs refuse (exit 2, a feature
not served yet) is a row with its reason; a failed compile or a contract that does not hold
fails the run (exit 1). CI runs one config a day on every target (``sample_of_the_day``;
``--sample`` runs the same one)::

    python tools/corpus.py [--models qwen3-4b,llama-3.2-3b] [--targets sm_90,gfx942,gfx950] [--sample]
        [--jobs 2] [--out DIR] [--cold]

``--cold`` gives each compile an empty cache of its own, so its time is a cold compile's (without
it the compiles share one cache, and a model's later targets and models of the same shapes hit it).
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "tests" / "data" / "configs"
UNITS = {"sm_90": 132, "gfx942": 304, "gfx950": 256}  # H200 SMs, MI300X and MI355X CUs


@dataclass(frozen=True)
class Row:
    model: str
    target: str
    outcome: str  # "holds", "refused", "compile failed", "check failed"
    compile_s: float
    detail: str  # the refusal's or failure's last line, or the derived schedules


def sample_of_the_day(models: list[str], day: datetime.date) -> str:
    """The config CI compiles today: the corpus in turn, one a day."""
    return models[day.toordinal() % len(models)]


def _monobuild(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "monobuild", *args], capture_output=True, text=True)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_one(config: Path, target: str, out: Path, jobs: int, cold: bool = False) -> Row:
    name = f"{config.stem}-{target}"
    recipe = out / f"{name}.yaml"
    recipe.write_text(yaml.safe_dump({
        "config": str(config), "target": target, "sm_count": UNITS[target], "dtype": "bf16",
        "kv_cache": {"dtype": "bf16", "block_size": 16}, "bands": [1, 2, 4, 8], "verify": {"rows": 1, "tokens": 6},
        "max_context": 32768, "head": "ids", "modes": ["persistent", "staged"]}))
    start = time.perf_counter()
    cache = ("--cache", str(out / "caches" / name)) if cold else ()
    built = _monobuild("compile", str(recipe), "--out", str(out / "packages"), "--jobs", str(jobs), *cache)
    seconds = time.perf_counter() - start
    if built.returncode == 2:
        return Row(config.stem, target, "refused", seconds, _last_line(built.stderr))
    if built.returncode != 0:
        return Row(config.stem, target, "compile failed", seconds, _last_line(built.stderr or built.stdout))
    derived = "; ".join(line.strip() for line in built.stdout.splitlines() if "derived" in line)
    checked = _monobuild("check", str(out / "packages" / name / target), *cache)
    if checked.returncode != 0:
        return Row(config.stem, target, "check failed", seconds, _last_line(checked.stdout or checked.stderr))
    return Row(config.stem, target, "holds", seconds, derived)


def table(rows: list[Row]) -> str:
    lines = ["| model | target | compile | check | notes |", "| --- | --- | ---: | --- | --- |"]
    lines += [f"| {r.model} | {r.target} | {r.compile_s:.1f} s | {r.outcome} | {r.detail} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", help="comma-separated config names (default: the whole corpus)")
    ap.add_argument("--targets", default=",".join(UNITS))
    ap.add_argument("--sample", action="store_true", help="only today's config of the corpus (what CI runs)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, help="where recipes and packages go (default: a temporary directory)")
    ap.add_argument("--cold", action="store_true", help="an empty cache for each compile: cold compile times")
    args = ap.parse_args(argv)
    models = args.models.split(",") if args.models else sorted(c.stem for c in CONFIGS.glob("*.json"))
    if args.sample:
        models = [sample_of_the_day(models, datetime.date.today())]
    targets = args.targets.split(",")
    unknown = [m for m in models if not (CONFIGS / f"{m}.json").is_file()] + [t for t in targets if t not in UNITS]
    if unknown:
        print(f"corpus.py: not a corpus config or target: {', '.join(unknown)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        rows = []
        for model in models:
            for target in targets:
                rows.append(run_one(CONFIGS / f"{model}.json", target, out, args.jobs, args.cold))
                print(f"{model} {target}: {rows[-1].outcome} ({rows[-1].compile_s:.1f} s)", file=sys.stderr, flush=True)
    print(table(rows))
    return 1 if any(r.outcome in ("compile failed", "check failed") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
