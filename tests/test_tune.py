"""``monobuild tune`` on the CPU: the search compiles real candidates and writes a table that the
planner then uses. The GPU clock is replaced by a cost model over the compiled packages (the one
part of tuning a CPU cannot do); the GPU run is recorded in docs/PERFORMANCE.md."""

import dataclasses
import json
import shutil
from pathlib import Path

import yaml
from click.testing import CliRunner

from monobuild.bench.tune import SEARCH, tune, write_table
from monobuild.cli.main import main
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe
from monobuild.compiler.schedule import load_schedule, read_schedule

from .conftest import DATA, TINY_RECIPE


class CostModelClock:
    """Stands in for CUDA events: a made-up time from the compiled manifest, lowest for block_n 32
    with 2 weight stages, so the search has a known optimum to find."""

    device = "cost model (CPU test)"

    def __init__(self):
        self.timed = []

    def __call__(self, package_dir: Path, band, mode: str) -> float:
        manifest = json.loads((package_dir / "manifest.json").read_text())
        layer = next(p for p in manifest["programs"] if p["kind"] == "layer")
        cx = layer["params"]
        self.timed.append((band.name, mode, cx["BN"], cx["W_STAGES"]))
        return 1.0 + (cx["BN"] != 32) + 0.5 * (cx["W_STAGES"] != 2)


def _recipe(tmp_path: Path):
    shutil.copy(DATA / "tiny-llama.json", tmp_path / "tiny-llama.json")
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_RECIPE)
    return load_recipe(path)


def test_search_finds_the_optimum_and_the_table_steers_the_planner(tmp_path):
    recipe = _recipe(tmp_path)
    band = recipe.deployment.bands[0]
    clock = CostModelClock()
    shipped = load_schedule("sm_90")
    result = tune(recipe, shipped, (band,), tmp_path / "cache", jobs=2, timer=clock)

    assert all(mode == "persistent" for _, mode, _, _ in clock.timed)
    searched = 1 + sum(len(values) - 1 for _, values in SEARCH)
    assert len(result.trials) <= searched and len(clock.timed) == len([t for t in result.trials if t.median_ms])
    (winner,) = result.winners
    assert winner.band == band and dict(winner.differs)["block_n"] == 32 and dict(winner.differs)["weight_stages"] == 2
    assert winner.measured.startswith("1.000 ms (was 2.500 ms), cost model (CPU test), context 1024")

    out = tmp_path / "sm_90.yaml"
    write_table(Path(shipped.source), out, recipe, result)
    text = out.read_text()
    assert text.startswith("# Frozen schedule")  # the shipped header is kept
    table = read_schedule(out)
    entry = table.entry("layer", recipe.geometry.hidden, band.rows, band.tokens, weights="bf16")
    assert (entry.block_n, entry.weight_stages) == (32, 2)
    other = recipe.deployment.bands[1]
    assert table.entry("layer", recipe.geometry.hidden, other.rows, other.tokens, weights="bf16") == table.defaults
    layer = next(p for p in plan_recipe(recipe, table).programs if p.kind == "layer" and p.band == band)
    assert (layer.param("BN"), layer.param("W_STAGES")) == (32, 2)

    # tuning again replaces the band's entry instead of adding a second one, and the header stays one
    write_table(out, out, recipe, result)
    entries = yaml.safe_load(out.read_text())["entries"]
    assert len(entries) == len(shipped.entries) + 1
    assert [e["match"].get("hidden") for e in entries].count(recipe.geometry.hidden) == 1
    assert out.read_text().count("# Frozen schedule") == 1


def test_a_refused_candidate_is_retried_a_pipeline_stage_shallower(tmp_path):
    """block_n 32 with 4 weight stages does not fit 2 CTAs per SM on the tiny recipe's programs;
    the descent must then try block_n 32 with 3 stages (measured or refused in turn) instead of
    giving block_n 32 up."""
    recipe = _recipe(tmp_path)
    shipped = load_schedule("sm_90")
    deep = dataclasses.replace(shipped, defaults=dataclasses.replace(shipped.defaults, weight_stages=4))
    result = tune(recipe, deep, (recipe.deployment.bands[0],), tmp_path / "cache", jobs=2, timer=CostModelClock())
    tried = {dict(t.settings)["block_n"]: [] for t in result.trials}
    for t in result.trials:
        tried[dict(t.settings)["block_n"]].append((dict(t.settings)["weight_stages"], t.median_ms is not None))
    assert (4, False) in tried[32], "the test's premise: block_n 32 at 4 stages is refused"
    assert 3 in [stages for stages, _ in tried[32]]


def test_keys_the_search_does_not_cover_stay_in_every_candidate_and_in_the_entry(tmp_path):
    """long_kv_tile is set by hand from long-context benches; a tune at one context must neither
    build candidates without it nor write the band's entry back without it."""
    recipe = _recipe(tmp_path)
    band = recipe.deployment.bands[0]
    shipped = load_schedule("sm_90")
    match = (("hidden", recipe.geometry.hidden), ("kind", "layer"), ("rows", band.rows), ("tokens", band.tokens))
    table = dataclasses.replace(shipped, entries=((match, (("long_kv_tile", 128),)),) + shipped.entries)
    seen = []

    class Clock(CostModelClock):
        def __call__(self, package_dir, band, mode):
            manifest = json.loads((package_dir / "manifest.json").read_text())
            seen.append(next(p for p in manifest["programs"] if p["kind"] == "layer")["params"]["LONG_KT"])
            return super().__call__(package_dir, band, mode)

    result = tune(recipe, table, (band,), tmp_path / "cache", jobs=2, timer=Clock())
    assert seen and set(seen) == {128}
    (winner,) = result.winners
    assert dict(winner.differs)["long_kv_tile"] == 128 and dict(winner.differs)["block_n"] == 32


def test_tune_without_a_gpu_is_refused_in_one_line(tmp_path):
    recipe = _recipe(tmp_path)
    result = CliRunner().invoke(main, ["tune", recipe.source, "--out", str(tmp_path / "t.yaml")])
    assert result.exit_code == 2
    assert "none is visible" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "t.yaml").exists()


def test_tune_names_an_unknown_band(tmp_path):
    recipe = _recipe(tmp_path)
    result = CliRunner().invoke(main, ["tune", recipe.source, "--band", "r3t1"])
    assert result.exit_code == 2
    assert "r3t1" in result.output


def test_compile_takes_a_tuned_table_and_names_bad_fields(tmp_path):
    recipe = _recipe(tmp_path)
    table = tmp_path / "tuned.yaml"
    doc = yaml.safe_load(Path(load_schedule("sm_90").source).read_text())
    doc["entries"] = [{"match": {"kind": "layer", "rows": 2}, "set": {"block_n": 32}, "measured": "by hand"}]
    table.write_text(yaml.safe_dump(doc))
    args = ["compile", recipe.source, "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
            "--schedule", str(table)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "out" / "tiny" / "sm_90" / "manifest.json").read_text())
    block_n = {p["name"]: p["params"]["BN"] for p in manifest["programs"] if p["kind"] == "layer"}
    assert block_n["layer.r2t1.persistent"] == 32 and block_n["layer.r1t1.persistent"] == 16

    for entry, field in (({"match": {"rows": 2}, "set": {"block_n": 24}}, "entries[0].set.block_n"),
                         ({"match": {"rows": 2}, "why": "x"}, "entries[0].why"),
                         ({"match": {"band": 2}}, "entries[0].match.band")):
        doc["entries"] = [entry]
        table.write_text(yaml.safe_dump(doc))
        result = CliRunner().invoke(main, [*args[:-1], str(table)])
        assert result.exit_code == 2 and f"{table}: {field}:" in result.output, result.output


def test_a_value_the_planner_clamps_is_not_tried_again(tmp_path):
    """norm_rows above the band's rows plans the band's rows: from 1, a 2-row band tries 1 and 2
    once each, never 4 or 8, and a 1-row band tries no other value."""
    recipe = _recipe(tmp_path)
    seen = []

    class Clock(CostModelClock):
        def __call__(self, package_dir, band, mode):
            manifest = json.loads((package_dir / "manifest.json").read_text())
            layer = next(p for p in manifest["programs"] if p["kind"] == "layer")
            seen.append((band.rows, layer["params"]["NORM_ROWS"]))
            return super().__call__(package_dir, band, mode)

    shipped = load_schedule("sm_90")
    # each CTA staging x̂ itself (with norm stages norm_rows plans nothing: see below); the cost
    # model ignores norm_stages, so the descent keeps 0
    start_at_one = dataclasses.replace(shipped, defaults=dataclasses.replace(shipped.defaults, norm_rows=1,
                                                                             norm_stages=0))
    result = tune(recipe, start_at_one, recipe.deployment.bands, tmp_path / "cache", jobs=2, timer=Clock())
    tried = {(t.band, dict(t.settings)["norm_rows"]) for t in result.trials}
    one, two = (b.name for b in recipe.deployment.bands)
    assert {v for b, v in tried if b == one} == {1}
    assert {v for b, v in tried if b == two} == {1, 2}
    assert {n for rows, n in seen if rows == 2} == {1, 2} and {n for rows, n in seen if rows == 1} == {1}

    # With norm stages no CTA stages x̂, so no norm_rows value makes another program.
    with_stages = dataclasses.replace(shipped, defaults=dataclasses.replace(shipped.defaults, norm_rows=1,
                                                                            norm_stages=1))
    result = tune(recipe, with_stages, recipe.deployment.bands, tmp_path / "cache", jobs=2, timer=Clock())
    assert {dict(t.settings)["norm_rows"] for t in result.trials} == {1}
