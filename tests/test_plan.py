"""The planner's split-K choice, the agreement the hidden state's layout needs (the embedding,
every layer program and the head of a band must store and read the same number of partials), the
long KV tile from the schedule to the programs, and the RMSNorms as stages of their own."""

import dataclasses
from pathlib import Path

import pytest

from monobuild.compiler.errors import InputError
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe
from monobuild.compiler.schedule import load_schedule, parse_schedule
from monobuild.compiler.tiling import split_k

RECIPES = sorted((Path(__file__).resolve().parent.parent / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("tiles,k,block_k,grid,cap,want", [
    (128, 2048, 256, 264, 8, 2),   # Llama-3.2-1B o at 2 CTAs/SM: 128 tiles leave half the CTAs idle
    (128, 8192, 256, 264, 8, 2),   # its down: 4 splits would give 2 tasks of K/4 each, no better
    (128, 2048, 256, 264, 1, 1),   # the cap
    (256, 4096, 256, 264, 8, 1),   # Qwen3-8B o: every CTA already has a tile
    (128, 384, 256, 264, 8, 1),    # K not a whole number of chunks per split
    (64, 2048, 256, 132, 8, 2),    # block_n 32 at 1 CTA/SM
    (96, 2048, 256, 132, 8, 4),    # Llama-3.2-1B qkv there: 96 tiles; 4 splits give 3 tasks of K/4
])
def test_split_k_minimises_the_busiest_ctas_bytes(tiles, k, block_k, grid, cap, want):
    assert split_k(tiles, k, block_k, grid, cap) == want


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_every_program_of_a_band_agrees_on_the_hidden_states_partials(recipe):
    plan = plan_recipe(load_recipe(recipe))
    for step in plan.steps:
        programs = {launch.program: plan.program(launch.program) for launch in step.launches}
        shapes = {name: next(r.shape for r in p.regions if r.name in ("x_in", "x_out"))
                  for name, p in programs.items()}
        assert len(set(shapes.values())) == 1, shapes
        parts = next(iter(shapes.values()))[0]
        for p in programs.values():
            cx = dict(p.params)
            assert cx.get("X_PARTS", cx.get("DOWN_SPLIT")) == parts, p.name
            for stage in p.stages:
                if stage.name in ("qkv", "o", "down"):
                    assert stage.tasks % cx[f"{stage.name.upper()}_SPLIT"] == 0, p.name


@pytest.mark.parametrize("key,value,error", [
    ("long_kv_tile", 0, None), ("long_kv_tile", 256, None), ("long_kv_tile", 24, "expected a power of two"),
    ("long_kv_tile", -1, r"expected 0 \(off\) or a power of two"), ("long_kv_tile", False, r"expected 0 \(off\)"),
    ("long_kv_stages", 0, None), ("long_kv_stages", 5, None),
    ("long_kv_stages", -1, r"expected 0 \(as kv_stages\) or a positive integer"),
])
def test_keys_where_zero_has_a_meaning_take_it_or_their_usual_values(key, value, error):
    """long_kv_tile: 0 is off, else a power of two; long_kv_stages: 0 is kv_stages, else any depth."""
    defaults = {**load_schedule("sm_90").defaults.__dict__, key: value}
    if error is None:
        assert getattr(parse_schedule({"defaults": defaults}, "t").defaults, key) == value
    else:
        with pytest.raises(InputError, match=f"defaults.{key}: {error}"):
            parse_schedule({"defaults": defaults}, "t")


def test_long_kv_tiles_reach_the_layer_programs():
    """Where an entry sets long_kv_tile, long_kv_stages and kv_substreams (here Llama-3.2-1B's 1-row
    band on the Triton executor: 128-token tiles in 4 sub-tiles, 7 deep), the layer programs get
    them as LONG_KT, LONG_KV_STAGES and KV_SUB; elsewhere LONG_KT is 0, the attention walks
    kv_tile tokens only, LONG_KV_STAGES is KV_STAGES and KV_SUB 1 (the shipped table's streaming
    entries among them: a streaming program walks its ring's KV tiles)."""
    shipped = load_schedule("sm_90")
    entry = ((("hidden", 2048), ("kind", "layer"), ("rows", 1), ("tokens", 1)),
             (("ctas_per_sm", 1), ("long_kv_stages", 7), ("long_kv_tile", 128), ("kv_substreams", 4)))
    table = dataclasses.replace(shipped, entries=(entry,) + shipped.entries)
    recipe = load_recipe(next(r for r in RECIPES if r.stem == "llama-3.2-1b-sm_90"))
    seen = set()
    for p in plan_recipe(recipe, table).programs:
        if p.kind == "layer":
            long_kt, stages, sub = (128, 7, 4) if p.band.name == "r1t1" else (0, p.param("KV_STAGES"), 1)
            assert (p.param("LONG_KT"), p.param("LONG_KV_STAGES"), p.param("KV_SUB")) == \
                (long_kt, stages, sub), p.name
            seen.add(p.executor)
    assert seen == {"triton", "gluon"}


@pytest.mark.parametrize("long_kv_tile,kv_substreams,want", [(128, 4, 4), (64, 8, 4), (32, 4, 2), (0, 4, 1)])
def test_kv_substreams_leave_each_sub_tile_a_products_width(long_kv_tile, kv_substreams, want):
    """KV_SUB is the table's kv_substreams, but no more than leaves each sub-tile 16 tokens (a
    product's width), and 1 where no split walks long tiles."""
    shipped = load_schedule("sm_90")
    table = dataclasses.replace(shipped, defaults=dataclasses.replace(
        shipped.defaults, kv_tile=16, long_kv_tile=long_kv_tile, kv_substreams=kv_substreams), entries=())
    recipe = load_recipe(next(r for r in RECIPES if r.stem == "llama-3.2-1b-sm_90"))
    layers = [p for p in plan_recipe(recipe, table).programs if p.kind == "layer"]
    assert {p.param("KV_SUB") for p in layers} == {want}


@pytest.mark.parametrize("value,error", [(1, None), (4, None), (3, "expected a power of two"),
                                         (0, "expected a positive integer")])
def test_kv_substreams_is_a_power_of_two(value, error):
    defaults = {**load_schedule("sm_90").defaults.__dict__, "kv_substreams": value}
    if error is None:
        assert parse_schedule({"defaults": defaults}, "t").defaults.kv_substreams == value
    else:
        with pytest.raises(InputError, match=f"defaults.kv_substreams: {error}"):
            parse_schedule({"defaults": defaults}, "t")


def test_norm_rows_reach_the_norm_stages_clamped_to_the_bands_rows():
    """norm_rows (x̂ rows a CTA stages per load) goes to the programs that stage x̂ per CTA as
    NORM_ROWS, at most the band's rows (rounded up to a power of two); the shipped table's is 8. A
    layer or head program with a norm stage stages nothing per CTA and gets 1, whatever the table
    says."""
    recipe = load_recipe(next(r for r in RECIPES if r.stem == "llama-3.2-1b-sm_90"))
    shipped = load_schedule("sm_90")
    for norm_rows, table in ((8, None), (4, parse_schedule({"defaults": {**shipped.defaults.__dict__, "norm_rows": 4}},
                                                            "t"))):
        for p in plan_recipe(recipe, table).programs:
            if p.kind != "embed":
                staged_per_cta = not p.param("NORM_STAGES" if p.kind == "layer" else "NORM_STAGE")
                want = min(norm_rows, 1 << (p.band.m - 1).bit_length()) if staged_per_cta else 1
                assert p.param("NORM_ROWS") == want, p.name
    with pytest.raises(InputError, match="defaults.norm_rows: expected a power of two, got 3"):
        parse_schedule({"defaults": {**shipped.defaults.__dict__, "norm_rows": 3}}, "t")


def test_norm_stages_put_each_rmsnorm_in_a_stage_of_its_own():
    """With norm_stages the layer runs norm_qkv and norm_up (a task per token row) before qkv and
    up; their x̂ is one [M, hidden] copy the next stage's CTAs all read, ordered by the sync edge
    between them; the bytes the step must move do not change. Without, each CTA stages its own
    slice ([grid, M, hidden], CTA-local)."""
    recipe = load_recipe(next(r for r in RECIPES if r.stem == "qwen3-8b-sm_90"))
    shipped = load_schedule("sm_90")
    table = {flag: parse_schedule({"defaults": {**shipped.defaults.__dict__, "norm_stages": flag}}, "t")
             for flag in (0, 1)}
    plans = {flag: plan_recipe(recipe, t) for flag, t in table.items()}
    band = recipe.deployment.bands[-1]
    on, off = (plans[f].program(f"layer.{band.name}.persistent") for f in (1, 0))
    assert [s.name for s in on.stages] == ["norm_qkv", "qkv", "attn", "combine", "o", "norm_up", "up", "down"]
    assert [s.name for s in off.stages] == ["qkv", "attn", "combine", "o", "up", "down"]
    assert [s.index for s in on.stages] == list(range(8)) and on.stages[0].tasks == band.m
    regions = {r.name: r for r in on.regions}
    assert (regions["x_hat_qkv"].shape, regions["x_hat_qkv"].writer, regions["x_hat_qkv"].readers,
            regions["x_hat_qkv"].same_stage) == ((band.m, recipe.geometry.hidden), "norm_qkv", ("qkv",), None)
    assert regions["x_in"].readers == ("norm_qkv", "o") and regions["x1"].readers == ("norm_up", "down")
    edges = {(e.producer, e.consumer): e.regions for e in on.syncs}
    assert edges[("norm_qkv", "qkv")] == ("x_hat_qkv",) and edges[("norm_up", "up")] == ("x_hat_up",)
    assert len(on.syncs) == 7 and on.param("NORM_STAGES") is True
    assert {r.name: r.shape[0] for r in off.regions}["x_hat_qkv"] == off.grid
    assert all(plans[0].step_bytes(b, 1024) == plans[1].step_bytes(b, 1024) for b in recipe.deployment.bands)
    staged = [p.name for p in plans[1].programs if p.kind == "layer" and p.mode == "staged" and p.band == band]
    assert staged[0].endswith(".norm_qkv") and staged[5].endswith(".norm_up") and len(staged) == 8
    with pytest.raises(InputError, match="defaults.norm_stages: expected 0 or 1, got 2"):
        parse_schedule({"defaults": {**shipped.defaults.__dict__, "norm_stages": 2}}, "t")


def test_norm_stages_give_the_head_a_norm_stage():
    """The head's final RMSNorm follows the same key: a norm stage (a task per token row) writes
    one [M, hidden] x̂ that every logits CTA reads after the edge between them; without it each
    CTA stages its own slice. The bytes the step must move do not change."""
    recipe = load_recipe(next(r for r in RECIPES if r.stem == "qwen3-8b-sm_90"))
    shipped = load_schedule("sm_90")
    plans = {flag: plan_recipe(recipe, parse_schedule({"defaults": {**shipped.defaults.__dict__, "norm_stages": flag}},
                                                      "t")) for flag in (0, 1)}
    band = recipe.deployment.bands[-1]
    on, off = (plans[f].program(f"head.{band.name}.persistent") for f in (1, 0))
    assert [s.name for s in on.stages] == ["norm", "logits", "argmax"] and on.stages[0].tasks == band.m
    assert [s.name for s in off.stages] == ["logits", "argmax"]
    regions = {r.name: r for r in on.regions}
    assert (regions["x_hat"].shape, regions["x_hat"].writer, regions["x_hat"].readers, regions["x_hat"].same_stage) \
        == ((band.m, recipe.geometry.hidden), "norm", ("logits",), None)
    assert regions["x_in"].readers == ("norm",)
    assert {(e.producer, e.consumer): e.regions for e in on.syncs} == {
        ("norm", "logits"): ("x_hat",), ("logits", "argmax"): ("tile_max", "tile_arg")}
    assert on.param("NORM_STAGE") is True and off.param("NORM_STAGE") is False
    assert {r.name: r.shape[0] for r in off.regions}["x_hat"] == off.grid
    assert all(plans[0].step_bytes(b, 1024) == plans[1].step_bytes(b, 1024) for b in recipe.deployment.bands)
    staged = [p.name for p in plans[1].programs if p.kind == "head" and p.mode == "staged" and p.band == band]
    assert [n.rsplit(".", 1)[1] for n in staged] == ["norm", "logits", "argmax"]


def test_staged_programs_take_the_band_at_run_time_and_share_one_text_across_bands():
    """A program of one op takes its band's row count, KV splits and grid as band arguments (role
    ``band``, their values in ``scalars``), so the default recipe's 2-, 4- and 8-row staged qkv, o
    and down, and its 1- to 8-row staged attention, are one text (one code object) each. A GEMV that stages
    its own input, or is gated (up), keeps its row count in its text, as the norms and every
    multi-op program do."""
    from monobuild.compiler.emit import emit

    recipe = load_recipe(RECIPES[[p.name for p in RECIPES].index("llama-3.2-1b-sm_90.yaml")])
    plan = plan_recipe(recipe)
    keys = {p.name: emit(p).key_parts() for p in plan.programs}
    for op in ("qkv", "o", "down"):
        assert len({keys[f"layer.r{rows}t1.{op}"] for rows in (2, 4, 8)}) == 1, op
    assert len({keys[f"layer.r{rows}t1.up"] for rows in (2, 4, 8)}) == 3
    assert len({keys[f"layer.r{rows}t1.attn"] for rows in (1, 2, 4, 8)}) == 1
    assert len({keys[f"embed.r{rows}t1"] for rows in (1, 2, 4, 8)}) == 1
    assert len(set(keys.values())) < len(keys)
    for rows in (2, 4, 8):
        qkv, attn, norm = (plan.program(f"layer.r{rows}t1.{op}") for op in ("qkv", "attn", "norm_qkv"))
        assert not norm.scalars and f"M={rows}," in emit(norm).source
        up = plan.program(f"layer.r{rows}t1.up")
        assert not up.scalars and f"M={rows}," in emit(up).source
        assert qkv.scalars == (("m", rows),) and [a.name for a in qkv.args if a.role == "band"] == ["m"]
        assert dict(attn.scalars) == {"rows": rows, "kv_splits": attn.param("SPLITS")}
    staging = plan.program("layer.r1t1.qkv")  # one row: each CTA norms x_in itself
    assert not staging.scalars and "M=1," in emit(staging).source
    for p in plan.programs:
        if len(p.ops) > 1:
            assert not p.scalars and all(a.role != "band" for a in p.args), p.name
