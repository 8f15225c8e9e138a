import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

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


TINY_RECIPE = ("config: tiny-llama.json\ntarget: sm_90\nsm_count: 4\ndtype: bf16\n"
               "kv_cache: {dtype: bf16, block_size: 16}\nbands: [1, 2]\nmax_context: 256\nhead: ids\n")


def compile_tiny(root: Path, *options: str, config: str = "tiny-llama.json") -> tuple[Path, Path]:
    """Compile the tiny Llama recipe (4 SMs, bands 1 and 2, both modes; its geometry from
    ``config`` in tests/data) under ``root`` with extra ``monobuild compile`` options; returns
    (recipe, package directory)."""
    from monobuild.cli.main import main

    shutil.copy(DATA / config, root / config)
    recipe = root / "tiny.yaml"
    recipe.write_text(TINY_RECIPE.replace("tiny-llama.json", config))
    result = CliRunner().invoke(main, ["compile", str(recipe), "--out", str(root / "out"), "--cache",
                                       str(root / "cache"), "--jobs", "2", *options])
    assert result.exit_code == 0, result.output
    target = options[options.index("--target") + 1] if "--target" in options else "sm_90"
    name = "tiny" + ("-debug" if "--debug-wait-spins" in options else "") + ("-clock" if "--stage-clock" in options else "")
    return recipe, root / "out" / name / target


def write_code(pkg: Path, program: str, binary: bytes) -> None:
    """``binary`` as ``program``'s code object in the package at ``pkg``, the manifest's sha256 made
    to match (what whoever can write the binary can also do)."""
    import hashlib
    import json

    doc = json.loads((pkg / "manifest.json").read_text())
    spec = next(p for p in doc["programs"] if p["name"] == program)
    (pkg / spec["code"]).write_bytes(binary)
    spec["code_sha256"] = hashlib.sha256(binary).hexdigest()
    (pkg / "manifest.json").write_text(json.dumps(doc))


def rebuild_code(pkg: Path, program: str) -> None:
    """``program``'s code object built again from its (planted) IR, as the compiler would have
    built it (``code_from_ir``; on gfx9 the AMDGCN written beside it too, and the fingerprint of
    the LLVM IR recorded): a defect planted in the IR then ships in a consistent package."""
    import hashlib
    import json

    from monobuild.compiler.targets import TARGETS
    from monobuild.compiler.toolchain import CHECKED_IR, code_from_ir

    doc = json.loads((pkg / "manifest.json").read_text())
    target = TARGETS[doc["target"]]
    spec = next(p for p in doc["programs"] if p["name"] == program)
    binary, amdgcn = code_from_ir((pkg / spec["ir"][CHECKED_IR[target.backend]]).read_text(), target)
    if amdgcn is not None:
        (pkg / spec["ir"]["amdgcn"]).write_text(amdgcn)
    spec["fingerprint"] = hashlib.sha256((pkg / spec["ir"]["llir"]).read_text().encode()).hexdigest()
    (pkg / "manifest.json").write_text(json.dumps(doc))
    write_code(pkg, program, binary)
