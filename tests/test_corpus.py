"""The corpus of published configs (tests/data/configs/, written from each model's config.json as
published): every model of the served families plans for sm_90 at 1 and 8 rows and a 1 × 6 verify
band, or is refused with the reason a feature the programs do not have yet."""

import json
from pathlib import Path

import pytest
import yaml

from monobuild.compiler.errors import InputError
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe

CONFIGS = sorted((Path(__file__).parent / "data" / "configs").glob("*.json"))
NOT_YET = {"mistral-7b-v0.1": "sliding_window: sliding-window attention is not served"}  # issue 21


def test_the_corpus_covers_the_families():
    families = {json.loads(c.read_text())["model_type"] for c in CONFIGS}
    assert families == {"llama", "mistral", "qwen2", "qwen3"} and len(CONFIGS) >= 20


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_each_published_config_plans(config, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "config": str(config), "target": "sm_90", "sm_count": 132, "dtype": "bf16",
        "kv_cache": {"dtype": "bf16", "block_size": 16}, "bands": [1, 8], "verify": {"rows": 1, "tokens": 6},
        "max_context": 4096, "head": "ids"}))
    if config.stem in NOT_YET:
        with pytest.raises(InputError, match=NOT_YET[config.stem]):
            load_recipe(recipe)
        return
    plan = plan_recipe(load_recipe(recipe))
    g = plan.recipe.geometry
    for p in plan.programs:
        if p.kind == "layer" and p.mode == "persistent":
            weights = sum(s.weight_bytes for s in p.stages)
            assert weights == g.layer_weight_elems * 2, p.name  # every weight of a layer, read once
