"""Tensor parallelism: the sharding rules (``monobuild.parallel``), a rank's shard of a whole
checkpoint (``runtime.shards``) and the N-rank reference step (``bench.reference``), which is the
whole model's step; the recipe's ``tensor_parallel`` and what is refused; the plan (the
all-reduce ops and their cross-rank sites); the compiled package's contracts (X1–X4, with planted
defects); and the ranks' staged step under the interpreter against the float64 reference."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from monobuild.bench.checkpoints import experts_apart, random_hf_state_dict
from monobuild.bench.reference import reference_step, tensor_parallel_reference_step
from monobuild.cli.main import main
from monobuild.compiler.contracts.check import check_package
from monobuild.compiler.geometry import load_config
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe
from monobuild.manifest import read_manifest
from monobuild.parallel import TensorParallel
from monobuild.runtime import WeightError
from monobuild.runtime.shards import shard_state_dict
from monobuild.runtime.weights import pack_hf_state_dict

from .conftest import rebuild_code

DATA = Path(__file__).parent / "data"
BLOCK, BLOCKS = 16, 12


def _geometry(name: str):
    return load_config(DATA / name)


def test_a_rank_holds_its_share_of_heads_rows_and_vocabulary():
    g, _ = _geometry("tiny-llama.json")  # 8 query heads, 2 KV heads, intermediate 512, vocabulary 512
    shapes = {n: (r.q_heads, r.kv_heads, r.intermediate, r.vocab)
              for n in (1, 2, 4, 8) for r in [TensorParallel(n).rank_geometry(g)]}
    assert shapes == {1: (8, 2, 512, 512), 2: (4, 1, 256, 256), 4: (2, 1, 128, 128), 8: (1, 1, 64, 64)}
    tp = TensorParallel(8)  # each KV head on four consecutive ranks, as vLLM replicates them
    assert tp.kv_replicas(g) == 4 and [tp.kv_block(g, r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [tp.kv_heads(g, r) for r in (0, 5)] == [slice(0, 1), slice(1, 2)]
    wide = dataclasses.replace(g, kv_heads=8)  # two KV heads a rank over 4 ranks
    assert [TensorParallel(4).kv_heads(wide, r) for r in range(4)] == [slice(2 * r, 2 * r + 2) for r in range(4)]
    padded = dataclasses.replace(g, vocab=500)  # padded to 512, 64 rows a step
    assert TensorParallel(4).vocab_range(padded, 3) == (384, 512)


@pytest.mark.parametrize("change,n,reason", [
    ({}, 3, "3 ranks: the sizes served are 1, 2, 4, 8"),
    ({"q_heads": 6, "kv_heads": 2}, 4, "6 query heads do not split over 4 ranks"),
    ({"q_heads": 12, "kv_heads": 3}, 2, "3 KV heads neither split over 2 ranks nor repeat a whole number of times"),
    ({"q_heads": 12, "kv_heads": 3}, 4, "3 KV heads neither split over 4 ranks nor repeat"),
    ({"intermediate": 100}, 8, "the intermediate size 100 does not split over 8 ranks"),
])
def test_what_does_not_split_is_refused_with_its_reason(change, n, reason):
    g, _ = _geometry("tiny-llama.json")
    assert reason in TensorParallel(n).refusal(dataclasses.replace(g, **change))


def test_an_fp8_checkpoint_splits_only_into_whole_scale_blocks():
    """vLLM's rule: a rank's output rows and input columns of a block-scaled projection are whole
    blocks (Qwen3-30B-A3B-FP8's experts, 768 rows of 128-row blocks, split over 2 ranks, not 4)."""
    g, quant = load_config(DATA / "configs" / "qwen3-30b-a3b-fp8.json")
    assert TensorParallel(2).refusal(g, quant) is None
    assert TensorParallel(4).refusal(g, quant) == ("a rank's 192 experts' intermediate rows are not whole "
                                                   "128-row scale blocks")
    g, quant = _geometry("tiny-llama-fp8.json")  # [64, 128] blocks: 2 ranks hold 32 KV rows each
    assert TensorParallel(2).refusal(g, quant) == "a rank's 32 KV rows are not whole 64-row scale blocks"
    with pytest.raises(WeightError, match="32 KV rows"):
        shard_state_dict({}, g, TensorParallel(2), 0, quant)


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "configs").glob("*.json")))
def test_the_corpus_splits_as_vllm_serves_it(name):
    """Every config of the corpus splits over 2 ranks; where 4 or 8 do not, the reason is one
    vLLM refuses too (query heads, FP8 scale blocks)."""
    g, quant = load_config(DATA / "configs" / name)
    assert TensorParallel(2).refusal(g, quant) is None
    for n in (4, 8):
        reason = TensorParallel(n).refusal(g, quant)
        assert reason is None or "query heads do not split" in reason or "scale blocks" in reason, reason


def test_a_shard_is_a_view_and_the_vocabulary_padding_is_zeros():
    g, _ = _geometry("tiny-qwen2-gqa3.json")  # untied head, q/k/v biases
    g = dataclasses.replace(g, vocab=500)
    sd = random_hf_state_dict(g, torch.bfloat16, torch.Generator().manual_seed(0))
    tp = TensorParallel(2)
    shard = shard_state_dict(sd, g, tp, 1)
    q = sd["model.layers.0.self_attn.q_proj.weight"]
    assert shard["model.layers.0.self_attn.q_proj.weight"].data_ptr() == q[3 * 32:].data_ptr()
    assert torch.equal(shard["model.layers.0.self_attn.k_proj.bias"], sd["model.layers.0.self_attn.k_proj.bias"][32:])
    assert torch.equal(shard["model.layers.0.self_attn.o_proj.weight"],
                       sd["model.layers.0.self_attn.o_proj.weight"][:, 96:])
    assert torch.equal(shard["model.layers.1.mlp.down_proj.weight"], sd["model.layers.1.mlp.down_proj.weight"][:, 192:])
    head = shard["lm_head.weight"]
    assert head.shape == (256, 192) and torch.equal(head[:244], sd["lm_head.weight"][256:])
    assert not head[244:].any()
    assert shard["model.norm.weight"] is sd["model.norm.weight"]
    fused = {"model.layers.0.self_attn.qkv_proj.weight": q}
    with pytest.raises(WeightError, match="qkv_proj.weight: a fused tensor"):
        shard_state_dict(fused, g, tp, 0)


def _step_inputs(tokens_per_row: int, vocab: int, seed: int):
    """Two live rows (contexts 5 and 19, this step's tokens included) and a padding row, their
    pages scattered over the cache."""
    gen = torch.Generator().manual_seed(seed)
    contexts = [5, 19, 0]
    tables = torch.randperm(BLOCKS, generator=gen)[:6].view(3, 2).to(torch.int32)
    positions = torch.cat([torch.arange(c - tokens_per_row, c) if c else torch.zeros(tokens_per_row, dtype=torch.long)
                           for c in contexts])
    tokens = torch.randint(0, vocab, (3 * tokens_per_row,), generator=gen)
    return tokens, positions, tables, torch.tensor(contexts, dtype=torch.int32)


CASES = [("tiny-llama.json", 2, 1), ("tiny-llama.json", 4, 2), ("tiny-llama.json", 8, 1),
         ("tiny-qwen3.json", 2, 1), ("tiny-qwen2-gqa3.json", 2, 1), ("tiny-mistral-window.json", 2, 1),
         ("tiny-qwen3-moe.json", 2, 1), ("tiny-mixtral.json", 4, 1), ("tiny-qwen3-fp8.json", 2, 2),
         ("tiny-qwen3-moe-fp8.json", 2, 1)]


@pytest.mark.parametrize("name,n,tokens_per_row", CASES)
def test_the_ranks_step_is_the_whole_models(name, n, tokens_per_row):
    """Each rank's shard (cut from the whole checkpoint, packed for its rank geometry) and its
    KV heads' caches: the N-rank step's logits are the whole model's (float64, so only the
    summation order differs), and each rank's caches gain its KV heads' K/V of the whole step."""
    g, quant = _geometry(name)
    if name == "tiny-mixtral.json":
        g = dataclasses.replace(g, vocab=500)  # a vocabulary the padding does not divide evenly
    if quant is not None and g.experts is not None:  # a rank's experts in whole [32, 64] blocks
        g = dataclasses.replace(g, experts=dataclasses.replace(g.experts, intermediate=128))
    sd = random_hf_state_dict(g, torch.bfloat16, torch.Generator().manual_seed(1), quant)
    if g.experts is not None and name == "tiny-mixtral.json":
        sd = experts_apart(sd, g)  # a published checkpoint's experts, each its own tensors
    tp = TensorParallel(n)
    r = tp.rank_geometry(g)
    gen = torch.Generator().manual_seed(2)
    caches = [[torch.randn(BLOCKS, BLOCK, g.kv_heads, g.head_dim, generator=gen).to(torch.bfloat16)
               for _ in range(g.layers)] for _ in "kv"]
    heads = [tp.kv_heads(g, rank) for rank in range(n)]
    rank_caches = [[[c[..., h, :].clone() for c in kind] for h in heads] for kind in caches]
    inputs = _step_inputs(tokens_per_row, g.vocab, 3)
    whole = reference_step(g, pack_hf_state_dict(sd, g, torch.bfloat16, quant=quant), *caches, *inputs,
                           tokens_per_row)
    ranks = [pack_hf_state_dict(shard_state_dict(sd, g, tp, rank, quant), r, torch.bfloat16, quant=quant)
             for rank in range(n)]
    split = tensor_parallel_reference_step(g, tp, ranks, *rank_caches, *inputs, tokens_per_row)
    assert split.shape == whole.shape == (3 * tokens_per_row, g.vocab)
    assert torch.allclose(split, whole, rtol=1e-9, atol=1e-9), (split - whole).abs().max()
    for kind, ranked in zip(caches, rank_caches):
        for rank, h in enumerate(heads):
            for layer in range(g.layers):  # bf16 of the same float64 values up to the summation order
                assert torch.allclose(ranked[rank][layer].float(), kind[layer][..., h, :].float(), rtol=2**-7,
                                      atol=1e-6)


# -- the recipe and the plan ----------------------------------------------------------------------

def _tp_recipe(tiny_recipe, **overrides):
    return tiny_recipe(**{"modes": ["staged"], "tensor_parallel": 2, "verify": {"rows": 1, "tokens": 3},
                          **overrides})


def _checked(recipe: Path, tmp_path: Path, target: str = "sm_90", *options: str, name: str = "tiny"):
    """``recipe`` compiled for ``target`` (4 SMs or CUs) with ``options``, its every contract
    holding; the package's manifest."""
    result = CliRunner().invoke(main, ["compile", str(recipe), "--out", str(tmp_path / "out"), "--jobs", "2",
                                       "--quiet", "--target", target, "--sm-count", "4", *options])
    assert result.exit_code == 0, result.output
    report = check_package(tmp_path / "out" / name / target)
    assert report.ok, "\n".join(v.line() for v in report.violations)
    return read_manifest(tmp_path / "out" / name / target)


@pytest.mark.parametrize("overrides,message", [
    ({"tensor_parallel": 3}, "tensor_parallel: expected one of 1, 2, 4, 8, got 3"),
    ({"tensor_parallel": 8, "verify": None}, "tensor_parallel 8: 4 query heads do not split over 8 ranks"),
])
def test_a_split_the_programs_do_not_serve_is_refused_in_one_line(tiny_recipe, overrides, message):
    recipe = _tp_recipe(tiny_recipe, **overrides)
    if overrides.get("tensor_parallel") == 8:  # tiny-llama with 4 query heads (and 2 KV heads)
        config = json.loads(Path(recipe.parent / "tiny-llama.json").read_text())
        (recipe.parent / "tiny-llama.json").write_text(json.dumps({**config, "num_attention_heads": 4}))
    result = CliRunner().invoke(main, ["plan", str(recipe)])
    assert result.exit_code == 2 and message in result.output and len(result.output.strip().splitlines()) == 1, \
        result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_a_debug_build_of_a_split_package_keeps_every_contract(tiny_recipe, tmp_path, target):
    """--debug-wait-spins: the all-reduces' waits give up too, so they take the hang log."""
    manifest = _checked(_tp_recipe(tiny_recipe, bands=[1], verify=None), tmp_path, target, "--debug-wait-spins",
                        "100", name="tiny-debug")
    reduce_o = next(p for p in manifest.programs if p.name == "layer.r1t1.reduce_o")
    assert reduce_o.hang_slots > 0 and "hang_log" in [a.name for a in reduce_o.args]


def test_the_plan_of_a_rank_reduces_o_and_down_across_ranks(tiny_recipe):
    plan = plan_recipe(load_recipe(_tp_recipe(tiny_recipe)))
    step = plan.step(plan.steps[0].band, "staged")
    layer = [x.program.rsplit(".", 1)[1] for x in step.launches if x.layer == 0]
    assert layer == ["norm_qkv", "qkv", "attn", "combine", "o", "reduce_o", "norm_up", "up", "down", "reduce_down"]
    head = [x.program for x in step.launches if x.layer is None]
    assert head == ["embed.r1t1", "embed.r1t1.reduce", "head.r1t1.norm", "head.r1t1.logits", "head.r1t1.argmax"]
    sites = {p.name: [(c.op, c.kind, c.site, c.ranks) for c in p.cross_rank] for p in plan.programs
             if p.band.name == "r1t1" and p.cross_rank}
    assert sites == {"embed.r1t1": [("embed", "signal", 0, 2)], "embed.r1t1.reduce": [("reduce_embed", "wait", 0, 2)],
                     "layer.r1t1.o": [("o", "signal", 1, 2)], "layer.r1t1.reduce_o": [("reduce_o", "wait", 1, 2)],
                     "layer.r1t1.down": [("down", "signal", 2, 2)],
                     "layer.r1t1.reduce_down": [("reduce_down", "wait", 2, 2)],
                     "head.r1t1.logits": [("logits", "signal", 3, 2)], "head.r1t1.argmax": [("argmax", "wait", 3, 2)]}
    reduce_o = plan.program("layer.r1t1.reduce_o")
    assert [a.name for a in reduce_o.args if a.role == "peer"] == ["x1_part_peer0", "x1_part_peer1"]
    o = plan.program("layer.r1t1.o")
    assert o.ops[0].binding("residual_ptr") is None  # the all-reduce adds the residual, once
    regions = {r.name: r.shape for r in plan.program("layer.r1t1.qkv").regions}
    assert regions["x_in"] == (1, 1, 256) and regions["qkv"][2] == (4 + 2 * 1) * 32  # a rank's heads: 4 q, 1 kv


def test_plan_and_inspect_say_what_a_rank_holds(tiny_recipe, tmp_path):
    recipe = _tp_recipe(tiny_recipe)
    plan = CliRunner().invoke(main, ["plan", str(recipe)])
    assert "tensor parallel over 2 ranks, each: heads 4/1, intermediate 256, vocab rows 256 of 512" in plan.output
    assert "program layer.r1t1.reduce_o" in plan.output  # a staged-only recipe's programs, all shown
    data = json.loads(CliRunner().invoke(main, ["plan", str(recipe), "--json"]).output)
    o = next(p for p in data["programs"] if p["name"] == "layer.r1t1.o")
    assert data["tensor_parallel"] == 2 and o["cross_rank"] == [{"op": "o", "kind": "signal", "site": 1, "ranks": 2}]
    CliRunner().invoke(main, ["compile", str(recipe), "--out", str(tmp_path / "out"), "--quiet"])
    shown = CliRunner().invoke(main, ["inspect", str(tmp_path / "out" / "tiny" / "sm_90")])
    assert "serves: each of 2 tensor-parallel ranks: head ids" in shown.output, shown.output


# -- contracts ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def split_packages(tmp_path_factory):
    """A tiny Llama split over 2 ranks (staged, bands 1 and 2, a 1 × 3 verify band), compiled for
    sm_90 and for gfx950."""
    root = tmp_path_factory.mktemp("split")
    shutil.copy(DATA / "tiny-llama.json", root / "tiny-llama.json")
    recipe = root / "tiny.yaml"
    recipe.write_text("config: tiny-llama.json\ntarget: sm_90\nsm_count: 4\ndtype: bf16\n"
                      "kv_cache: {dtype: bf16, block_size: 16}\nbands: [1, 2]\nverify: {rows: 1, tokens: 3}\n"
                      "max_context: 256\nhead: ids\nmodes: [staged]\ntensor_parallel: 2\n")
    packages = {}
    for target in ("sm_90", "gfx950"):
        out = root / target
        result = CliRunner().invoke(main, ["compile", str(recipe), "--out", str(out), "--cache", str(root / "cache"),
                                           "--jobs", "2", "--quiet", "--target", target, "--sm-count", "4"])
        assert result.exit_code == 0, result.output
        packages[target] = out / "tiny" / target
    return packages


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_the_split_package_keeps_every_contract(split_packages, target):
    report = check_package(split_packages[target])
    assert report.ok, "\n".join(v.line() for v in report.violations)
    manifest = json.loads((split_packages[target] / "manifest.json").read_text())
    assert manifest["deployment"]["tensor_parallel"] == 2


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
@pytest.mark.parametrize("head", ["logits", "sample"])
def test_a_split_logits_or_sampling_head_gathers_in_a_program_that_keeps_every_contract(tiny_recipe, tmp_path, target,
                                                                                       head):
    recipe = _tp_recipe(tiny_recipe, head=head, bands=[2], verify=None)
    gather = next(p for p in _checked(recipe, tmp_path, target).programs if p.name == "head.r2t1.gather")
    assert [(c.op, c.kind) for c in gather.cross_rank] == [("gather", "wait")]
    assert [a.name for a in gather.args if a.role == "peer"] == ["logits_part_peer0", "logits_part_peer1"]
    logits = next(r for r in gather.regions if r.name == "logits")
    assert logits.shape == (2, 512) and logits.writer == "gather"  # the whole vocabulary, every rank's rows
    parts = {r.name: (r.shape, r.writer) for r in gather.regions if r.name.startswith("tile_")}
    tiles = -(-512 // dict(gather.params)["BN"])  # the whole vocabulary's tiles
    assert parts == ({} if head == "logits" else {name: ((2, tiles), "gather") for name in
                                                  ("tile_max", "tile_arg", "tile_z", "tile_zarg", "tile_mass")})


@pytest.mark.parametrize("target", ["sm_90", "gfx942", "gfx950"])
def test_a_routed_model_split_keeps_every_contract(tiny_recipe, tmp_path, target):
    """A routed model over 2 ranks: the routed layers' experts_down signals the down site and
    reduce_experts_down sums the ranks' partials; the dense layer's down as before."""
    shutil.copy(DATA / "tiny-qwen3-moe.json", tmp_path / "tiny-qwen3-moe.json")
    recipe = _tp_recipe(tiny_recipe, config="tiny-qwen3-moe.json", bands=[1], verify=None)
    sites = {p.name: [(c.op, c.kind) for c in p.cross_rank] for p in _checked(recipe, tmp_path, target).programs
             if p.name.startswith("moe.") and p.cross_rank}
    assert sites["moe.r1t1.experts_down"] == [("experts_down", "signal")]
    assert sites["moe.r1t1.reduce_experts_down"] == [("reduce_experts_down", "wait")]


@pytest.mark.parametrize("head", ["ids", "logits", "sample"])
def test_the_reported_footprint_of_a_rank_is_what_binding_it_allocates(tiny_recipe, tmp_path, head):
    """`inspect`'s footprint of a split package is one rank's buffers: its vocabulary rows (or,
    with a logits or sampling head, its rows and the whole vocabulary it gathers), its
    cross-rank counters and its input copies (a sampling verify band's drafts' distributions over
    the whole vocabulary)."""
    from monobuild.footprint import band_footprint
    from monobuild.runtime.buffers import band_buffers, input_copies
    from monobuild.schema import takes_draft_probs

    verify = {"logits": None, "ids": {"rows": 1, "tokens": 3},
              "sample": {"rows": 1, "tokens": 3, "draft_probs": True}}[head]
    recipe = _tp_recipe(tiny_recipe, head=head, verify=verify)
    result = CliRunner().invoke(main, ["compile", str(recipe), "--out", str(tmp_path / "out"), "--jobs", "2", "-q"])
    assert result.exit_code == 0, result.output
    manifest = read_manifest(tmp_path / "out" / "tiny" / "sm_90")
    d = manifest.deployment
    blocks = -(-d.max_context // d.kv_cache.block_size)
    for step in manifest.steps:
        buffers = band_buffers(manifest, step, "cpu", rope=torch.empty(0))
        drafts = (step.band.tokens - 1, 512) if takes_draft_probs(d, step.band) else None
        own = input_copies(step.band.m, step.band.rows, blocks, "cpu", head == "sample", drafts)
        inputs = [own.tokens, own.positions, own.block_tables, own.context_lens,
                  *(t for t in (vars(own.sampling).values() if own.sampling is not None else ()) if t is not None)]
        assert band_footprint(manifest, step).total == buffers.nbytes + sum(t.numel() * t.element_size()
                                                                            for t in inputs)
        assert buffers.logits.shape[1] == (256 if head == "ids" else 512)  # a rank's rows, or the whole vocabulary
        assert buffers.tp_counters.numel() == 4 * 8


@pytest.mark.parametrize("target", ["sm_90", "gfx942", "gfx950"])
@pytest.mark.parametrize("config", ["tiny-llama.json", "tiny-qwen3-moe.json"])
def test_persistent_split_programs_keep_every_contract(tiny_recipe, tmp_path, target, config):
    """Both modes split over 2 ranks: a persistent layer program signals its o and down sites
    before its own edges out of them, and its all-reduces wait on those edges, then on the
    ranks' signals (the Triton executor: the streaming one has no cross-rank ops)."""
    shutil.copy(DATA / config, tmp_path / config)
    recipe = _tp_recipe(tiny_recipe, config=config, modes=["persistent", "staged"], bands=[1], verify=None)
    kind = "moe" if "moe" in config else "layer"
    layer = next(p for p in _checked(recipe, tmp_path, target).programs if p.name == f"{kind}.r1t1.persistent")
    down = "experts_down" if kind == "moe" else "down"
    assert [(c.op, c.kind, c.site) for c in layer.cross_rank] == [
        ("o", "signal", 1), ("reduce_o", "wait", 1), (down, "signal", 2), (f"reduce_{down}", "wait", 2)]
    assert {(s.producer, s.consumer) for s in layer.syncs} >= {("o", "reduce_o"), (down, f"reduce_{down}")}


def test_every_rank_on_one_device_runs_only_the_staged_programs(tiny_recipe, tmp_path):
    """bind_ranks of a split package's persistent mode is refused with the reason: each rank's
    persistent grid fills the device and waits for its peers' inside it (the package is never
    launched here: no GPU)."""
    from monobuild.runtime import PackageError
    from monobuild.runtime.package import Package

    recipe = _tp_recipe(tiny_recipe, modes=["persistent", "staged"], bands=[1], verify=None)
    result = CliRunner().invoke(main, ["compile", str(recipe), "--out", str(tmp_path / "out"), "--jobs", "2", "-q"])
    assert result.exit_code == 0, result.output
    path = tmp_path / "out" / "tiny" / "sm_90"
    package = Package(path, read_manifest(path), torch.device("cpu"), {})
    with pytest.raises(PackageError, match="on one device only mode 'staged' runs"):
        package.bind_ranks([{}, {}], [None, None], "persistent")


@pytest.mark.parametrize("target", ["sm_90", "gfx942", "gfx950"])
@pytest.mark.parametrize("ranks", [4, 8])
def test_four_and_eight_ranks_compile_and_keep_every_contract(tiny_recipe, tmp_path, target, ranks):
    """The wider splits on every target (a 1-row band: the programs' shapes, not the bands, are
    what the split changes); tiny-llama's 2 KV heads are replicated past 2 ranks."""
    recipe = _tp_recipe(tiny_recipe, tensor_parallel=ranks, bands=[1], verify=None)
    sites = {c.kind: c.ranks for p in _checked(recipe, tmp_path, target).programs for c in p.cross_rank}
    assert sites == {"signal": ranks, "wait": ranks}


def _ir(pkg: Path, program: str) -> Path:
    doc = json.loads((pkg / "manifest.json").read_text())
    return pkg / "ir" / f"{program}.{'ptx' if doc['target'] == 'sm_90' else 'llir'}"


def _replace_in(program: str, old: str, new: str, count: int = -1):
    def plant(pkg):
        path = _ir(pkg, program)
        text = path.read_text()
        assert old in text, (program, old)
        path.write_text(text.replace(old, new, count))
    return plant


def _drop_line(program: str, text: str):
    """Delete the first line of ``program``'s IR that holds ``text``."""
    def plant(pkg):
        path = _ir(pkg, program)
        lines = path.read_text().split("\n")
        del lines[next(k for k, line in enumerate(lines) if text in line)]
        path.write_text("\n".join(lines))
    return plant


def _no_barrier_before_signal(program: str, signal: str, store: str, barrier: str):
    """Delete the CTA barriers between ``program``'s last global store (``store``, a pattern) and
    its first signal."""
    def plant(pkg):
        path = _ir(pkg, program)
        lines = path.read_text().split("\n")
        first = next(k for k, line in enumerate(lines) if signal in line)
        last_store = max(k for k in range(first) if re.search(store, lines[k]))
        path.write_text("\n".join(line for k, line in enumerate(lines)
                                  if not (last_store < k < first and barrier in line)))
    return plant


def _peer_buffer_access(pkg: Path, program: str) -> tuple[list[str], int, str]:
    """gfx9: the LLVM IR's lines, the first buffer load through a peer's buffer and the pointer
    its buffer resource is made from."""
    from monobuild.compiler.contracts.llir import LlvmFunction
    from monobuild.compiler.contracts.plan_rules import cross_rank_params

    spec = next(p for p in read_manifest(pkg).programs if p.name == program)
    text = _ir(pkg, program).read_text()
    fn = LlvmFunction(text)
    peers = cross_rank_params(spec)[2]
    load = next(i for i in fn.instrs if "raw.ptr.buffer.load" in i.text and fn.pointer_params(i) & peers)
    rsrc = re.search(r"ptr addrspace\(8\) (%[\w.]+)", load.text).group(1)
    made = next(i for i in fn.instrs if i.result == rsrc)
    base = re.search(r"ptr addrspace\(1\) (%[\w.]+)", made.text).group(1)
    lines = text.split("\n")
    return lines, next(k for k, line in enumerate(lines) if line.strip() == load.text), base


def _scalar_peer_load(program: str):
    """gfx9: a peer's partial read through the constant address space (a scalar load)."""
    def plant(pkg):
        lines, k, base = _peer_buffer_access(pkg, program)
        result, loaded = re.match(r"\s*(%[\w.]+) = tail call (.+?) @", lines[k]).groups()
        lines[k] = (f"  %peer.constant = addrspacecast ptr addrspace(1) {base} to ptr addrspace(4)\n"
                    f"  {result} = load {loaded}, ptr addrspace(4) %peer.constant, align 4")
        _ir(pkg, program).write_text("\n".join(lines))
    return plant


def _store_into_peer(program: str):
    """gfx9: the reduction's result stored through a peer's partial instead of this rank's output."""
    def plant(pkg):
        lines, k, _ = _peer_buffer_access(pkg, program)
        rsrc = re.search(r"ptr addrspace\(8\) (%[\w.]+)", lines[k]).group(1)
        store = next(j for j, line in enumerate(lines) if "raw.ptr.buffer.store" in line)
        lines[store] = re.sub(r"ptr addrspace\(8\) %[\w.]+", f"ptr addrspace(8) {rsrc}", lines[store], count=1)
        _ir(pkg, program).write_text("\n".join(lines))
    return plant


PTX_SIGNAL, LLIR_SIGNAL = "atom.global.sys.release.add", "i64 1 release"
SPLIT_DEFECTS = [
    ("sm_90", "layer.r1t1.o", _replace_in("layer.r1t1.o", PTX_SIGNAL, "atom.global.gpu.release.add", 1),
     "X1", "a signal at gpu scope: another GPU's acquire does not see it"),
    ("sm_90", "layer.r1t1.o", _replace_in("layer.r1t1.o", PTX_SIGNAL, "atom.global.sys.relaxed.add", 1),
     "X1", "a relaxed signal"),
    ("sm_90", "layer.r1t1.o", _no_barrier_before_signal("layer.r1t1.o", PTX_SIGNAL, r"st\.global", "bar.sync"), "X1",
     "no CTA barrier before the signals"),
    ("sm_90", "layer.r1t1.down", _drop_line("layer.r1t1.down", PTX_SIGNAL), "X4", "a rank left unsignalled"),
    ("sm_90", "layer.r1t1.reduce_o", _replace_in("layer.r1t1.reduce_o", "ld.global.sys.acquire", "ld.global.sys.relaxed"),
     "X2", "relaxed polls"),
    ("sm_90", "layer.r1t1.reduce_down",
     _replace_in("layer.r1t1.reduce_down", "ld.global.sys.acquire", "ld.global.gpu.acquire"), "X2", "polls at gpu scope"),
    ("sm_90", "layer.r1t1.reduce_o", _replace_in("layer.r1t1.reduce_o", "ld.volatile.global", "ld.global"), "X3",
     "a peer's partial read through the L1"),
    ("sm_90", "head.r1t1.argmax", _replace_in("head.r1t1.argmax", "ld.volatile.global", "ld.global.nc"), "X3",
     "a peer's tile maxima read through the non-coherent path"),
    ("gfx950", "layer.r1t1.o", _replace_in("layer.r1t1.o", LLIR_SIGNAL, 'i64 1 syncscope("agent") release', 1),
     "X1", "a signal at agent scope"),
    ("gfx950", "layer.r1t1.o", _replace_in("layer.r1t1.o", LLIR_SIGNAL, "i64 1 monotonic", 1), "X1",
     "a monotonic signal"),
    ("gfx950", "layer.r1t1.o",
     _no_barrier_before_signal("layer.r1t1.o", LLIR_SIGNAL, r"store .*addrspace\(1\)|buffer\.store",
                               "@llvm.amdgcn.s.barrier"), "X1",
     "no s_barrier before the signals"),
    ("gfx950", "layer.r1t1.down", _drop_line("layer.r1t1.down", LLIR_SIGNAL), "X4", "a rank left unsignalled (gfx950)"),
    ("gfx950", "layer.r1t1.reduce_o", _replace_in("layer.r1t1.reduce_o", "i64 0 acquire", "i64 0 monotonic"), "X2",
     "monotonic polls"),
    ("gfx950", "layer.r1t1.reduce_down",
     _replace_in("layer.r1t1.reduce_down", "i64 0 acquire", 'i64 0 syncscope("agent") acquire'), "X2",
     "polls at agent scope"),
    ("gfx950", "layer.r1t1.reduce_o", _scalar_peer_load("layer.r1t1.reduce_o"), "X3",
     "a peer's partial read through the scalar cache"),
    ("gfx950", "layer.r1t1.reduce_down", _store_into_peer("layer.r1t1.reduce_down"), "X3",
     "the sum stored into a peer's partial"),
]


@pytest.mark.parametrize("target,program,plant,contract,why", SPLIT_DEFECTS, ids=[d[4] for d in SPLIT_DEFECTS])
def test_each_planted_cross_rank_defect_is_caught(split_packages, tmp_path, target, program, plant, contract, why):
    pkg = tmp_path / "pkg"
    shutil.copytree(split_packages[target], pkg)
    plant(pkg)
    rebuild_code(pkg, program)
    report = check_package(pkg)
    lines = [v.line() for v in report.violations]  # as `monobuild check` prints them
    caught = [line for v, line in zip(report.violations, lines) if v.contract == contract and v.program == program]
    assert caught, "\n".join(lines) or "no violation reported"
    assert all(v.program == program for v in report.violations), "the defect leaked into other programs' reports"


# -- the ranks' step under the interpreter --------------------------------------------------------

SPLIT_CASES = [
    ("tiny-llama.json", "fp32", 2, 1, [60, 17], 2, {}),
    # KV heads on two ranks each (4 ranks, 2 KV heads), q/k norms, a verify band
    ("tiny-qwen3.json", "bf16", 1, 3, [70], 4, {}),
    # q/k/v biases, a padding row, a vocabulary the ranks' rows pad (500 of 512)
    ("tiny-qwen2-gqa3.json", "fp32", 4, 1, [40, 0, 130, 9], 2, {"vocab_size": 500}),
    # 8 ranks of 64 vocabulary rows, the last holding 52 real ids
    ("tiny-llama.json", "fp32", 2, 1, [60, 3], 8, {"vocab_size": 500}),
    # routed layers (0 and 2; layer 1 dense): each expert's intermediate rows split, the router whole
    ("tiny-qwen3-moe.json", "fp32", 2, 1, [40, 9], 2, {}),
    ("tiny-qwen3-moe.json", "bf16", 1, 3, [50], 4, {}),
]
# persistent programs, planned for one CTA: each rank's all-reduces wait inside its layer program
# for the peers' launches, which run side by side (a thread each)
SPLIT_CASES += [(*case, "persistent") for case in (
    ("tiny-llama.json", "fp32", 2, 1, [60, 17], 2, {}),
    ("tiny-qwen3.json", "bf16", 1, 3, [70], 4, {}),
    ("tiny-qwen3-moe.json", "fp32", 2, 1, [40, 9], 2, {"vocab_size": 500}),
)]
SPLIT_CASES = [case if len(case) == 8 else (*case, "staged") for case in SPLIT_CASES]


def _interpreted(case: dict, tmp_path: Path) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(Path(__file__).parent / "parallel_worker.py"), json.dumps(case),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("config,dtype,rows,tokens,context_lens,ranks,changes,mode", SPLIT_CASES,
                         ids=[f"{c[0].split('.')[0]}-{c[1]}-r{c[2]}t{c[3]}-tp{c[5]}-{c[7]}" for c in SPLIT_CASES])
def test_the_ranks_interpreted_step_matches_the_reference(config, dtype, rows, tokens, context_lens, ranks, changes,
                                                          mode, tmp_path):
    """Every rank's programs on its shard, launch by launch across the ranks: the logits
    (the ranks' vocabulary rows side by side) within the dtype's bound of the whole model's
    float64 step, the same ids, verdict and hidden state bits on every rank, the padding rows of
    the vocabulary left out of the argmax even where they would win it, each rank's KV heads
    appended, and the cross-rank counters one count per CTA of each site's producer a step."""
    case = {"config": config, "dtype": dtype, "rows": rows, "tokens": tokens, "context_lens": context_lens,
            "ranks": ranks, "config_changes": changes, "seed": int.from_bytes(os.urandom(4), "little"), "mode": mode}
    result = _interpreted(case, tmp_path)
    assert result["unwritten_logits"] == 0, f"{case}: logits left poisoned"
    assert result["rel_err"] <= {"fp32": 1e-4, "bf16": 1e-2}[dtype], f"{case}: {result}"
    assert result["ids_same"] and result["hidden_same"] and result["padding_masked"], f"{case}: {result}"
    assert result["ids_match"] or dtype == "bf16", f"{case}: {result}"
    assert result["kv_rel_err"] <= {"fp32": 1e-6, "bf16": 2**-7}[dtype], f"{case}: {result}"
    if tokens > 1:
        assert result["verdicts_same"] and result["verdict_ok"], f"{case}: {result}"
    per_step = result["planned_signals"]  # the embedding's, o's and down's of every layer, the logits'
    assert all(per_step), per_step
    for step, counters in enumerate((result["counters_first"], result["counters_second"]), start=1):
        for rank_counters in counters:
            slots = [rank_counters[site * 8:(site + 1) * 8] for site in range(4)]
            assert slots == [[step * n] * ranks + [0] * (8 - ranks) for n in per_step], (step, slots)


@pytest.mark.parametrize("ranks,changes", [(2, {}), (4, {"vocab_size": 500})], ids=["tp2", "tp4-padded-vocab"])
def test_a_logits_head_gathers_the_whole_vocabulary_on_every_rank(tmp_path, ranks, changes):
    """``head: logits`` split over ranks: every rank's logits are the whole vocabulary's (the
    ranks' rows side by side, the padding rows left out), the same bits on every rank, within
    fp32's bound of the whole model's float64 step, none left unwritten (the buffers are poisoned)."""
    case = {"config": "tiny-llama.json", "dtype": "fp32", "rows": 2, "tokens": 1, "context_lens": [33, 70],
            "ranks": ranks, "config_changes": changes, "seed": int.from_bytes(os.urandom(4), "little"),
            "head": "logits"}
    result = _interpreted(case, tmp_path)
    assert result["shape"] == [2, changes.get("vocab_size", 512)] and result["unwritten_logits"] == 0, result
    assert result["logits_same"] and result["rel_err"] <= 1e-4, result


@pytest.mark.parametrize("dtype,rows,tokens,context_lens,ranks,changes", [
    ("fp32", 3, 1, [33, 70, 5], 2, {}),
    ("fp32", 4, 1, [33, 70, 5, 12], 4, {"vocab_size": 500}),  # the last rank's rows part padding
    ("bf16", 1, 3, [40], 2, {}),  # a verify band's token rows
], ids=["tp2", "tp4-padded-vocab", "tp2-bf16-r1t3"])
def test_a_sampling_head_draws_the_whole_vocabularys_ids_on_every_rank(tmp_path, dtype, rows, tokens, context_lens,
                                                                      ranks, changes):
    """``head: sample`` split over ranks: every rank gathers the whole vocabulary's logits and
    their tiles' parts (the draws keyed by the whole vocabulary's ids), so each token row's id is
    the float64 reference sampler's over those logits with the row's settings (greedy, over every
    id, top-k, top-p; compared where the draw is decided), the same on every rank."""
    case = {"config": "tiny-llama.json", "dtype": dtype, "rows": rows, "tokens": tokens, "context_lens": context_lens,
            "ranks": ranks, "config_changes": changes, "seed": int.from_bytes(os.urandom(4), "little"),
            "head": "sample"}
    result = _interpreted(case, tmp_path)
    assert result["logits_same"] and result["ids_same"], result
    assert result["rel_err"] <= {"fp32": 1e-4, "bf16": 1e-2}[dtype], result
    assert result["samples_decided"] >= rows * tokens - 1 and result["samples_ok"], result


def test_a_debug_build_names_the_rank_whose_signals_did_not_come(tmp_path):
    """A debug build's step on 4 ranks with rank 2's launch of o in layer 1 left out (a rank that
    fell silent): every other rank's all-reduce after o gives up on rank 2's counter once, having
    seen one layer's signals of the two, and the records say so; the step after the reset is
    whole again. Rank 2 itself waits for its own count, which its silence left a layer short, so
    it does not wait."""
    case = {"config": "tiny-llama.json", "dtype": "fp32", "rows": 1, "tokens": 1, "context_lens": [40], "ranks": 4,
            "config_changes": {}, "seed": int.from_bytes(os.urandom(4), "little"), "debug_wait_spins": 20,
            "silent": {"rank": 2, "program": "layer.r1t1.o", "layer": 1}}
    result = _interpreted(case, tmp_path)
    o, reduce_grid = result["grids"]["layer.r1t1.o"], result["grids"]["layer.r1t1.reduce_o"]
    records = result["records"]
    assert sorted((r["rank"], r["cta"]) for r in records) == [(rank, cta) for rank in (0, 1, 3)
                                                               for cta in range(reduce_grid)], records
    for r in records:
        assert (r["program"], r["counter"], r["target"], r["seen"]) == ("layer.r1t1.reduce_o", 1 * 8 + 2, 2 * o, o)
        assert r["line"].startswith(f"rank {r['rank']}: layer.r1t1.reduce_o: CTA {r['cta']} gave up waiting on "
                                    f"counter 10 (o→reduce_o, rank 2's signals) for {2 * o}, last saw {o}"), r["line"]
    assert result["reset"] == [0, 0, 0, 0]
    assert result["ids_same_after"] and result["ids_after"] == result["ids_ref"]


def test_binding_one_rank_a_process_needs_the_ranks_process_group(split_packages, tmp_path):
    """``bind`` of a split package binds one rank in this process through the ranks' process group:
    without torch.distributed initialised, or in a group of another size, it is refused with the
    reason, before anything is allocated (the package is never launched here: no GPU)."""
    import torch.distributed as dist

    from monobuild.runtime import PackageError
    from monobuild.runtime.package import Package

    package = Package(split_packages["sm_90"], read_manifest(split_packages["sm_90"]), torch.device("cpu"), {})
    with pytest.raises(PackageError, match="binds one rank a process through the ranks' process group"):
        package.bind({}, None)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with pytest.raises(PackageError, match="a package of 2 tensor-parallel ranks, bound in a process group of 1"):
            package.bind({}, None)
    finally:
        dist.destroy_process_group()


def test_a_rank_that_cannot_bind_is_refused_on_every_rank(split_packages, tmp_path):
    """Two processes bind the two ranks (a gloo group, on the CPU: the refusal comes before any
    buffer is shared); rank 1's shard lacks a tensor. Both raise the same PackageError naming
    rank 1 and its reason, so rank 0 does not wait in the exchange for a peer that left."""
    root = Path(__file__).resolve().parent.parent
    procs = [subprocess.Popen([sys.executable, "-m", "tests.agree_worker", str(split_packages["sm_90"]), str(rank),
                               str(tmp_path / "store")], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for rank in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    raised = {r["rank"]: r["raised"] for r in results}
    assert raised[0] == raised[1], raised
    assert raised[0].startswith("PackageError: binding the ranks was refused: rank 1: WeightError: "), raised[0]
    assert "model.layers.1.mlp.down_proj.weight" in raised[0] and "rank 0" not in raised[0]


def test_the_parallel_bench_needs_a_gpu_a_rank(split_packages):
    """``tools/parallel_bench.py`` (the two-GPU targets' command) says what it lacks on a machine
    without the GPUs, exit code 2, before it loads anything."""
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, str(root / "tools" / "parallel_bench.py"), "--split",
                           str(split_packages["sm_90"]), "--whole", str(split_packages["sm_90"])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "2 ranks, 0 GPUs visible" in proc.stderr, proc.stderr
