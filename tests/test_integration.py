"""The engine-facing parts, on CPU: the gate (does a package serve this deployment, this step?),
the load policy, and generation with a transformers model prefilling and a decode step decoding.

Generation is checked against ``model.generate(do_sample=False)`` with the float64 reference step
(the one the programs are tested against) in the decode step's place, both in float64: every
greedy id is decided by a margin far above float64's rounding, so the ids must be equal, end of
sequence included. The package's own step is checked the same way on the GPU
(``tests/test_runtime_gpu.py``).
"""

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from monobuild.manifest import read_manifest
from monobuild.runtime.gate import (
    Declined,
    EngineDeployment,
    Use,
    deployment_refusal,
    geometry_difference,
    open_package,
    step_refusal,
)
from monobuild.schema import Band

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def tiny_package(tmp_path_factory):
    """The tiny Llama recipe compiled for sm_90 (4 SMs, bands 1 and 2, max_context 256)."""
    from .conftest import compile_tiny

    return compile_tiny(tmp_path_factory.mktemp("gate"))[1]


def _config(name="tiny-llama.json", **changes) -> dict:
    cfg = json.loads((DATA / name).read_text())
    cfg.update(changes)
    return cfg


def _engine(**changes) -> EngineDeployment:
    fields = dict(config=_config(), dtype=torch.bfloat16, kv_dtype=torch.bfloat16, block_size=16, max_context=256)
    fields.update(changes)
    return EngineDeployment(**fields)


@pytest.mark.parametrize("text, use", [("auto", Use.AUTO), ("FORCE", Use.FORCE), ("off", Use.OFF), ("1", Use.FORCE),
                                       ("0", Use.OFF), (Use.OFF, Use.OFF)])
def test_the_setting_reads_auto_force_and_off(text, use):
    assert Use.parse(text) is use


def test_the_setting_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("MONOBUILD_DECODE", raising=False)
    assert Use.from_env() is Use.AUTO
    monkeypatch.setenv("MONOBUILD_DECODE", "off")
    assert Use.from_env() is Use.OFF
    monkeypatch.setenv("MONOBUILD_DECODE", "sometimes")
    with pytest.raises(ValueError, match="MONOBUILD_DECODE='sometimes': expected auto, force or off"):
        Use.from_env()


def test_the_packages_own_model_is_its_model(tiny_package):
    manifest = read_manifest(tiny_package)
    # fields the programs never see (a fine-tune's name, its dtype) do not matter
    assert geometry_difference(manifest.geometry, _config(torch_dtype="float16", _name_or_path="a-fine-tune")) is None
    assert deployment_refusal(manifest, _engine()) is None


@pytest.mark.parametrize("changes, message", [
    (dict(rms_norm_eps=1e-6), "norm_eps 1e-06 (package 1e-05)"),
    (dict(num_hidden_layers=3), "layers 3 (package 2)"),
    (dict(rope_theta=10000.0), "rope_theta 10000.0 (package 500000.0)"),
    (dict(model_type="gpt2"), "model_type: unknown family 'gpt2'"),
])
def test_another_model_is_named_by_the_fields_that_differ(tiny_package, changes, message):
    why = geometry_difference(read_manifest(tiny_package).geometry, _config(**changes))
    assert why is not None and message in why


@pytest.mark.parametrize("changes, message", [
    (dict(dtype=torch.float16), "holds its weights in torch.float16, the package's programs read torch.bfloat16"),
    (dict(kv_dtype=torch.float8_e4m3fn), "KV cache is torch.float8_e4m3fn"),
    (dict(block_size=32), "KV page is 32 tokens, the package's 16"),
    (dict(max_context=4096), "contexts up to 4096 tokens, the package up to 256"),
    (dict(config=_config("tiny-llama-fp8.json")), "quantization is WeightQuant"),
])
def test_a_deployment_the_package_does_not_serve_is_named(tiny_package, changes, message):
    why = deployment_refusal(read_manifest(tiny_package), _engine(**changes))
    assert why is not None and message in why


def test_auto_declines_with_one_log_line_force_raises_off_reads_nothing(tiny_package, tmp_path, caplog):
    engine = _engine(block_size=32)
    with caplog.at_level(logging.INFO, logger="monobuild"):
        assert open_package(tiny_package, engine, "auto") is None
    assert [r.getMessage() for r in caplog.records] == [
        f"monobuild: {tiny_package} not used: the engine's KV page is 32 tokens, the package's 16 (compile with "
        "kv_cache.block_size set to the engine's)"]
    with pytest.raises(Declined, match="KV page is 32 tokens"):
        open_package(tiny_package, engine, Use.FORCE)
    assert open_package(tmp_path / "no-such-package", engine, "off") is None


def test_a_served_deployment_without_a_gpu_is_declined_for_the_device(tiny_package):
    """The deployment matches; the machine has no GPU (CI), so auto declines and force raises, for that reason."""
    assert open_package(tiny_package, _engine(), "auto") is None
    with pytest.raises(Declined, match="no GPU is visible to torch"):
        open_package(tiny_package, _engine(), "force")


def test_a_broken_package_is_declined_under_auto_and_raised_under_force(tiny_package, tmp_path):
    broken = tmp_path / "pkg"
    shutil.copytree(tiny_package, broken)
    (broken / "manifest.json").write_text("{")
    assert open_package(broken, _engine(), "auto") is None
    with pytest.raises(Exception, match="manifest"):
        open_package(broken, _engine(), "force")


BANDS = (Band(1), Band(2), Band(4), Band(1, 6))


@pytest.mark.parametrize("rows, tokens, context, why", [
    (1, 1, 100, None), (3, 1, 256, None), (1, 6, 256, None),
    (5, 1, 100, "5 rows of 1 token: the package's widest band has 4"),
    (2, 6, 100, "2 rows of 6 tokens: the package's widest band has 1"),
    (1, 3, 100, "3 tokens per row: the package's bands take 1, 6"),
    (1, 1, 257, "a context of 257 tokens: the package's programs serve up to 256"),
    (0, 1, 10, "0 rows × 1 tokens: a step has at least one row of at least one token"),
])
def test_each_step_is_answered_with_its_reason(rows, tokens, context, why):
    assert step_refusal(BANDS, 256, rows, tokens, context) == why



def _settings(rows=2, **changes):
    from monobuild.runtime import Sampling

    fields = {"temperature": torch.ones(rows), "top_k": torch.zeros(rows, dtype=torch.int32),
              "top_p": torch.ones(rows), "seed": torch.zeros(rows, dtype=torch.int64)}
    fields.update(changes)
    return Sampling(**fields)


@pytest.mark.parametrize("head, sampling, message", [
    ("sample", None, "sampling: a sampling head's step takes per-row settings (runtime.Sampling)"),
    ("ids", _settings(), "sampling: the package's head does not sample (head: ids)"),
    ("sample", _settings(top_k=torch.zeros(2, dtype=torch.int64)), "sampling.top_k: expected torch.int32 [2] on cpu"),
    ("sample", _settings(temperature=torch.ones(3)), "sampling.temperature: expected torch.float32 [2] on cpu"),
    ("sample", _settings(seed=[0, 1]), "sampling.seed: expected torch.int64 [2] on cpu"),
])
def test_sampling_settings_a_step_cannot_take_are_named(head, sampling, message):
    from monobuild.runtime.step import StepInputError, check_sampling

    with pytest.raises(StepInputError) as e:
        check_sampling(sampling, head, 2, "cpu")
    assert str(e.value) == message
    check_sampling(_settings() if head == "sample" else None, head, 2, "cpu")  # the right settings pass


@pytest.mark.parametrize("drafts, q, message", [
    (None, torch.zeros(2, 3, 8), "sampling.draft_probs: this step does not take them (a verify step of a package "
                                 "compiled with verify: {draft_probs: true} does)"),
    ((3, 8), None, "sampling.draft_probs: expected contiguous torch.float32 [2, 3, 8] on cpu: each draft's "
                   "distribution the proposer drew it from"),
    ((3, 8), torch.zeros(2, 3, 9), "sampling.draft_probs: expected contiguous torch.float32 [2, 3, 8] on cpu: each "
                                   "draft's distribution the proposer drew it from"),
    ((3, 8), torch.zeros(2, 3, 8, dtype=torch.float64), "sampling.draft_probs: expected contiguous torch.float32 "
                                                         "[2, 3, 8] on cpu: each draft's distribution the proposer "
                                                         "drew it from"),
    ((3, 8), torch.zeros(2, 8, 3).transpose(1, 2), "sampling.draft_probs: expected contiguous torch.float32 [2, 3, 8] "
                                                   "on cpu: each draft's distribution the proposer drew it from"),
])
def test_draft_distributions_a_step_cannot_take_are_named(drafts, q, message):
    """A verify step of a package compiled with ``verify.draft_probs`` takes [rows, drafts, vocab]
    fp32 distributions; any other step takes none."""
    from monobuild.runtime.step import StepInputError, check_draft_probs

    with pytest.raises(StepInputError) as e:
        check_draft_probs(_settings(draft_probs=q), drafts, 2, "cpu")
    assert str(e.value) == message
    check_draft_probs(_settings(draft_probs=torch.zeros(2, *drafts) if drafts else None), drafts, 2, "cpu")


# generation: the float64 reference step decoding after transformers' prefill, against generate

transformers = pytest.importorskip("transformers")


def _reference_generation(config: str, seed: int):
    from monobuild.bench.checkpoints import random_hf_state_dict
    from monobuild.bench.hf import hf_model
    from monobuild.bench.reference import reference_step
    from monobuild.compiler.geometry import load_config
    from monobuild.runtime.kvcache import allocate_kv_cache
    from monobuild.runtime.weights import pack_hf_state_dict

    g, quant = load_config(DATA / config)
    sd = random_hf_state_dict(g, torch.float64, torch.Generator().manual_seed(seed), quant)
    model = hf_model(DATA / config, sd, torch.float64, "cpu", quant)
    weights = pack_hf_state_dict(sd, g, torch.float64, quant=quant)
    kv = allocate_kv_cache(g, 16, torch.float64, 64, "cpu")

    def logits(ids, positions, tables, context_lens):
        """The float64 reference step's logits (its K/V written into ``kv``)."""
        return reference_step(g, weights, list(kv.k), list(kv.v), ids, positions, tables, context_lens, 1)

    return model, logits, kv, g


def _greedy(logits):
    return lambda *inputs: logits(*inputs).argmax(-1).to(torch.int32)


def _generate(model, prompts: list[torch.Tensor], new: int, eos: int | None) -> list[list[int]]:
    """transformers' greedy generate over the left-padded batch, each row's new ids through its end."""
    from monobuild.integrations.transformers import left_padded

    ids, mask = left_padded(prompts)
    width = ids.shape[1]
    config = transformers.GenerationConfig(do_sample=False, max_new_tokens=new, eos_token_id=eos, pad_token_id=0)
    out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)[:, width:].tolist()
    rows = []
    for row in out:
        end = row.index(eos) + 1 if eos is not None and eos in row else len(row)
        rows.append(row[:end])
    return rows


@pytest.mark.parametrize("config", ["tiny-llama.json", "tiny-qwen3.json", "tiny-mistral-window.json"])
def test_generation_matches_transformers_generate(config):
    from monobuild.integrations.transformers import decode

    model, logits, kv, g = _reference_generation(config, seed=7)
    step = _greedy(logits)
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, g.vocab, (n,), generator=gen) for n in (5, 37, 130)]
    want = _generate(model, prompts, 12, None)
    chunks = list(decode(model, step, kv, prompts, 12, None, sync_every=5, graph=False))
    assert [len(c[0]) for c in chunks] == [1, 5, 5, 1]  # the prefill's id at once, then 5 ids a read
    got = [sum((c[b] for c in chunks), []) for b in range(len(prompts))]
    assert got == want

    eos = want[1][4]  # row 1 ends at its fifth id; rows that do not emit it run to the budget
    want = _generate(model, prompts, 12, eos)
    got = [[] for _ in prompts]
    for chunk in decode(model, step, kv, prompts, 12, eos, sync_every=5, graph=False):
        for row, ids in zip(got, chunk):
            row.extend(ids)
    assert got == want
    assert len(got[1]) <= 5 and got[1][-1] == eos




def test_sampled_generation_draws_within_each_rows_top_k_reproducibly():
    """The sampling head's rule in the decode step's place (the float64 reference sampler over the
    float64 reference step): with the same seeds the same ids; each sampled id within the top-k of
    the model's own logits at its position (transformers, teacher-forced over the sequence); a row
    of temperature 0 is generate's greedy row."""
    from monobuild.bench.reference import sample_reference
    from monobuild.integrations.transformers import decode, sampling_for

    model, step_logits, kv, g = _reference_generation("tiny-qwen3.json", seed=9)
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(0, g.vocab, (n,), generator=gen) for n in (20, 44, 9)]
    settings = sampling_for(3, "cpu", temperature=[0.0, 1.3, 0.8], top_k=[0, 5, 3], top_p=[1.0, 1.0, 0.9],
                            seed=[1, 2, 3])

    def sampling_step(ids, positions, tables, context_lens, sampling):
        logits = step_logits(ids, positions, tables, context_lens)
        return torch.tensor([sample_reference(logits[b].float(), float(sampling.temperature[b]),
                                              int(sampling.top_k[b]), float(sampling.top_p[b]),
                                              int(sampling.seed[b]), int(positions[b]))[0]
                             for b in range(len(ids))], dtype=torch.int32)

    def run(seeds):
        s = sampling_for(3, "cpu", settings.temperature, settings.top_k, settings.top_p, seeds)
        chunks = decode(model, sampling_step, kv, prompts, 10, None, graph=False, sampling=s)
        return [sum(c, []) for c in zip(*chunks)]

    first, again, other = run([1, 2, 3]), run([1, 2, 3]), run([1, 7, 8])
    assert first == again and first[1:] != other[1:]
    assert first[0] == _generate(model, prompts[:1], 10, None)[0]
    for b, k in ((1, 5), (2, 3)):
        sequence = torch.cat([prompts[b], torch.tensor(first[b])])
        with torch.no_grad():
            logits = model(sequence[None]).logits[0, prompts[b].numel() - 1: -1]
        ranks = (logits > logits.gather(1, torch.tensor(first[b])[:, None])).sum(1)
        assert (ranks < k).all(), f"row {b}: an id outside its top-{k}"


# the memory a bound package holds beyond the engine's tensors, as `monobuild inspect` reports it

@pytest.mark.parametrize("config, verify, head", [("tiny-llama.json", None, "ids"),
                                                  ("tiny-qwen2-gqa3.json", {"rows": 1, "tokens": 3}, "ids"),
                                                  ("tiny-qwen3-fp8.json", None, "ids"),
                                                  ("tiny-llama.json", None, "sample"),
                                                  ("tiny-llama.json", {"rows": 1, "tokens": 3, "draft_probs": True},
                                                   "sample"),
                                                  ("tiny-qwen3-moe.json", {"rows": 1, "tokens": 3}, "ids")])
def test_the_reported_footprint_is_what_binding_allocates(tiny_recipe, tmp_path, config, verify, head):
    from click.testing import CliRunner

    from monobuild.bench.checkpoints import random_hf_state_dict
    from monobuild.cli.main import main
    from monobuild.footprint import band_footprint, footprint
    from monobuild.runtime.buffers import TORCH_DTYPES, band_buffers, input_copies
    from monobuild.runtime.rope import rope_table
    from monobuild.runtime.weights import pack_hf_state_dict
    from monobuild.schema import takes_draft_probs

    shutil.copy(DATA / config, tmp_path / config)
    recipe = tiny_recipe(config=config, head=head, **({"verify": verify} if verify else {}))
    out = CliRunner().invoke(main, ["compile", str(recipe), "--out", str(tmp_path / "out"), "--cache",
                                    str(tmp_path / "cache"), "--jobs", "2", "-q"])
    assert out.exit_code == 0, out.output
    pkg = tmp_path / "out" / "tiny" / "sm_90"
    manifest = read_manifest(pkg)
    g, d = manifest.geometry, manifest.deployment
    blocks = -(-d.max_context // d.kv_cache.block_size)
    for mode in d.modes:
        f = footprint(manifest, mode)
        assert f.rope == rope_table(g, d.max_context).numel() * 4
        for step in (s for s in manifest.steps if s.mode == mode):
            buffers = band_buffers(manifest, step, "cpu", rope=torch.empty(0))
            drafts = (step.band.tokens - 1, g.vocab) if takes_draft_probs(d, step.band) else None
            own = input_copies(step.band.m, step.band.rows, blocks, "cpu", head == "sample", drafts)
            tensors = [own.tokens, own.positions, own.block_tables, own.context_lens,
                       *(t for t in (vars(own.sampling).values() if own.sampling is not None else ()) if t is not None)]
            allocated = buffers.nbytes + sum(t.numel() * t.element_size() for t in tensors)
            assert band_footprint(manifest, step).total == allocated
            assert ("accepted" in buffers.verdict) == (step.band.tokens > 1)
            assert (buffers.routed.numel() > 0) == bool(g.moe_layers)  # a routed layer's record, one per layer
    dtype = TORCH_DTYPES[d.dtypes.weights]
    sd = random_hf_state_dict(g, dtype, torch.Generator().manual_seed(0), d.quant)
    packed = pack_hf_state_dict(sd, g, dtype, quant=d.quant)
    engine = {t.data_ptr() for t in sd.values()}
    tensors = [packed.embed, packed.final_norm, packed.w_head,
               *(t for layer in packed.layers for t in vars(layer).values() if isinstance(t, torch.Tensor))]
    assert all(t.data_ptr() in engine for t in tensors), "binding copied an engine tensor"
    shown = CliRunner().invoke(main, ["inspect", str(pkg)]).output
    assert f"persistent: {footprint(manifest, 'persistent').total / 1e6:.2f} MB of step buffers" in shown


@pytest.mark.parametrize("target, units", [("gfx942", 304), ("gfx950", 256)])
def test_a_sampling_head_compiles_and_checks_for_the_amd_targets(tiny_recipe, tmp_path, target, units):
    """The sampling head's numerics are tested on sm_90 (under the interpreter and on the H200);
    for gfx942 and gfx950 its programs compile and their contracts hold, a verify band's that
    takes the drafts' distributions included."""
    from click.testing import CliRunner

    from monobuild.cli.main import main

    recipe = tiny_recipe(head="sample", target=target, sm_count=units,
                         verify={"rows": 1, "tokens": 3, "draft_probs": True})
    cache = ["--cache", str(tmp_path / "cache")]
    out = CliRunner().invoke(main, ["compile", str(recipe), "--out", str(tmp_path / "out"), "--jobs", "2", "-q", *cache])
    assert out.exit_code == 0, out.output
    checked = CliRunner().invoke(main, ["check", str(tmp_path / "out" / "tiny" / target), *cache])
    assert checked.exit_code == 0 and "every contract holds" in checked.output, checked.output
