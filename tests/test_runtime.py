"""The thin runtime on CPU: its import boundary, load refusals, weight / checkpoint / KV cache binding
errors, parameter blocks and the roofline bytes. What needs a GPU is in test_runtime_gpu.py."""

import ctypes
import json
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

from monobuild.bench.checkpoints import fused_like_vllm, random_hf_state_dict
from monobuild.bench.roofline import step_bytes
from monobuild.cli.main import main
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe
from monobuild.runtime import (
    CheckpointError,
    DeviceRefused,
    KVCacheError,
    PackageError,
    SafetensorsCheckpoint,
    WeightError,
    load,
    read_manifest,
)
from monobuild.runtime.kvcache import KVCache, allocate_kv_cache, as_kv_cache
from monobuild.runtime.package import DeviceInfo, Package, check_device
from monobuild.runtime.params import ParamBlock
from monobuild.runtime.weights import pack_hf_state_dict


@pytest.fixture(scope="module")
def tiny_package(tmp_path_factory):
    """The tiny Llama recipe compiled for sm_90 (4 SMs, bands 1 and 2, both modes)."""
    from .conftest import compile_tiny

    return compile_tiny(tmp_path_factory.mktemp("rt"))


@pytest.fixture
def geometry(tiny_package):
    return read_manifest(tiny_package[1]).geometry


def test_runtime_imports_and_reads_a_package_without_the_compiler(tiny_package):
    """With triton, llvmlite, flydsl and monobuild.compiler unimportable, the runtime imports, reads
    the manifest and, on a machine without a GPU, refuses to load with that reason."""
    script = textwrap.dedent(f"""
        import sys
        BLOCKED = ("triton", "llvmlite", "flydsl", "monobuild.compiler")
        class Block:
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    raise ImportError(f"{{name}} is blocked")
        sys.meta_path.insert(0, Block())
        from monobuild import runtime
        manifest = runtime.read_manifest({str(tiny_package[1])!r})
        try:
            runtime.load({str(tiny_package[1])!r})
        except runtime.DeviceRefused as e:
            print("refused:", e)
        assert not [m for m in sys.modules if m.split(".")[0] in ("triton", "llvmlite", "flydsl")]
        assert "monobuild.compiler" not in sys.modules
        print(manifest.recipe, len(manifest.programs))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout and "no GPU is visible" in out.stdout
    assert "tiny " in out.stdout


def test_load_refuses_without_a_gpu(tiny_package):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(DeviceRefused, match="no GPU is visible to torch"):
        load(tiny_package[1])


def test_a_device_the_package_was_not_planned_for_is_refused(tiny_package):
    manifest = read_manifest(tiny_package[1])
    check_device(manifest, DeviceInfo("NVIDIA H200", "sm_90", 4))
    with pytest.raises(DeviceRefused, match=r"compiled for sm_90; this device \(MI300X\) is gfx942: .*--target gfx942"):
        check_device(manifest, DeviceInfo("MI300X", "gfx942", 4))
    with pytest.raises(DeviceRefused, match=r"planned for 4 SMs; this device \(NVIDIA H100\) has 132: set sm_count: 132"):
        check_device(manifest, DeviceInfo("NVIDIA H100", "sm_90", 132))


def test_bad_package_directories_are_named(tmp_path, tiny_package):
    with pytest.raises(PackageError, match="manifest.json: not found"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(PackageError, match="malformed JSON at line 1"):
        read_manifest(tmp_path)
    doc = json.loads((tiny_package[1] / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**doc, "format": 99}))
    with pytest.raises(PackageError, match="format 99"):
        read_manifest(tmp_path)
    del doc["programs"][0]["grid"]
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(PackageError, match="missing or malformed field 'grid'"):
        read_manifest(tmp_path)


def test_bench_without_a_gpu_is_one_line_and_exit_2(tiny_package):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = CliRunner().invoke(main, ["bench", str(tiny_package[1])])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "no GPU is visible" in result.output


def _state_dict(geometry, seed=0):
    return random_hf_state_dict(geometry, torch.bfloat16, torch.Generator().manual_seed(seed))


HF_PROJECTIONS = {"w_q": "self_attn.q_proj", "w_k": "self_attn.k_proj", "w_v": "self_attn.v_proj",
                  "w_o": "self_attn.o_proj", "w_gate": "mlp.gate_proj", "w_up": "mlp.up_proj", "w_down": "mlp.down_proj"}


def test_every_weight_is_bound_in_place(geometry):
    sd = _state_dict(geometry)
    packed = pack_hf_state_dict(sd, geometry, torch.bfloat16)
    for i, layer in enumerate(packed.layers):
        for field, name in HF_PROJECTIONS.items():
            assert getattr(layer, field).data_ptr() == sd[f"model.layers.{i}.{name}.weight"].data_ptr(), (i, field)
        assert layer.attn_norm.data_ptr() == sd[f"model.layers.{i}.input_layernorm.weight"].data_ptr()
    assert packed.w_head.data_ptr() == sd["model.embed_tokens.weight"].data_ptr()  # tied


def test_vllm_fused_projections_are_bound_as_views_of_their_tensors(geometry):
    sd = _state_dict(geometry)
    fused = fused_like_vllm(sd, geometry.layers)
    hf, vllm = pack_hf_state_dict(sd, geometry, torch.bfloat16), pack_hf_state_dict(fused, geometry, torch.bfloat16)
    nq, nkv = geometry.q_heads * geometry.head_dim, geometry.kv_heads * geometry.head_dim
    row = geometry.hidden * 2  # bytes of a bf16 weight row
    for i, (a, b) in enumerate(zip(hf.layers, vllm.layers)):
        qkv = fused[f"model.layers.{i}.self_attn.qkv_proj.weight"]
        gate_up = fused[f"model.layers.{i}.mlp.gate_up_proj.weight"]
        assert [b.w_q.data_ptr(), b.w_k.data_ptr(), b.w_v.data_ptr()] == \
            [qkv.data_ptr(), qkv.data_ptr() + nq * row, qkv.data_ptr() + (nq + nkv) * row]
        assert [b.w_gate.data_ptr(), b.w_up.data_ptr()] == \
            [gate_up.data_ptr(), gate_up.data_ptr() + geometry.intermediate * row]
        for name in ("qkv", "o", "gate_up", "down"):
            assert torch.equal(a.projection(name, torch.float32), b.projection(name, torch.float32)), (i, name)


def test_a_misshaped_fused_projection_is_named(geometry):
    fused = fused_like_vllm(_state_dict(geometry), geometry.layers)
    name = "model.layers.0.mlp.gate_up_proj.weight"
    fused[name] = fused[name][1:]
    with pytest.raises(WeightError, match=rf"{name}: expected \[{2 * geometry.intermediate}, {geometry.hidden}\]"):
        pack_hf_state_dict(fused, geometry, torch.bfloat16)


def test_misaligned_or_strided_weights_are_copied_once(geometry):
    sd = _state_dict(geometry)
    name = "model.layers.0.self_attn.o_proj.weight"
    w = sd[name]
    backing = torch.empty(w.numel() + 1, dtype=w.dtype)
    backing[1:] = w.flatten()
    sd[name] = backing[1:].view(w.shape)  # 2 bytes off a 16-byte boundary
    packed = pack_hf_state_dict(sd, geometry, torch.bfloat16)
    assert packed.layers[0].w_o.data_ptr() % 16 == 0
    assert torch.equal(packed.layers[0].w_o, w)


@pytest.mark.parametrize("edit,message", [
    (lambda sd: sd.pop("model.layers.1.mlp.up_proj.weight"),
     r"model.layers.1.mlp.up_proj.weight: missing \(expected \[512, 256\] torch.bfloat16\)"),
    (lambda sd: sd.__setitem__("model.norm.weight", torch.ones(255, dtype=torch.bfloat16)),
     r"model.norm.weight: expected \[256\] torch.bfloat16, got \[255\] torch.bfloat16"),
    (lambda sd: sd.__setitem__("model.embed_tokens.weight", torch.ones(512, 256)),
     r"model.embed_tokens.weight: expected \[512, 256\] torch.bfloat16, got \[512, 256\] torch.float32"),
])
def test_a_missing_or_misshaped_weight_is_named(geometry, edit, message):
    sd = _state_dict(geometry)
    edit(sd)
    with pytest.raises(WeightError, match=message):
        pack_hf_state_dict(sd, geometry, torch.bfloat16)


def test_a_safetensors_checkpoint_binds_like_its_state_dict(tmp_path, tiny_package, geometry):
    from safetensors.torch import save_file

    sd = _state_dict(geometry, seed=3)
    names = sorted(sd)
    half = len(names) // 2
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    save_file({n: sd[n] for n in names[:half]}, ckpt / "model-00001-of-00002.safetensors")
    save_file({n: sd[n] for n in names[half:]}, ckpt / "model-00002-of-00002.safetensors")
    assert set(SafetensorsCheckpoint(ckpt)) == set(sd)

    pkg = Package(tiny_package[1], read_manifest(tiny_package[1]), torch.device("cpu"), {})
    from_file, direct = pkg.bind_weights(ckpt), pack_hf_state_dict(sd, geometry, torch.bfloat16)
    for a, b in zip(from_file.layers, direct.layers):
        assert all(torch.equal(getattr(a, f), getattr(b, f)) for f in HF_PROJECTIONS)
    assert torch.equal(from_file.embed, direct.embed)


def test_a_broken_checkpoint_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="no .safetensors files"):
        SafetensorsCheckpoint(tmp_path)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes((20).to_bytes(8, "little") + b"{not a json header!}")
    with pytest.raises(CheckpointError, match="bad.safetensors: malformed safetensors header"):
        SafetensorsCheckpoint(bad)
    header = json.dumps({"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]}}).encode()
    short = tmp_path / "short.safetensors"
    short.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 16)  # 16 of 32 bytes
    with pytest.raises(CheckpointError, match="w's byte range does not match its shape"):
        SafetensorsCheckpoint(short)["w"]


def test_kv_caches_in_vllm_layouts_bind_in_place(geometry):
    layers, shape = geometry.layers, (10, 16, geometry.kv_heads, geometry.head_dim)
    ours = allocate_kv_cache(geometry, 16, torch.bfloat16, 10, "cpu")
    assert as_kv_cache(ours, geometry, 16, torch.bfloat16, "cpu") == ours
    vllm = [torch.zeros((2, *shape), dtype=torch.bfloat16) for _ in range(layers)]
    bound = as_kv_cache(vllm, geometry, 16, torch.bfloat16, "cpu")
    assert bound.k[1].data_ptr() == vllm[1][0].data_ptr() and bound.v[1].data_ptr() == vllm[1][1].data_ptr()
    pairs = [(torch.zeros(shape, dtype=torch.bfloat16), torch.zeros(shape, dtype=torch.bfloat16))
             for _ in range(layers)]
    assert as_kv_cache(pairs, geometry, 16, torch.bfloat16, "cpu").v[0] is pairs[0][1]


def test_kv_caches_that_do_not_fit_are_named(geometry):
    layers, shape = geometry.layers, (10, 16, geometry.kv_heads, geometry.head_dim)

    def cache(make):
        return KVCache(tuple(make() for _ in range(layers)), tuple(make() for _ in range(layers)))

    with pytest.raises(KVCacheError, match=f"1 layers, the package has {layers}"):
        as_kv_cache(KVCache((torch.zeros(shape),), (torch.zeros(shape),)), geometry, 16, torch.bfloat16, "cpu")
    with pytest.raises(KVCacheError, match=r"layer 0 K: expected \[10, 16, 2, 32\] torch.bfloat16, got \[10, 8, 2, 32\]"):
        as_kv_cache(cache(lambda: torch.zeros(10, 8, *shape[2:], dtype=torch.bfloat16)), geometry, 16,
                    torch.bfloat16, "cpu")
    with pytest.raises(KVCacheError, match="got .* torch.float32"):
        as_kv_cache(cache(lambda: torch.zeros(shape)), geometry, 16, torch.bfloat16, "cpu")
    strided = cache(lambda: torch.zeros(10, 16, shape[3], shape[2], dtype=torch.bfloat16).transpose(2, 3))
    with pytest.raises(KVCacheError, match="must be contiguous"):
        as_kv_cache(strided, geometry, 16, torch.bfloat16, "cpu")
    with pytest.raises(KVCacheError, match="expected a KVCache"):
        as_kv_cache("cache", geometry, 16, torch.bfloat16, "cpu")


def test_param_blocks_hold_each_argument_then_two_null_pointers():
    block = ParamBlock(["*bf16", "i32", "*i64"], [0x7F0000001000, -5, 0x7F0000002000])
    assert len(block) == 5
    pointers = (ctypes.c_void_p * 5).from_address(block.address)
    assert ctypes.c_uint64.from_address(pointers[0]).value == 0x7F0000001000
    assert ctypes.c_int32.from_address(pointers[1]).value == -5
    assert [ctypes.c_uint64.from_address(pointers[i]).value for i in (3, 4)] == [0, 0]
    block[1] = 4096
    assert ctypes.c_int32.from_address(pointers[1]).value == 4096
    with pytest.raises(ValueError, match="2 parameter types for 1 values"):
        ParamBlock(["*bf16", "i32"], [1])


@pytest.mark.parametrize("context", [1, 1024, 200])
def test_roofline_bytes_from_the_manifest_equal_the_plans(tiny_package, context):
    recipe, package = tiny_package
    plan, manifest = plan_recipe(load_recipe(recipe)), read_manifest(package)
    for band in load_recipe(recipe).deployment.bands:
        spec = next(s.band for s in manifest.steps if (s.band.rows, s.band.tokens) == (band.rows, band.tokens))
        assert step_bytes(manifest, spec, context) == plan.step_bytes(band, context)


@pytest.mark.parametrize("context", [1, 200])
def test_the_floor_moves_the_rooflines_bytes_through_the_steps_launches(tiny_package, context):
    """Per layer: one floor launch per launch of the step, with its grid, PDL and stages, each
    stage's roofline bytes rounded up to whole chunks. In one launch: the embedding, then every
    layer's and the head's stages joined by sync edges. Streaming: the per-layer launches, run by
    the streaming program."""
    from monobuild.bench.floor import CHUNK_BYTES, floor_launches

    manifest = read_manifest(tiny_package[1])
    for step in (s for s in manifest.steps if s.mode == "persistent"):
        per_layer = floor_launches(manifest, step.band, context, "per_layer")
        assert [x.program for x in per_layer] == [x.program for x in step.launches]
        for x, launch in zip(per_layer, step.launches):
            p = manifest.program(launch.program)
            assert (x.grid, x.pdl, x.cooperative, len(x.stage_chunks)) == (p.grid, p.launch_pdl,
                                                                            p.launch_cooperative, len(p.stages))
        nbytes = sum(x.nbytes for x in per_layer)
        stages = sum(len(x.stage_chunks) for x in per_layer)
        assert 0 <= nbytes - step_bytes(manifest, step.band, context) < stages * CHUNK_BYTES
        one = floor_launches(manifest, step.band, context, "one_launch")
        assert [x.program for x in one] == [per_layer[0].program, "every layer and the head"]
        assert one[1].stage_chunks == tuple(c for x in per_layer[1:] for c in x.stage_chunks)
        assert (one[1].grid, one[1].pdl, one[1].cooperative) == (per_layer[1].grid, False, True)
        streaming = floor_launches(manifest, step.band, context, "streaming")
        assert [replace(x, variant="per_layer") for x in streaming] == list(per_layer)
        streaming_one = floor_launches(manifest, step.band, context, "streaming_one_launch")
        assert [replace(x, variant="one_launch") for x in streaming_one] == list(one)
    with pytest.raises(ValueError, match="floor variant 'fused'"):
        floor_launches(manifest, manifest.steps[0].band, context, "fused")


def test_a_debug_builds_wait_timeouts_are_named_and_reset(tiny_package):
    """The hang log's records map back to program, layer, sync edge and epoch; the log and the
    counters are reset so the next step starts consistent."""
    from monobuild.runtime import WaitTimeout
    from monobuild.runtime.hangs import check_hang_log

    manifest = read_manifest(tiny_package[1])
    spec = next(s for s in manifest.steps if s.mode == "persistent" and s.band.rows == 1)
    layer0 = next(k for k, launch in enumerate(spec.launches) if launch.layer == 0)
    counters = torch.full((len(spec.launches), 8), 7, dtype=torch.int64)
    log = torch.zeros(1 + 4 * 2, dtype=torch.int64)
    check_hang_log(log, counters, manifest, spec)  # nothing recorded: no error, nothing reset
    assert int(counters.sum()) == 7 * counters.numel()
    address = counters.data_ptr() + (layer0 * 8 + 1) * 8
    log[:9] = torch.tensor([5, 3, address, 16, 11, 6, address, 16, 12])
    with pytest.raises(WaitTimeout) as raised:
        check_hang_log(log, counters, manifest, spec)
    text = str(raised.value)
    assert text.startswith("5 wait(s) timed out")
    # the shipped table's norm stages: edge 0 is norm_qkv → qkv, so counter 1 is qkv → attn
    assert ("layer.r1t1.persistent (layer 0): CTA 3 gave up waiting on counter 1 (qkv→attn) for 16, last saw 11 "
            "(5 signals missing)") in text
    assert "… and 3 more (the log keeps 2)" in text
    assert [r.cta for r in raised.value.records] == [3, 6]
    assert not log.any() and not counters.any()


def test_the_bench_table_states_each_band_against_the_one_row_step_of_the_same_run():
    """Issue 5's batch and verify-width targets are ratios to the 1-row step measured in the same
    run: the table and the JSON carry them, per context and mode, and only where that step ran."""
    from monobuild.bench.run import BenchResult, BenchRow, Timing
    from monobuild.cli.report import bench_text

    def row(band, ms, context=1024, mode="persistent"):
        return BenchRow(band, mode, context, 2_500_000_000, 0.6, Timing(ms, ms * 1.01), None, None)

    result = BenchResult("pkg", "GPU", 4.27e12, (
        row("r1t1", 0.9), row("r8t1", 1.35), row("r1t6", 1.17), row("r1t1", 1.0, mode="staged"),
        row("r8t1", 1.5, mode="staged"), row("r8t1", 5.0, context=32768)))
    ratios = [result.vs_one_row(r) for r in result.rows]
    assert ratios[:5] == pytest.approx([1.0, 1.5, 1.3, 1.0, 1.5]) and ratios[5] is None
    lines = bench_text(result).splitlines()
    assert "×r1t1" in lines[1]
    assert " 1.50× " in lines[3] and " 1.30× " in lines[4] and "—" in lines[7].split("%")[1]
    assert [r["vs_one_row"] for r in result.to_json()["rows"]] == ratios
    assert "floor" not in lines[1]  # only a --floor run has the floor's columns


def test_a_floor_run_states_the_floor_beside_the_step_and_the_roofline():
    from monobuild.bench.floor import FloorTiming
    from monobuild.bench.run import BenchResult, BenchRow, Timing
    from monobuild.cli.report import bench_text

    floors = (FloorTiming("per_layer", 2_500_000_000, 4, 0.75, 0.76),
              FloorTiming("one_launch", 2_500_000_000, 6, 0.7, 0.71),
              FloorTiming("streaming", 2_500_000_000, 4, 0.64, 0.65),
              FloorTiming("streaming_one_launch", 2_500_000_000, 8, 0.625, 0.63))
    result = BenchResult("pkg", "GPU", 4.27e12, (
        BenchRow("r1t1", "persistent", 1024, 2_500_000_000, 0.6, Timing(1.0, 1.01), None, None, floors),
        BenchRow("r1t1", "staged", 1024, 2_500_000_000, 0.6, Timing(1.1, 1.11), None, None)))
    lines = bench_text(result).splitlines()
    assert "streaming" in lines[1] and " 0.750 ms  0.700 ms  0.640 ms  0.625 ms " in lines[2]
    assert lines[3].count("—") >= 4  # the staged row has no floors
    summary = next(line for line in lines if line.startswith("r1t1") and "80.0%" in line)
    # roofline ÷ each floor, then each ÷ ours
    assert [x for x in summary.split() if x.endswith("%")] == ["80.0%", "85.7%", "93.8%", "96.0%",
                                                                "75.0%", "70.0%", "64.0%", "62.5%"]
    assert result.to_json()["rows"][0]["floors"][1]["depth"] == 6


def test_a_floor_run_on_an_amd_target_marks_the_streaming_floors_it_has_not():
    """gfx9 has only the two stage-synchronous floors (bench/floor.py ``target_variants``): the
    summary still states them, with a dash where a streaming floor would be."""
    from monobuild.bench.floor import FloorTiming
    from monobuild.bench.run import BenchResult, BenchRow, Timing
    from monobuild.cli.report import bench_text

    floors = (FloorTiming("per_layer", 2_500_000_000, 4, 0.75, 0.76),
              FloorTiming("one_launch", 2_500_000_000, 6, 0.7, 0.71))
    result = BenchResult("pkg", "GPU", 4.27e12, (
        BenchRow("r1t1", "persistent", 1024, 2_500_000_000, 0.6, Timing(1.0, 1.01), None, None, floors),))
    summary = bench_text(result).splitlines()[-1]
    assert [x for x in summary.split() if x.endswith("%")] == ["80.0%", "85.7%", "75.0%", "70.0%"]
    assert summary.count("—") == 6  # two variants × (time, roofline ÷ it, it ÷ ours)
