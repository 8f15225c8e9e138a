"""``monobuild tune``: measure schedule candidates for a recipe's layer programs on this GPU and
write the winners into the target's frozen schedule table, so an image build never tunes.

The search, per band: a one-pass coordinate descent from the entry the table gives today. Each key
of ``SEARCH`` in turn tries each of its values, the other keys held at the best found so far. A
candidate is compiled (the band's embed, persistent layer and head programs; the cache makes
repeats free), loaded by the runtime, bound to one set of random weights and one KV cache shared
by every candidate, and its whole decode step timed as CUDA-graph replays (median). A candidate
the compiler refuses (its grid cannot be co-resident, or it keeps a stack frame) is recorded with
the reason and tried once more a pipeline stage shallower. A value the planner turns into the
same programs as one already in the descent (norm_rows above the band's rows, block_k above the
hidden size) is not tried again.

Only the layer programs are tuned: by the planner's byte count they are ~79% (Llama-3.2-1B) to
~92% (Qwen3-8B) of a step's bytes, and the LM head already streams at ~4.0 TB/s of the H200's
4.27 TB/s copy bandwidth (docs/PERFORMANCE.md, stage times). A band's winner is written as an entry matching
(kind layer, hidden, rows, tokens) holding the keys that differ from the table's defaults.
"""

from __future__ import annotations

import datetime
import itertools
import statistics
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from ..compiler.build import build
from ..compiler.errors import Refusal
from ..compiler.plan import plan_recipe
from ..compiler.recipe import Band, Recipe
from ..compiler.schedule import Schedule

# The keys searched and the values each may take, in the order the descent visits them: the
# tile shape and the CTAs per SM first, since they decide what fits beside the pipeline depth
# (a first run that tried weight_stages 4 first could then not fit block_n 32 at all).
SEARCH: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("block_n", (16, 32)),
    ("ctas_per_sm", (1, 2)),
    ("weight_stages", (2, 3, 4)),
    ("block_k", (256, 512)),
    ("max_split_k", (1, 8)),
    ("max_split_qkv", (1, 8)),
    ("norm_stages", (0, 1)),  # before norm_rows, which only a band that stages x̂ per CTA uses
    ("norm_rows", (1, 2, 4, 8)),
)


@dataclass(frozen=True)
class Trial:
    band: str
    settings: tuple[tuple[str, int], ...]  # the searched keys' values
    median_ms: float | None  # None: refused
    refused: str | None = None


@dataclass(frozen=True)
class Winner:
    band: Band
    differs: tuple[tuple[str, int], ...]  # the winning keys whose values differ from the defaults
    measured: str  # where the number comes from: time (and the entry's before), device, context, date


@dataclass(frozen=True)
class TuneResult:
    recipe: str
    device: str
    context: int
    trials: tuple[Trial, ...]
    winners: tuple[Winner, ...]


def layer_kind(recipe: Recipe) -> str:
    """The layer programs a tune measures: a routed model's (``moe``), else the dense ones'."""
    return "moe" if recipe.geometry.experts is not None else "layer"


def _match(recipe: Recipe, band: Band) -> tuple[tuple[str, object], ...]:
    match = {"kind": layer_kind(recipe), "hidden": recipe.geometry.hidden, "rows": band.rows, "tokens": band.tokens}
    if recipe.deployment.quant is not None:  # an FP8 checkpoint's programs are tuned apart from bf16's
        match["weights"] = recipe.deployment.dtypes.projection
    return tuple(sorted(match.items()))


def _with_entry(schedule: Schedule, match, settings: dict[str, int]) -> Schedule:
    """The table with ``settings`` for ``match`` taking precedence over its own entries."""
    overrides = tuple(sorted(settings.items()))
    return Schedule(f"{schedule.source} (tuning)", schedule.defaults, ((match, overrides),) + schedule.entries)


class _Timer:
    """Times one band's decode step for compiled candidates; weights and cache are made once."""

    def __init__(self, context: int, iters: int):
        import torch

        self.context, self.iters = context, iters
        self.device = torch.cuda.get_device_name()
        self._weights = self._cache = self._case = None

    def __call__(self, package_dir: Path, band: Band, mode: str) -> float:
        from .. import runtime
        from .cases import blocks_needed, random_case, random_kv_cache, random_state_dict
        from .run import time_replays

        pkg = runtime.load(package_dir)
        if self._weights is None:
            self._weights = pkg.bind_weights(random_state_dict(pkg, seed=0))
        if self._case is None or self._case[0] != band:
            blocks = blocks_needed(pkg, band.rows, self.context)
            self._cache = random_kv_cache(pkg, blocks, seed=self.context)
            self._case = (band, random_case(pkg, [self.context] * band.rows, band.tokens, blocks, seed=1).inputs)
        step = pkg.bind(self._weights, self._cache, mode)
        i = self._case[1]
        args = (i.tokens, i.positions, i.block_tables, i.context_lens)
        return statistics.median(time_replays(lambda: step(*args, sampling=i.sampling), self.iters))


class _BandSearch:
    """One band's coordinate descent. The candidates of one key compile concurrently (each build
    in its own worker processes), then are timed one at a time on the GPU."""

    def __init__(self, recipe: Recipe, schedule: Schedule, band: Band, mode: str, scratch: Path, cache_dir: Path,
                 jobs: int, timer, progress: Callable[[str], None]):
        self.schedule, self.band, self.mode, self.scratch = schedule, band, mode, scratch
        self.sub = replace(recipe, name=f"{recipe.name}.tune.{band.name}",
                           deployment=replace(recipe.deployment, bands=(band,), modes=(mode,)))
        self.match = _match(recipe, band)
        self.start = schedule.entry(layer_kind(recipe), recipe.geometry.hidden, band.rows, band.tokens,
                                    weights=recipe.deployment.dtypes.projection)
        # What the band's entry sets by hand beyond the searched keys (long_kv_tile: chosen from
        # benches at long contexts, which a tune at one context cannot see): kept in every
        # candidate and in the entry written back.
        searched = {name for name, _ in SEARCH}
        self.kept = {k: v for k, v in self.start.__dict__.items()
                     if k not in searched and v != getattr(schedule.defaults, k)}
        self.cache_dir, self.jobs, self.timer, self.progress = cache_dir, jobs, timer, progress
        self.trials: list[Trial] = []
        self._measured: dict[tuple, float | None] = {}
        self._candidates = itertools.count()

    def run(self) -> tuple[dict[str, int], float | None]:
        best = {key: getattr(self.start, key) for key, _ in SEARCH}
        best_ms = self._measure([best])[0]
        for name, values in SEARCH:
            # One candidate per set of programs the values plan: a value the planner clamps (norm_rows
            # above the band's rows, block_k above the hidden size) is the same candidate again.
            seen = {self._programs(best)}
            candidates = []
            for v in values:
                planned = self._programs({**best, name: v})
                if planned not in seen:
                    seen.add(planned)
                    candidates.append({**best, name: v})
            times = self._measure(candidates)
            # A candidate refused for residency gets one more try a pipeline stage shallower: its
            # shared memory, not its tile, may be what did not fit (seen: Qwen3-8B at 8 rows never
            # tried block_n 32, because 4 weight stages of it did not fit 2 CTAs per SM).
            retries = [{**c, "weight_stages": c["weight_stages"] - 1} for c, ms in zip(candidates, times)
                       if ms is None and c["weight_stages"] > 2]
            for settings, ms in zip(candidates + retries, times + self._measure(retries)):
                if ms is not None and (best_ms is None or ms < best_ms):
                    best, best_ms = settings, ms
        return best, best_ms

    def _programs(self, settings: dict[str, int]) -> tuple:
        """What a candidate compiles to: its plan's programs (name, constants, grid, warps)."""
        plan = plan_recipe(self.sub, self._table(settings))
        return tuple((p.name, p.params, p.grid, p.num_warps) for p in plan.programs)

    def _table(self, settings: dict[str, int]) -> Schedule:
        return _with_entry(self.schedule, self.match, {**self.kept, **settings})

    def _measure(self, candidates: list[dict[str, int]]) -> list[float | None]:
        keys = [tuple(sorted(c.items())) for c in candidates]
        new = [k for k in dict.fromkeys(keys) if k not in self._measured]
        with ThreadPoolExecutor(max_workers=max(1, len(new))) as pool:
            built = list(pool.map(self._build, new))
        for key, package in zip(new, built):
            if isinstance(package, Refusal):
                self._measured[key] = None
                self.trials.append(Trial(self.band.name, key, None, package.reason))
                self.progress(f"{self.band.name} {_describe(key)}: refused ({package.reason})")
            else:
                ms = self._measured[key] = self.timer(package, self.band, self.mode)
                self.trials.append(Trial(self.band.name, key, ms))
                self.progress(f"{self.band.name} {_describe(key)}: {ms:.3f} ms")
        return [self._measured[k] for k in keys]

    def _build(self, key: tuple[tuple[str, int], ...]) -> Path | Refusal:
        out = self.scratch / f"candidate-{next(self._candidates)}"
        try:
            # derive=False: a candidate that does not compile to a servable program is refused, not replaced
            return build(self.sub, out, self.cache_dir, self.jobs, schedule=self._table(dict(key)),
                         derive=False).package
        except Refusal as e:
            return e


def tune(recipe: Recipe, schedule: Schedule, bands: tuple[Band, ...], cache_dir: Path, jobs: int = 1,
         context: int = 1024, iters: int = 50, progress: Callable[[str], None] = lambda _: None,
         timer=None) -> TuneResult:
    """Search each band's layer entry. ``timer(package_dir, band, mode) -> ms`` (with a ``device``
    name) times a compiled candidate; the default times it on this machine's GPU."""
    mode = "persistent" if "persistent" in recipe.deployment.modes else recipe.deployment.modes[0]
    timer = timer or _Timer(context, iters)
    trials: list[Trial] = []
    winners = []
    with tempfile.TemporaryDirectory(prefix="monobuild-tune-") as scratch:
        for band in bands:
            search = _BandSearch(recipe, schedule, band, mode, Path(scratch) / band.name, cache_dir, jobs, timer,
                                 progress)
            best, best_ms = search.run()
            trials += search.trials
            if best_ms is None:
                progress(f"{band.name}: every candidate was refused; its entry is left as it is")
                continue
            differs = tuple((k, v) for k, v in sorted({**search.kept, **best}.items())
                            if getattr(schedule.defaults, k) != v)
            start_ms = search.trials[0].median_ms
            measured = (f"{best_ms:.3f} ms" + (f" (was {start_ms:.3f} ms)" if start_ms else "")
                        + f", {timer.device}, context {context}, {datetime.date.today().isoformat()}")
            winners.append(Winner(band, differs, measured))
            progress(f"{band.name}: best {_describe(tuple(sorted(best.items())))} at {best_ms:.3f} ms")
    return TuneResult(recipe.name, timer.device, context, tuple(trials), tuple(winners))


def _describe(settings: tuple[tuple[str, int], ...]) -> str:
    return " ".join(f"{k}={v}" for k, v in settings)


def write_table(source: Path, out: Path, recipe: Recipe, result: TuneResult) -> None:
    """``source``'s table with the winners' entries (replacing entries with the same match), kept
    with its header comments, written to ``out``."""
    text = source.read_text()
    header = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    doc = yaml.safe_load(text) or {}
    entries = list(doc.get("entries") or [])
    for w in result.winners:
        match = dict(_match(recipe, w.band))
        entries = [e for e in entries if e.get("match") != match]
        entries.append({"match": match, "set": dict(w.differs), "measured": w.measured})
    defaults = yaml.safe_dump({"defaults": doc.get("defaults")}, sort_keys=False, default_flow_style=False)
    listed = yaml.safe_dump({"entries": entries}, sort_keys=False, default_flow_style=None, width=120)
    out.write_text("\n".join(header) + "\n" + defaults + listed)


def default_table(target: str) -> Path:
    """The shipped table of ``target`` (in a source checkout: ``schedules/<target>.yaml``)."""
    from importlib import resources

    return Path(str(resources.files("monobuild.schedules") / f"{target}.yaml"))


def as_trial_rows(result: TuneResult) -> list[str]:
    out = [f"{'band':6s} {'median':>9s}  settings"]
    for t in result.trials:
        value = f"{t.median_ms:.3f} ms" if t.median_ms is not None else "refused"
        out.append(f"{t.band:6s} {value:>9s}  {_describe(t.settings)}" + (f"  ({t.refused})" if t.refused else ""))
    return out

