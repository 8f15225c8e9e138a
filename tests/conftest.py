import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes"
DATA = Path(__file__).parent / "data"


@pytest.fixture
def tiny_recipe(tmp_path):
    """A tiny sm_90 recipe (and its config) in a temporary directory; returns a writer for variants."""
    shutil.copy(DATA / "tiny-llama.json", tmp_path / "tiny-llama.json")

    def write(name="tiny.yaml", **overrides):
        doc = {"config": "tiny-llama.json", "target": "sm_90", "sm_count": 4, "dtype": "bf16",
               "kv_cache": {"dtype": "bf16", "block_size": 16}, "bands": [1, 2], "max_context": 256,
               "head": "ids", "modes": ["persistent", "staged"]}
        doc.update(overrides)
        import yaml

        path = tmp_path / name
        path.write_text(yaml.safe_dump(doc))
        return path

    return write
