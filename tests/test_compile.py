"""The compile pipeline end to end on CPU: code objects, manifest, cache, determinism, the CLI."""

import contextlib
import dataclasses
import json
import os

import pytest
from click.testing import CliRunner

from monobuild.cli.main import main
from monobuild.compiler import toolchain
from monobuild.compiler.cache import CodeCache, cache_key
from monobuild.compiler.emit import emit, emitter_digest
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe
from monobuild.compiler.targets import TARGETS

ELF = b"\x7fELF"
EM_CUDA, EM_AMDGPU = 190, 224


def _compile(args, expect=0):
    result = CliRunner().invoke(main, ["compile", *map(str, args)])
    assert result.exit_code == expect, result.output
    return result


@pytest.fixture(scope="module")
def tiny_packages(tmp_path_factory):
    """The tiny recipe compiled for sm_90 and gfx950, twice, from two fresh caches."""
    from .conftest import DATA

    root = tmp_path_factory.mktemp("pkg")
    (root / "tiny-llama.json").write_text((DATA / "tiny-llama.json").read_text())
    recipe = root / "tiny.yaml"
    recipe.write_text("config: tiny-llama.json\ntarget: sm_90\nsm_count: 4\ndtype: bf16\n"
                      "kv_cache: {dtype: bf16, block_size: 16}\nbands: [2]\nmax_context: 256\nhead: ids\n")
    out = {}
    for target in ("sm_90", "gfx950"):
        for run in ("a", "b"):
            _compile([recipe, "--out", root / f"out-{run}", "--cache", root / f"cache-{run}", "--target", target,
                      "--sm-count", 4, "--jobs", "2"])
        out[target] = (root / "out-a" / "tiny" / target, root / "out-b" / "tiny" / target)
    return recipe, root, out


@pytest.mark.parametrize("target,machine", [("sm_90", EM_CUDA), ("gfx950", EM_AMDGPU)])
def test_code_objects_are_elf_for_the_target(tiny_packages, target, machine):
    package = tiny_packages[2][target][0]
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["target"] == target and manifest["programs"]
    for program in manifest["programs"]:
        blob = (package / program["code"]).read_bytes()
        assert blob[:4] == ELF and int.from_bytes(blob[18:20], "little") == machine, program["name"]
        assert program["args"] and program["grid"] >= 1 and program["block"] == 4 * (32 if target == "sm_90" else 64)
        assert program["resources"]["registers"] > 0 and len(program["fingerprint"]) == 64
    persistent = [p for p in manifest["programs"] if p["name"] == "layer.r2t1.persistent"][0]
    pdl = target == "sm_90"
    assert persistent["launch"] == {"pdl": pdl, "cooperative": True, "pdl_wait": pdl}
    # sm_90's table makes the RMSNorms stages of their own (norm_stages); gfx950's does not
    norms = target == "sm_90"
    stages = ["qkv", "attn", "combine", "o", "up", "down"]
    if norms:
        stages = ["norm_qkv", *stages[:4], "norm_up", *stages[4:]]
    assert [s["name"] for s in persistent["stages"]] == stages
    assert len(persistent["syncs"]) == len(stages) - 1
    step = [s for s in manifest["steps"] if s["mode"] == "persistent"][0]
    assert [x["layer"] for x in step["launches"]] == [None, 0, 1, None]


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_packages_are_byte_identical(tiny_packages, target):
    a, b = tiny_packages[2][target]
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files_a == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files_a:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_warm_compile_is_all_cache_hits(tiny_packages, monkeypatch):
    recipe, root, _ = tiny_packages

    def refuse(*args, **kwargs):
        raise AssertionError("compiled despite a warm cache")

    monkeypatch.setattr(toolchain, "compile_program", refuse)
    monkeypatch.setattr("monobuild.compiler.build.compile_program", refuse)
    result = _compile([recipe, "--out", root / "out-warm", "--cache", root / "cache-a"])
    assert "0 compiled" in result.output


def test_cache_key_changes_with_what_changes_code(tiny_recipe):
    recipe = load_recipe(tiny_recipe())
    program = emit(plan_recipe(recipe).programs[1])
    digest = emitter_digest()
    base = cache_key(program, TARGETS["sm_90"], digest)
    assert base == cache_key(program, TARGETS["sm_90"], digest)
    assert base != cache_key(program, TARGETS["gfx950"], digest)
    assert base != cache_key(program, TARGETS["sm_90"], "other-emitter")
    from dataclasses import replace

    assert base == cache_key(replace(program, name="renamed"), TARGETS["sm_90"], digest)  # names are not code
    for changed in (replace(program, num_warps=8), replace(program, source=program.source + "\n"),
                    replace(program, launch_pdl=not program.launch_pdl)):
        assert cache_key(changed, TARGETS["sm_90"], digest) != base


def test_inspect_lists_resources(tiny_packages):
    package = tiny_packages[2]["sm_90"][0]
    result = CliRunner().invoke(main, ["inspect", str(package)])
    assert result.exit_code == 0 and "layer.r2t1.persistent" in result.output
    assert "serves: head ids; bands r2t1; modes persistent, staged; bf16 weights; bf16 KV cache in pages of " \
           "16; context up to 256" in result.output
    data = json.loads(CliRunner().invoke(main, ["inspect", str(package), "--json"]).output)
    assert all(p["fits"] for p in data["programs"])
    assert data["deployment"]["head"] == "ids" and data["deployment"]["draft_probs"] is False


def test_plan_command(tiny_recipe):
    result = CliRunner().invoke(main, ["plan", str(tiny_recipe())])
    assert result.exit_code == 0 and "sync   #6 up → down" in result.output and "roofline" in result.output
    data = json.loads(CliRunner().invoke(main, ["plan", str(tiny_recipe()), "--json"]).output)
    assert {s["mode"] for s in data["steps"]} == {"persistent", "staged"}


def test_plan_takes_a_schedule_table_as_compile_does(tiny_recipe, tmp_path):
    """``plan --schedule`` plans with the given table (its header names it; here one that stages
    the norms of 2-row layers apart), and a missing table is one line naming it, exit 2."""
    from importlib import resources

    import yaml

    doc = yaml.safe_load((resources.files("monobuild.schedules") / "sm_90.yaml").read_text())
    doc["entries"].insert(0, {"match": {"kind": "layer", "rows": 2}, "set": {"norm_stages": 0}})
    table = tmp_path / "table.yaml"
    table.write_text(yaml.safe_dump(doc))
    shipped = CliRunner().invoke(main, ["plan", str(tiny_recipe())]).output
    staged = CliRunner().invoke(main, ["plan", str(tiny_recipe()), "--schedule", str(table)])
    assert staged.exit_code == 0 and f"schedule {table}" in staged.output and str(table) not in shipped
    assert staged.output.count("norm_qkv") < shipped.count("norm_qkv")
    missing = CliRunner().invoke(main, ["plan", str(tiny_recipe()), "--schedule", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2 and "none.yaml" in missing.output and len(missing.output.strip().splitlines()) == 1


@pytest.mark.parametrize("bad", [{"target": "sm_80"}, {"config": "nope.json"}, {"bands": [32]}])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tiny_recipe, tmp_path, bad):
    good = tiny_recipe("good.yaml")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compile", str(good), str(tiny_recipe(**bad)), "--out", str(out),
                                       "--cache", str(tmp_path / "c")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "tiny.yaml" in result.output
    assert "Traceback" not in result.output and not out.exists()


def test_missing_package_exits_2(tmp_path):
    result = CliRunner().invoke(main, ["inspect", str(tmp_path)])
    assert result.exit_code == 2 and "manifest.json" in result.output


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    from monobuild.compiler.env import CACHE_ENV, default_cache_dir

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cc"))
    assert default_cache_dir() == tmp_path / "cc"
    monkeypatch.delenv(CACHE_ENV)
    assert default_cache_dir().name == "monobuild" and os.fspath(default_cache_dir())


def test_a_grid_that_cannot_be_coresident_gets_a_derived_schedule(tiny_recipe, tmp_path):
    """The planner sizes persistent grids from the schedule; where the compiled code cannot hold
    that many CTAs per SM, the compiler derives a schedule that fits (compiler/fallback.py),
    records it, and never writes the unservable one."""
    import dataclasses

    from monobuild.compiler.build import build
    from monobuild.compiler.schedule import load_schedule
    from monobuild.manifest import read_manifest

    greedy = load_schedule("sm_90")
    greedy = dataclasses.replace(greedy, defaults=dataclasses.replace(greedy.defaults, ctas_per_sm=64))
    recipe = load_recipe(tiny_recipe(bands=[1], modes=["persistent"]))
    result = build(recipe, tmp_path / "out", tmp_path / "cache", schedule=greedy)
    assert any(n.startswith("layer r1t1: derived") and "one CTA per SM" in n and "fits" in n for n in result.derived)
    manifest = read_manifest(result.package)
    layer = next(p for p in manifest.programs if p.name == "layer.r1t1.persistent")
    assert layer.grid == 4 and layer.resources.ctas_per_unit >= 1
    assert "derived" in json.loads((result.package / "manifest.json").read_text())["schedule"]["source"]


def _with_fake_stack(monkeypatch, when):
    """Code objects of layer.r2t1.persistent report a stack frame where ``when(code)`` holds, from
    the cache and from the compiler alike."""
    import dataclasses

    from monobuild.compiler import build as build_module

    def fake(code):
        if code is not None and code.program == "layer.r2t1.persistent" and when(code):
            return dataclasses.replace(code, resources=dataclasses.replace(code.resources, stack_bytes=24))
        return code

    real_get, real_compile = build_module.CodeCache.get, build_module._compile_one
    monkeypatch.setattr(build_module.CodeCache, "get", lambda self, key, name: fake(real_get(self, key, name)))
    monkeypatch.setattr(build_module, "_compile_one", lambda item: fake(real_compile(item)))
    return fake


def test_a_stack_frame_gets_a_derived_schedule_or_a_refusal(tiny_packages, tmp_path, monkeypatch):
    """A persistent program that keeps state in local memory even at the full register budget
    breaks C3: the compiler climbs its ladder of derived schedules for that program and band
    (here the frame goes at 8 warps a CTA); where every rung keeps it, the build is refused before
    a package is written (so a tune cannot write it into a table). A profiling build is exempt:
    its clock stores may need the frame."""
    from monobuild.compiler import build as build_module
    from monobuild.compiler.errors import Refusal
    from monobuild.compiler.plan import plan_recipe as plan_of

    recipe_path, root, _ = tiny_packages
    recipe = load_recipe(recipe_path)
    _with_fake_stack(monkeypatch, lambda code: code.num_warps == 4)
    result = build_module.build(recipe, tmp_path / "derived", root / "cache-a")
    assert result.derived and result.derived[0].startswith("layer r2t1: derived") and "8 warps" in result.derived[0]
    assert "keeps 24 B a thread in local memory" in result.derived[0]

    fake = _with_fake_stack(monkeypatch, lambda code: True)
    with pytest.raises(Refusal, match=r"layer.r2t1.persistent: the compiled persistent program keeps 24 B a thread "
                                      r"in local memory at \d+ registers .*contract C3.*every schedule the compiler"):
        build_module.build(recipe, tmp_path / "out", root / "cache-a")
    assert not (tmp_path / "out").exists()

    profiling = dataclasses.replace(recipe, deployment=dataclasses.replace(recipe.deployment, stage_clock=True))
    plan = plan_of(recipe)
    cache = build_module.CodeCache(root / "cache-a")
    digest = build_module.emitter_digest()
    codes = {p.name: fake(cache.get(build_module.cache_key(build_module.emit(p), recipe.deployment.target, digest),
                                    p.name)) for p in plan.programs}
    assert codes["layer.r2t1.persistent"].resources.stack_bytes == 24
    build_module._refuse_unservable(profiling, plan, codes)  # no exception


def test_compile_and_check_need_no_torch(tiny_packages, tmp_path):
    """An image build has the compiler and no torch: with torch unimportable, compile (through the
    cache) and check run, and nothing imports the runtime's torch side."""
    import subprocess
    import sys
    import textwrap

    recipe, root, _ = tiny_packages
    script = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError(f"{{name}} is blocked")
        sys.meta_path.insert(0, Block())
        from monobuild.cli.main import main
        for argv in (["compile", {str(recipe)!r}, "--out", {str(tmp_path)!r}, "--cache", {str(root / "cache-a")!r}],
                     ["check", {str(tmp_path / "tiny" / "sm_90")!r}]):
            try:
                main(argv, standalone_mode=False)
            except SystemExit as e:
                assert not e.code, e.code
        assert "torch" not in sys.modules and "monobuild.runtime" not in sys.modules
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "from cache" in out.stdout + out.stderr and "every contract holds" in out.stdout


def test_another_target_needs_its_own_sm_count(tiny_recipe, tmp_path):
    """An sm_90 recipe's SM count is no AMD device's: the runtime would refuse the package."""
    result = _compile([tiny_recipe(), "--out", tmp_path / "out", "--target", "gfx942"], expect=2)
    assert "sm_count: 4 is sm_90's" in result.output and "--sm-count" in result.output
    assert not (tmp_path / "out").exists()


def test_python_dash_m_monobuild_is_the_cli():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "monobuild", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "compile" in out.stdout and "check" in out.stdout


def test_inspect_of_a_recipe_says_what_it_reads(tiny_recipe):
    result = CliRunner().invoke(main, ["inspect", str(tiny_recipe())])
    assert result.exit_code == 2 and "not a package directory" in result.output and "monobuild plan" in result.output


@pytest.mark.parametrize("damage", ["truncate", "flip", "no_meta", "bad_meta"])
def test_a_corrupted_cache_entry_is_rebuilt_not_shipped(tiny_packages, tmp_path, damage):
    """Each entry carries the sha256 of its files: a damaged one is discarded and compiled again,
    and the package comes out byte-identical to one built from a sound cache."""
    import shutil

    recipe, root, out = tiny_packages
    cache = tmp_path / "cache"
    shutil.copytree(root / "cache-a", cache)
    # other tests add entries to cache-a (derived schedules): damage one this package uses
    digest = emitter_digest()
    keys = sorted(cache_key(emit(p), TARGETS["sm_90"], digest) for p in plan_recipe(load_recipe(recipe)).programs)
    victim = CodeCache(cache)._entry(keys[len(keys) // 2])
    assert (victim / "code.bin").exists()
    code = victim / "code.bin"
    if damage == "truncate":
        code.write_bytes(code.read_bytes()[: len(code.read_bytes()) // 2])
    elif damage == "flip":
        data = bytearray(code.read_bytes())
        data[len(data) // 2] ^= 0x40
        code.write_bytes(bytes(data))
    elif damage == "no_meta":
        (victim / "meta.json").unlink()
    else:
        (victim / "meta.json").write_text('{"ir": 3}')
    target = json.loads((out["sm_90"][0] / "manifest.json").read_text())["target"]
    result = _compile([recipe, "--out", tmp_path / "out", "--cache", cache, "--target", target, "--sm-count", 4])
    result_gfx = _compile([recipe, "--out", tmp_path / "out", "--cache", cache, "--target", "gfx950",
                           "--sm-count", 4])
    compiled = [int(r.output.split("(")[1].split()[0]) for r in (result, result_gfx)]
    assert sum(compiled) == 1, (result.output, result_gfx.output)
    for t in ("sm_90", "gfx950"):
        built, sound = tmp_path / "out" / "tiny" / t, out[t][0]
        for path in sorted(sound.rglob("*")):
            if path.is_file():
                assert (built / path.relative_to(sound)).read_bytes() == path.read_bytes(), path


def test_the_wheel_holds_every_subpackage_and_its_data(tmp_path):
    """The wheel, built as a user builds it: every folder with an __init__.py under a folder that
    setup.py maps onto monobuild.* is in it, with the shipped recipes, configs and schedule
    tables; the tests are not."""
    import subprocess
    import sys
    import zipfile

    from .conftest import REPO

    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", str(tmp_path)],
                   check=True, capture_output=True)
    (wheel,) = tmp_path.glob("monobuild-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    folders = {"monobuild": "monobuild", "compiler": "monobuild/compiler", "runtime": "monobuild/runtime",
               "cli": "monobuild/cli", "bench": "monobuild/bench", "recipes": "monobuild/recipes",
               "schedules": "monobuild/schedules"}
    want = set()
    for folder, package in folders.items():
        for path in (REPO / folder).rglob("*"):
            if "__pycache__" not in path.parts and path.suffix in (".py", ".yaml", ".json") and path.is_file():
                want.add(f"{package}/{path.relative_to(REPO / folder).as_posix()}")
    assert want - names == set(), "left out of the wheel"
    assert not any(n.startswith("tests/") for n in names)


def _descendants(pid: int) -> set[int]:
    from monobuild.compiler.build import _children

    out, todo = set(), [pid]
    while todo:
        for child in _children(todo.pop()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has ended; only its exit status waits to be read)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process tree from Linux's /proc")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_killed_compile_leaves_no_process_behind(tiny_recipe, tmp_path, how):
    """A cold --jobs 2 compile killed while its workers compile: every process it started has
    ended within seconds (the workers' assemblers included), and nothing is written to --out."""
    import signal
    import subprocess
    import sys
    import time

    compile_ = subprocess.Popen([sys.executable, "-m", "monobuild", "compile", str(tiny_recipe()), "--out",
                                 str(tmp_path / "out"), "--cache", str(tmp_path / "cache"), "--jobs", "2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(_descendants(compile_.pid)) < 4 and time.monotonic() < deadline:  # tracker, server, 2 workers
            time.sleep(0.05)
        started = _descendants(compile_.pid)
        assert len(started) >= 4 and compile_.poll() is None, "the compile ended before its workers started"
        compile_.send_signal(getattr(signal, how))
        assert compile_.wait(timeout=30) == (143 if how == "SIGTERM" else -9)
        deadline = time.monotonic() + 15
        while any(_running(p) for p in started | set().union(*map(_descendants, started))) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [p for p in started if _running(p)]
        assert not left, f"still running after {how}: {left}"
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("manifest.json"))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(compile_.pid, signal.SIGKILL)


def test_compile_reports_progress_and_json_off_a_terminal(tiny_recipe, tmp_path):
    """Off a terminal (CI logs) a cold compile still says what it compiles, on stderr: a line a
    program with --verbose, otherwise one every few seconds and one at the end; --json prints the
    results on stdout alone."""
    verbose = CliRunner().invoke(main, ["compile", str(tiny_recipe()), "--out", str(tmp_path / "a"), "--cache",
                                        str(tmp_path / "ca"), "--json", "--verbose"])
    assert verbose.exit_code == 0, verbose.output
    [record] = json.loads(verbose.stdout)
    assert record["recipe"] == "tiny" and record["target"] == "sm_90" and record["compiled"] > 0
    assert record["code_objects"] == record["compiled"] + record["cached"] <= record["programs"]
    lines = verbose.stderr.strip().splitlines()  # a line a compile (programs alike share one)
    assert 1 < len(lines) <= record["compiled"] and all(" compiled, last " in x for x in lines), verbose.stderr
    plain = CliRunner().invoke(main, ["compile", str(tiny_recipe()), "--out", str(tmp_path / "b"), "--cache",
                                      str(tmp_path / "cb")])
    assert plain.exit_code == 0 and plain.stdout.startswith(str(tmp_path / "b")), plain.output
    last = plain.stderr.strip().splitlines()[-1]
    total = int(last.split(" of ")[1].split()[0])
    assert last.startswith("monobuild: tiny → sm_90: ") and f"{total} of {total} compiled" in last, plain.stderr
