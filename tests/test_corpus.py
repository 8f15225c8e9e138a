"""The corpus of published configs (tests/data/configs/, written from each model's config.json as
published; a ``-fp8`` one is its model's config with the ``quantization_config`` that the Qwen3
FP8 checkpoints publish, recipes/configs/qwen3-8b-fp8.json's): every model of the served
families, the routed ones (Qwen3-MoE, Mixtral) and FP8 checkpoints among them, plans for sm_90
at 1 and 8 rows and a 1 × 6 verify band, or is refused with the reason a feature the programs do
not have yet."""

import json
from pathlib import Path

import pytest
import yaml

from monobuild.compiler.errors import InputError, Refusal
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe

CONFIGS = sorted((Path(__file__).parent / "data" / "configs").glob("*.json"))
# model → the reason it is refused, while a feature it needs is not served (none now)
NOT_YET: dict[str, str] = {}


def test_the_corpus_covers_the_families():
    families = {json.loads(c.read_text())["model_type"] for c in CONFIGS}
    assert families == {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral"} and len(CONFIGS) >= 24


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_each_published_config_plans(config, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "config": str(config), "target": "sm_90", "sm_count": 132, "dtype": "bf16",
        "kv_cache": {"dtype": "bf16", "block_size": 16}, "bands": [1, 8], "verify": {"rows": 1, "tokens": 6},
        "max_context": 4096, "head": "ids"}))
    if config.stem in NOT_YET:
        with pytest.raises((InputError, Refusal), match=NOT_YET[config.stem]):
            load_recipe(recipe)
        return
    plan = plan_recipe(load_recipe(recipe))
    g, quant = plan.recipe.geometry, plan.recipe.deployment.quant
    if config.stem == "mistral-7b-v0.1":  # its 4096-position window, every layer
        assert g.sliding_window == 4096
    assert (quant is not None) == config.stem.endswith("-fp8")

    def stored(rows: int, cols: int) -> int:
        """A projection's bytes as the checkpoint stores it: bf16, or E4M3 and its block scales."""
        if quant is None:
            return rows * cols * 2
        srows, scols = quant.scale_shape(rows, cols)
        return rows * cols + srows * scols * 4

    h, d, inter = g.hidden, g.head_dim, g.intermediate
    attention = [(g.q_heads * d, h), (g.kv_heads * d, h), (g.kv_heads * d, h), (h, g.q_heads * d)]
    mlp = [(inter, h), (inter, h), (h, inter)]
    rest = (g.layer_weight_elems - sum(r * c for r, c in attention + mlp)) * 2  # norms and biases, bf16
    for p in plan.programs:
        if p.kind == "layer" and p.mode == "persistent":  # every weight of a layer, read once
            assert sum(s.weight_bytes for s in p.stages) == rest + sum(stored(*x) for x in attention + mlp), p.name
        if p.kind == "moe" and p.mode == "persistent":  # the same, its MLP the router and each chosen expert
            e = g.experts
            weights = rest + sum(stored(*x) for x in attention) + e.count * h * 2
            assert sum(s.weight_bytes for s in p.stages) == weights, p.name
            experts = stored(2 * e.intermediate, h) + stored(h, e.intermediate)
            assert sum(s.bytes_per_expert for s in p.stages) == experts, p.name


def test_todays_sample_compiles_and_checks_on_every_target():
    """CI's rotating sample (tools/corpus.py --sample, one config of the corpus a day): compiled
    for sm_90, gfx942 and gfx950 through the CLI, and every contract holds; a config whose
    feature is not served yet is refused with that reason instead."""
    import datetime
    import subprocess
    import sys

    from .conftest import REPO

    sys.path.insert(0, str(REPO / "tools"))
    import corpus

    model = corpus.sample_of_the_day(sorted(c.stem for c in CONFIGS), datetime.date.today())
    done = subprocess.run([sys.executable, str(REPO / "tools" / "corpus.py"), "--models", model], capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith(f"| {model} |")]
    assert sorted(r[1] for r in rows) == ["gfx942", "gfx950", "sm_90"], done.stdout
    want = "refused" if model in NOT_YET else "holds"
    assert all(r[3] == want for r in rows), done.stdout
