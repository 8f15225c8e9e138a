"""Hostile and careless inputs through `monobuild plan`: each is planned or refused with one line
naming the file (exit 2), never a traceback, a hang or a wrong meaning.

The named cases are the classes of issue 23; ``test_mutated_inputs_plan_or_fail_in_one_line`` is a
seeded, CI-sized fuzz over every field of the recipe and the config (``FUZZ_CASES`` of them;
``MONOBUILD_FUZZ_CASES=N`` runs more, ``MONOBUILD_FUZZ_SEED`` others), and
``test_mutated_manifests_are_refused_or_caught`` one over every field, at any depth, of a compiled
package's manifest through the runtime's reader, ``inspect`` and ``check``
(``MONOBUILD_MANIFEST_CASES``).
"""

from __future__ import annotations

import json
import os
import random
import shutil

import pytest
import yaml
from click.testing import CliRunner

from monobuild.cli.main import main

from .conftest import DATA

FUZZ_CASES = int(os.environ.get("MONOBUILD_FUZZ_CASES", "200"))
MANIFEST_CASES = int(os.environ.get("MONOBUILD_MANIFEST_CASES", "40"))
HOSTILE = [None, -1, 0, 1, 2**31, 2**70, 1e308, float("nan"), float("inf"), -0.5, "", "x" * 5000, "false", "true",
           True, False, [], [1, 2], {"a": 1}, [[[[[1]]]]], "../../etc", "\u00e9\u0000"]


def _plan(path):
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}")
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("monobuild: error: "), result.output
        assert len(lines[0]) < 1000, "an error line must stay short whatever the value"
    return result


def _config(tmp_path, **edits):
    cfg = json.loads((DATA / "tiny-llama.json").read_text())
    cfg.update(edits)
    (tmp_path / "tiny-llama.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("edits,field", [
    ({"rms_norm_eps": float("nan")}, "rms_norm_eps"),
    ({"rms_norm_eps": float("inf")}, "rms_norm_eps"),
    ({"rope_theta": float("inf")}, "rope_theta"),
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings"),
    ({"num_hidden_layers": 10**7}, "num_hidden_layers"),
    ({"vocab_size": 10**12}, "vocab_size"),
    ({"hidden_size": 2**31}, "hidden_size"),
    ({"hidden_size": 65536, "intermediate_size": 65536}, "intermediate_size"),
    ({"head_dim": None, "hidden_size": 64, "num_attention_heads": 128, "num_key_value_heads": 128}, "head_dim"),
    ({"head_dim": 72}, "head_dim"),  # not a multiple of 16
    ({"model_type": "mistral", "sliding_window": -4}, "sliding_window"),
    ({"model_type": "mistral", "sliding_window": "4096"}, "sliding_window"),
    ({"model_type": "mistral", "sliding_window": 64, "layer_types": ["sliding_attention", "full_attention"]},
     "layer_types"),
    ({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 64, "max_window_layers": 1},
     "max_window_layers"),
])
def test_config_values_that_would_mean_something_else_are_refused(tiny_recipe, tmp_path, edits, field):
    recipe = tiny_recipe()
    _config(tmp_path, **edits)
    result = _plan(recipe)
    assert result.exit_code == 2 and f"tiny-llama.json: {field}" in result.output


def test_llama3_rope_factors_must_be_finite(tiny_recipe, tmp_path):
    cfg = json.loads((DATA / "tiny-llama.json").read_text())
    cfg["rope_scaling"] = dict(cfg["rope_scaling"], factor=float("nan"))
    (tmp_path / "tiny-llama.json").write_text(json.dumps(cfg))
    result = _plan(tiny_recipe())
    assert result.exit_code == 2 and "rope_scaling.factor: must be finite" in result.output


@pytest.mark.parametrize("overrides,field", [
    ({"max_context": 10**12}, "max_context"),
    ({"sm_count": 10**9}, "sm_count"),
    ({"debug_wait_spins": 2**40}, "debug_wait_spins"),
    ({"bands": list(range(1, 40))}, "bands"),
    ({"target": ["sm_90"]}, "target"),
    ({"config": "a/" * 3000 + "x.json"}, "config"),
])
def test_recipe_values_past_what_can_be_built_are_refused(tiny_recipe, overrides, field):
    result = _plan(tiny_recipe(**overrides))
    assert result.exit_code == 2 and f": {field}" in result.output


def test_a_recipe_named_dots_cannot_write_outside_out(tiny_recipe, tmp_path):
    """The package directory is the recipe's stem: `...yaml` would name `..`."""
    recipe = tiny_recipe(name="...yaml")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compile", str(recipe), "--out", str(out)])
    assert result.exit_code == 2 and "package's directory name" in result.output
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["...yaml", "tiny-llama.json"]


def test_files_that_are_not_readable_text_are_refused(tiny_recipe, tmp_path):
    recipe = tiny_recipe()
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"config: \xff\xfe\n")
    assert "not UTF-8" in _plan(binary).output
    assert "is a directory" in _plan(tmp_path).output
    if os.path.exists("/dev/zero"):  # read whole, it would never end
        assert "not a regular file" in _plan("/dev/zero").output
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert _plan(deep).exit_code == 2
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    assert "config" in _plan(tiny_recipe(name="loop.yaml", config="loop.json")).output
    assert _plan(recipe).exit_code == 0


def test_an_alias_bomb_is_not_expanded_into_the_error(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    bomb.write_text("\n".join(lines) + "\nconfig: tiny-llama.json\ntarget: *a8\n")
    shutil.copy(DATA / "tiny-llama.json", tmp_path / "tiny-llama.json")
    result = _plan(bomb)
    assert result.exit_code == 2


@pytest.fixture(scope="module")
def tiny_package(tmp_path_factory):
    from .conftest import compile_tiny

    return compile_tiny(tmp_path_factory.mktemp("tamper"))[1]


def _mutate(doc: dict, rng: random.Random) -> None:
    """Replace one (possibly nested) field of ``doc`` with a hostile value, or drop it."""
    keys = [(doc, k) for k in doc]
    keys += [(v, k) for v in doc.values() if isinstance(v, dict) for k in v]
    where, key = rng.choice(keys)
    if rng.random() < 0.1:
        del where[key]
    else:
        where[key] = rng.choice(HOSTILE)


def test_mutated_inputs_plan_or_fail_in_one_line(tiny_recipe, tmp_path):
    rng = random.Random(int(os.environ.get("MONOBUILD_FUZZ_SEED", "23")))
    base_cfg = json.loads((DATA / "tiny-llama.json").read_text())
    base_recipe = yaml.safe_load(tiny_recipe().read_text())
    refused = 0
    for case in range(FUZZ_CASES):
        cfg, recipe = json.loads(json.dumps(base_cfg)), json.loads(json.dumps(base_recipe))
        _mutate(cfg if case % 2 else recipe, rng)
        (tmp_path / "tiny-llama.json").write_text(json.dumps(cfg))
        path = tmp_path / "tiny.yaml"
        path.write_text(yaml.safe_dump(recipe))
        result = _plan(path)
        refused += result.exit_code == 2
    assert refused > FUZZ_CASES // 2  # nearly every hostile value is refused; some (e.g. an unused key) are not


@pytest.mark.parametrize("edit,why", [
    (lambda d: d["programs"][0].__setitem__("code", "../../outside.cubin"), "not a path inside the package"),
    (lambda d: d["programs"][0]["ir"].__setitem__("ptx", "/etc/passwd"), "not a path inside the package"),
    (lambda d: d.__setitem__("format", True), "manifest format"),
    (lambda d: d["programs"][0].__setitem__("ir", ["ptx"]), "malformed field"),
    (lambda d: d.__setitem__("programs", {"x": 1}), "malformed field"),
])
def test_a_tampered_manifest_is_one_line_not_a_traceback(tiny_package, tmp_path, edit, why):
    """inspect (and check, and load, which read the same manifest) refuse it with the reason."""
    package = tmp_path / "pkg"
    shutil.copytree(tiny_package, package)
    manifest = package / "manifest.json"
    doc = json.loads(manifest.read_text())
    edit(doc)
    manifest.write_text(json.dumps(doc))
    for command in ("inspect", "check"):
        result = CliRunner().invoke(main, [command, str(package)])
        assert result.exit_code == 2 and why in result.output, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_stale_or_tampered_code_object_is_refused_by_the_runtime_reader(tiny_package, tmp_path):
    """The manifest records each code object's sha256; runtime.load reads them through read_code."""
    from monobuild.manifest import PackageError, read_code, read_manifest

    package = tmp_path / "pkg"
    shutil.copytree(tiny_package, package)
    p = read_manifest(package).programs[0]
    assert read_code(package, p)
    (package / p.code).write_bytes((package / p.code).read_bytes()[:-1])
    with pytest.raises(PackageError, match="not the code object the package was built with"):
        read_code(package, p)


@pytest.mark.parametrize("table", ["directory", "binary", "missing"])
def test_a_schedule_table_that_is_not_a_readable_file_is_one_line(tiny_recipe, tmp_path, table):
    path = tmp_path / "table.yaml"
    if table == "directory":
        path.mkdir()
    elif table == "binary":
        path.write_bytes(b"defaults: \xff\xfe\n")
    result = CliRunner().invoke(main, ["compile", str(tiny_recipe()), "--out", str(tmp_path / "out"),
                                       "--schedule", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"monobuild: error: {path}"), result.output
    assert not (tmp_path / "out").exists()


def _json_paths(node, prefix=()):
    """Every field of a JSON document, at any depth: dict keys and list positions."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from _json_paths(value, (*prefix, key))


def test_mutated_manifests_are_refused_or_caught(tiny_package, tmp_path):
    """One field of the manifest, anywhere in it, replaced by a hostile value or dropped: the
    runtime's reader refuses it (PackageError) or reads it; ``inspect`` exits 0 or 2 and ``check``
    0, 1 (a violation) or 2 (one line), never with a traceback; and where ``check`` vouches for
    the package (exit 0), the runtime reads exactly what it read before the mutation (labels
    aside): nothing is accepted with another meaning."""
    import dataclasses

    from monobuild.manifest import PackageError, read_manifest

    def what_runs(package):
        return dataclasses.replace(read_manifest(package), recipe="", toolchain=())

    rng = random.Random(int(os.environ.get("MONOBUILD_FUZZ_SEED", "23")))
    base = json.loads((tiny_package / "manifest.json").read_text())
    before = what_runs(tiny_package)
    paths = list(_json_paths(base))
    outcomes = {"refused by the reader": 0, "a violation": 0, "vouched for, unchanged": 0}
    for _ in range(MANIFEST_CASES):
        doc = json.loads(json.dumps(base))
        path = rng.choice(paths)
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if rng.random() < 0.15:
            del parent[path[-1]]
        else:
            parent[path[-1]] = rng.choice(HOSTILE)
        package = tmp_path / "pkg"
        shutil.rmtree(package, ignore_errors=True)
        shutil.copytree(tiny_package, package)
        (package / "manifest.json").write_text(json.dumps(doc))
        try:
            read_manifest(package)
            readable = True
        except PackageError:
            readable = False
        codes = {}
        for command in ("inspect", "check"):
            result = CliRunner().invoke(main, [command, str(package)])
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                f"{'.'.join(map(str, path))}: {command}: {type(result.exception).__name__}: {result.exception}")
            if result.exit_code == 2:
                lines = result.output.strip().splitlines()
                assert len(lines) == 1 and lines[0].startswith("monobuild: error: "), result.output
            codes[command] = result.exit_code
        assert codes["inspect"] in (0, 2) and codes["check"] in (0, 1, 2), (path, codes)
        assert readable == (codes["inspect"] == 0), (path, codes, readable)
        if codes["check"] == 0:
            assert what_runs(package) == before, f"{'.'.join(map(str, path))}: accepted with another meaning"
        outcomes["refused by the reader" if not readable else
                 "a violation" if codes["check"] else "vouched for, unchanged"] += 1
    print(f"{MANIFEST_CASES} mutated manifests:", ", ".join(f"{n} {what}" for what, n in outcomes.items()))
    assert outcomes["refused by the reader"] and outcomes["a violation"], outcomes


def test_a_verify_band_past_an_attention_tasks_query_rows_is_refused(tiny_recipe, tmp_path):
    """A GQA group of 32 × 6 verify tokens is 192 query rows, past the 128 an attention task holds."""
    _config(tmp_path, num_attention_heads=32, num_key_value_heads=1, head_dim=32)
    result = _plan(tiny_recipe(verify={"rows": 1, "tokens": 6}))
    assert result.exit_code == 2 and "exceeds 128 query rows" in result.output
