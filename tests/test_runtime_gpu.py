"""The thin runtime on a GPU: packages compiled on a CPU machine, loaded and run with torch + the driver.

Marked ``gpu``; skipped without a CUDA device or without packages. Point
``MONOBUILD_TEST_PACKAGES`` at a directory holding ``llama-3.2-1b-sm_90/sm_90`` (compiled
elsewhere with ``monobuild compile recipes/llama-3.2-1b-sm_90.yaml --out DIR``); the FP8 tests
also want ``qwen3-8b-fp8-sm_90/sm_90`` there, the routed (mixture-of-experts) tests
``qwen3-moe-mixed-sm_90/sm_90`` (``tests/data/qwen3-moe-mixed-sm_90.yaml``: Qwen3-30B-A3B's layers,
four of them, the second dense) and its FP8 checkpoint's ``qwen3-moe-mixed-fp8-sm_90/sm_90``, the
widest GQA group's ``qwen3-235b-layers-sm_90/sm_90``
(``tests/data/qwen3-235b-layers-sm_90.yaml``), and skip without them.

Each step is checked against the float64 reference over the same weights and caches. The bound
on its logits' error is stated relative to the framework's own bf16 error (the same reference
computed in bf16): at most 1.5× it. Outputs are poisoned before each run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

PACKAGES = os.environ.get("MONOBUILD_TEST_PACKAGES")
NUM_BLOCKS = 640
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not PACKAGES or not (Path(PACKAGES) / "llama-3.2-1b-sm_90" / "sm_90" / "manifest.json").exists():
    pytest.skip("MONOBUILD_TEST_PACKAGES does not hold llama-3.2-1b-sm_90/sm_90", allow_module_level=True)

from monobuild import runtime  # noqa: E402
from monobuild.bench.cases import poison_past_context, random_case, random_kv_cache, random_state_dict  # noqa: E402
from monobuild.bench.reference import greedy_verdict, proposal_verdict, reference_step  # noqa: E402
from monobuild.runtime.buffers import StepInputs  # noqa: E402

LLAMA = Path(PACKAGES) / "llama-3.2-1b-sm_90" / "sm_90"
FP8 = Path(PACKAGES) / "qwen3-8b-fp8-sm_90" / "sm_90"
MOE = Path(PACKAGES) / "qwen3-moe-mixed-sm_90" / "sm_90"
MOE_FP8 = Path(PACKAGES) / "qwen3-moe-mixed-fp8-sm_90" / "sm_90"
WIDE_GQA = Path(PACKAGES) / "qwen3-235b-layers-sm_90" / "sm_90"


@pytest.fixture(scope="module")
def llama():
    pkg = runtime.load(LLAMA)
    weights = pkg.bind_weights(random_state_dict(pkg, seed=1))
    return pkg, weights


def _contexts(rows: int, tokens: int, seed: int, dead: bool) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    ctx = torch.randint(tokens + 1, 1024, (rows,), generator=gen).tolist()
    if dead and rows > 1:
        ctx[rows // 2] = 0
    return ctx


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("mode", ["persistent", "staged"])
@pytest.mark.parametrize("rows,tokens", [(1, 1), (3, 1), (8, 1), (1, 6)])
def test_step_matches_reference(llama, mode, rows, tokens):
    _check_step_against_reference(*llama, mode, rows, tokens)


def _bound(path: Path, seed: int):
    """The package at ``path`` (skipping where MONOBUILD_TEST_PACKAGES lacks it), bound to random
    weights drawn from ``seed``."""
    if not (path / "manifest.json").exists():
        pytest.skip(f"MONOBUILD_TEST_PACKAGES does not hold {path.parent.name}/{path.name}")
    pkg = runtime.load(path)
    return pkg, pkg.bind_weights(random_state_dict(pkg, seed=seed))


@pytest.fixture(scope="module")
def fp8():
    return _bound(FP8, seed=2)


@pytest.mark.parametrize("mode", ["persistent", "staged"])
@pytest.mark.parametrize("rows,tokens", [(1, 1), (3, 1), (8, 1), (1, 6)])
def test_fp8_step_matches_reference(fp8, mode, rows, tokens):
    """An FP8 checkpoint's step (E4M3 projections, 128×128 block scales) against the float64
    reference over the same dequantized weights, under the same bound as bf16's."""
    _check_step_against_reference(*fp8, mode, rows, tokens)


@pytest.fixture(scope="module")
def moe():
    return _bound(MOE, seed=3)


@pytest.mark.parametrize("mode", ["persistent", "staged"])
@pytest.mark.parametrize("rows,tokens", [(1, 1), (3, 1), (8, 1), (1, 6)])
def test_routed_step_matches_reference(moe, mode, rows, tokens):
    """A mixture-of-experts step (routed layers around a dense one) against the float64 reference,
    under the same bound as bf16's; each routed layer's record holds the union of the experts the
    reference's live rows chose, wherever their top-k margins decide it."""
    _check_step_against_reference(*moe, mode, rows, tokens)


@pytest.fixture(scope="module")
def moe_fp8():
    return _bound(MOE_FP8, seed=5)


@pytest.mark.parametrize("mode", ["persistent", "staged"])
@pytest.mark.parametrize("rows,tokens", [(1, 1), (3, 1), (8, 1), (1, 6)])
def test_fp8_routed_step_matches_reference(moe_fp8, mode, rows, tokens):
    """An FP8 checkpoint's routed step (E4M3 experts with their block scales, the dense layer's
    projections too) against the float64 reference over the dequantized weights."""
    _check_step_against_reference(*moe_fp8, mode, rows, tokens)


@pytest.mark.parametrize("mode", ["persistent", "staged"])
@pytest.mark.parametrize("rows,tokens", [(1, 1), (1, 6)])
def test_a_gqa_group_of_16_in_a_verify_band_matches_reference(mode, rows, tokens):
    """Qwen3-235B-A22B's layers: 16 query heads a KV head, so the 1 × 6 band's attention tasks hold
    96 query rows (padded to 128) against the float64 reference."""
    _check_step_against_reference(*_bound(WIDE_GQA, seed=4), mode, rows, tokens)


def test_routing_ties_as_torch_topk_on_the_gpu():
    """transformers routes with ``torch.topk`` on the GPU; the programs (and the reference) break a
    tie for the k-th place toward the lower expert. On a router whose logits all tie, and on ones
    where a few tie across the k-th place, torch.topk on CUDA must choose that set too."""
    k, experts = 8, 128
    gen = torch.Generator(device="cuda").manual_seed(0)
    probs = torch.rand(64, experts, generator=gen, device="cuda")
    probs[:32, :] = 0.5  # every expert ties
    tied = probs[32:].topk(k + 1, -1).indices  # rows 32…: the k-th and the (k+1)-th tie
    rows = torch.arange(32, 64, device="cuda")[:, None]
    probs[rows, tied[:, k - 1:k + 1]] = probs[rows, tied[:, k - 1:k]]
    probs = probs.softmax(-1)
    got = probs.topk(k, -1).indices.sort(-1).values
    order = torch.sort(probs, dim=-1, descending=True, stable=True).indices[:, :k].sort(-1).values
    assert torch.equal(got, order)


def _check_step_against_reference(pkg, weights, mode: str, rows: int, tokens: int) -> None:
    seed = 100 * rows + tokens
    cache = random_kv_cache(pkg, NUM_BLOCKS, seed)
    case = random_case(pkg, _contexts(rows, tokens, seed, dead=True), tokens, NUM_BLOCKS, seed)
    i = case.inputs
    poison_past_context(cache.k + cache.v, i.block_tables, i.context_lens, pkg.block_size)
    before = [t.clone() for t in cache.k + cache.v]
    ref_k, ref_v = [t.clone() for t in cache.k], [t.clone() for t in cache.v]
    bf_k, bf_v = [t.clone() for t in cache.k], [t.clone() for t in cache.v]
    step = pkg.bind(weights, cache, mode)
    band = step.band_for(rows, tokens)
    band.buffers.logits.fill_(float("nan"))
    band.buffers.next_ids.fill_(-1)

    for record in band.buffers.routed:
        record.fill_(-(2**30))
    ids = step(i.tokens, i.positions, i.block_tables, i.context_lens)
    logits = step.logits.clone()
    g = pkg.geometry
    routing = {}
    ref = reference_step(g, weights, ref_k, ref_v, i.tokens, i.positions, i.block_tables, i.context_lens, tokens,
                         routing=routing)
    bf16 = reference_step(g, weights, bf_k, bf_v, i.tokens, i.positions, i.block_tables, i.context_lens, tokens,
                          compute_dtype=torch.bfloat16)

    assert not torch.isnan(logits).any(), "logits left unwritten"
    assert sorted(step.routed) == sorted(routing) == list(g.moe_layers)
    for layer, record in step.routed.items():  # the experts the layer's live rows chose, in expert order
        n, chosen = int(record[0]), record[1:].tolist()
        if min(r.margin for r in routing[layer]) > 1e-2:
            assert chosen[:n] == sorted({e for r in routing[layer] for e in r.chosen}), f"layer {layer}"
        assert chosen[n:] == [-1] * (len(chosen) - n), f"layer {layer}: {record.tolist()}"
    ours, framework = _rel(logits, ref), _rel(bf16, ref)
    print(f"{mode} {rows}x{tokens}: ours {ours:.2e}, bf16 framework {framework:.2e}")
    assert ours <= 1.5 * framework
    # Greedy ids agree wherever the reference's top-2 margin exceeds either implementation's error.
    top2 = ref.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    err = torch.maximum((logits.double() - ref).abs().amax(-1), (bf16.double() - ref).abs().amax(-1))
    decided = margin > err
    assert torch.equal(ids.long()[decided], ref.argmax(-1)[decided])
    # KV: the live rows' new slots match the reference's as closely as the bf16 framework's do (to
    # 1.5× its error, plus one bf16 rounding of the stored value: where the framework's is exact,
    # ours may round the other way); no other slot changed (NaN poison included).
    for got, want, old, framework_kv in zip(cache.k + cache.v, ref_k + ref_v, before, bf_k + bf_v):
        written = (want.view(torch.int16) != old.view(torch.int16)).flatten(2).any(-1)  # [blocks, slots]
        assert int(written.sum()) == int(i.context_lens.gt(0).sum()) * tokens
        assert torch.equal(got[~written].view(torch.int16), old[~written].view(torch.int16)), \
            "the step wrote outside the live rows' new slots"
        assert _rel(got[written], want[written]) <= 1.5 * _rel(framework_kv[written], want[written]) + 2**-8


@pytest.mark.parametrize("mode", ["persistent", "staged"])
@pytest.mark.parametrize("accept", [0, 2, 5])
def test_the_verify_bands_verdict_accepts_the_drafts_that_match(llama, mode, accept):
    """A 1 × 6 verify step whose drafts are set, one at a time with the package's own steps, to
    the greedy ids the step computes for them: its verdict accepts exactly that many and emits
    them and the id after them (the reference verdict over the step's own ids)."""
    pkg, weights = llama
    cache = random_kv_cache(pkg, NUM_BLOCKS, 21 + accept)
    case = random_case(pkg, _contexts(1, 6, 21 + accept, dead=False), 6, NUM_BLOCKS, 21 + accept)
    i = case.inputs
    step = pkg.bind(weights, cache, mode)
    _check_verdict(step, i, accept)


def _check_verdict(step, i, accept: int, **sampling) -> None:
    """Set a 1 × 6 verify step's drafts, one at a time with the step itself, to the ids it decides
    for them (the same inputs decide the same ids), ``accept`` of them: its verdict must accept
    exactly those and emit them and the id after them (the reference verdict over its own ids)."""
    tokens = i.tokens.clone()
    for j in range(accept):
        ids = step(tokens, i.positions, i.block_tables, i.context_lens, **sampling)
        tokens[j + 1] = ids[j]
    ids = step(tokens, i.positions, i.block_tables, i.context_lens, **sampling)
    if accept < 5:  # the draft after the accepted ones must not match by chance
        assert int(tokens[accept + 1]) != int(ids[accept])
    accepted, emitted = step.verdict
    want_accepted, want_emitted = greedy_verdict(ids, tokens, 6)
    assert accepted.tolist() == want_accepted == [accept]
    assert emitted.tolist() == want_emitted


def test_staged_and_persistent_agree(llama):
    """The two modes of one executor compute the same products in the same order: they agree to
    float32 rounding. Where the persistent program is the streaming executor's (other tiles, the
    tensor cores' order), each is within 1.5× the framework's bf16 error of the reference
    (test_step_matches_reference), so they agree within 3× that error."""
    pkg, weights = llama
    results = []
    for mode in ("persistent", "staged"):
        cache = random_kv_cache(pkg, NUM_BLOCKS, 7)
        case = random_case(pkg, _contexts(4, 1, 7, dead=False), 1, NUM_BLOCKS, 7)
        step = pkg.bind(weights, cache, mode)
        i = case.inputs
        step(i.tokens, i.positions, i.block_tables, i.context_lens)
        results.append(step.logits.clone())
    executors = {p.executor for p in pkg.manifest.programs if p.kind == "layer"}
    if executors == {"triton"}:
        assert _rel(results[0], results[1]) < 1e-5
        return
    g, i = pkg.geometry, case.inputs
    cache = random_kv_cache(pkg, NUM_BLOCKS, 7)
    ref = reference_step(g, weights, [t.clone() for t in cache.k], [t.clone() for t in cache.v], i.tokens, i.positions,
                         i.block_tables, i.context_lens, 1)
    bf16 = reference_step(g, weights, cache.k, cache.v, i.tokens, i.positions, i.block_tables, i.context_lens, 1,
                          compute_dtype=torch.bfloat16)
    assert _rel(results[0], results[1]) <= 3 * _rel(bf16, ref)


def test_cuda_graph_replay_matches_eager(llama):
    """Capture one step; replays with new inputs written in place match eager steps on the same state."""
    pkg, weights = llama
    cache = random_kv_cache(pkg, NUM_BLOCKS, 11)
    snapshot = [t.clone() for t in cache.k + cache.v]
    step = pkg.bind(weights, cache, "persistent")
    cases = [random_case(pkg, _contexts(2, 1, s, dead=False), 1, NUM_BLOCKS, s) for s in (11, 12)]
    width = max(c.inputs.block_tables.shape[1] for c in cases)
    first = cases[0].inputs
    static = StepInputs(first.tokens.clone(), first.positions.clone(),
                        torch.zeros(2, width, dtype=torch.int32, device=pkg.device), first.context_lens.clone())

    def restore():
        for t, s in zip(cache.k + cache.v, snapshot):
            t.copy_(s)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(static.tokens, static.positions, static.block_tables, static.context_lens)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(static.tokens, static.positions, static.block_tables, static.context_lens)
    for case in cases:
        i = case.inputs
        restore()
        step(i.tokens, i.positions, i.block_tables, i.context_lens)
        eager = step.logits.clone()
        restore()
        static.tokens.copy_(i.tokens)
        static.positions.copy_(i.positions)
        static.block_tables[:, : i.block_tables.shape[1]].copy_(i.block_tables)
        static.context_lens.copy_(i.context_lens)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(step.logits, eager)


def test_step_allocates_nothing_and_never_syncs(llama):
    pkg, weights = llama
    cache = random_kv_cache(pkg, NUM_BLOCKS, 13)
    step = pkg.bind(weights, cache, "persistent")
    for rows in (8, 3):  # in place (a band's shape) and copied into the band's padded inputs
        i = random_case(pkg, _contexts(rows, 1, 13, dead=False), 1, NUM_BLOCKS, 13).inputs
        step(i.tokens, i.positions, i.block_tables, i.context_lens)
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                step(i.tokens, i.positions, i.block_tables, i.context_lens)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert torch.cuda.memory_stats()["allocation.all.allocated"] == before


def test_bad_step_inputs_are_refused(llama):
    pkg, weights = llama
    step = pkg.bind(weights, random_kv_cache(pkg, 64, 5), "persistent")
    i = random_case(pkg, [40, 50], 1, 64, 5).inputs
    with pytest.raises(runtime.StepInputError, match="no band serves"):
        step(i.tokens.repeat(5), i.positions.repeat(5), i.block_tables.repeat(5, 1), i.context_lens.repeat(5))
    with pytest.raises(runtime.StepInputError, match="input_ids: on cpu"):
        step(i.tokens.cpu(), i.positions, i.block_tables, i.context_lens)
    with pytest.raises(runtime.StepInputError, match="do not agree"):
        step(i.tokens[:1], i.positions, i.block_tables, i.context_lens)


def test_runtime_runs_without_the_compiler(tmp_path):
    """Load, bind and step while llvmlite, flydsl and monobuild.compiler are unimportable, and while
    any import of triton issued by monobuild's own code fails. (torch itself imports triton when
    it initialises CUDA, which is torch's business: the blocker looks at who asks.)"""
    script = textwrap.dedent(f"""
        import importlib.util, sys
        from pathlib import Path
        OURS = tuple(str(Path(importlib.util.find_spec(f"monobuild.{{s}}").origin).parent)
                     for s in ("runtime", "bench"))
        BLOCKED = ("llvmlite", "flydsl", "monobuild.compiler")
        def importer():
            f = sys._getframe(2)
            while f and f.f_code.co_filename.startswith("<frozen"):
                f = f.f_back
            return f.f_code.co_filename if f else ""
        class Block:
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    raise ImportError(f"{{name}} is blocked")
                if (name == "triton" or name.startswith("triton.")) and importer().startswith(OURS):
                    raise ImportError(f"{{name}} imported by {{importer()}}")
        sys.meta_path.insert(0, Block())
        for m in [m for m in sys.modules if m.startswith("monobuild")]:
            del sys.modules[m]
        import torch
        from monobuild import runtime
        from monobuild.bench.cases import random_case, random_kv_cache, random_state_dict
        pkg = runtime.load({str(LLAMA)!r})
        step = pkg.bind(random_state_dict(pkg, 3), random_kv_cache(pkg, 64, 3))
        i = random_case(pkg, [100], 1, 64, 3).inputs
        ids = step(i.tokens, i.positions, i.block_tables, i.context_lens)
        torch.cuda.synchronize()
        assert not [m for m in sys.modules if m.split(".")[0] in ("llvmlite", "flydsl")]
        assert "monobuild.compiler" not in sys.modules
        print("ok", int(ids[0]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")


CLOCKED = Path(PACKAGES) / "llama-3.2-1b-sm_90-clock" / "sm_90"


@pytest.mark.skipif(not (CLOCKED / "manifest.json").exists(),
                    reason="MONOBUILD_TEST_PACKAGES does not hold llama-3.2-1b-sm_90-clock (compile --stage-clock)")
def test_a_clock_build_computes_the_same_step_and_clocks_every_stage(llama):
    """The profiling build's logits equal the production build's, and every CTA of every clocked
    launch wrote its SM and a start ≤ end per stage, the stages in order."""
    pkg, weights = llama
    clocked = runtime.load(CLOCKED)
    logits = []
    for p in (pkg, clocked):
        cache = random_kv_cache(p, NUM_BLOCKS, 13)
        case = random_case(p, _contexts(1, 1, 13, dead=False), 1, NUM_BLOCKS, 13)
        step = p.bind(weights, cache, "persistent")
        i = case.inputs
        step(i.tokens, i.positions, i.block_tables, i.context_lens)
        logits.append(step.logits.clone())
    assert torch.equal(logits[0], logits[1])
    clock, spec = step.stage_clock(1, 1)
    clock = clock.cpu()
    programs = {p.name: p for p in clocked.manifest.programs}
    sms = torch.cuda.get_device_properties(clocked.device).multi_processor_count
    for n, launch in enumerate(spec.launches):
        p = programs[launch.program]
        if p.kind == "embed":
            continue
        rows = clock[n, : p.grid]
        assert ((rows[:, 0] >= 0) & (rows[:, 0] < sms)).all(), p.name
        times = rows[:, 1 : 1 + 2 * len(p.stages)]
        assert (times > 0).all(), f"{p.name}: a CTA left a stage unclocked"
        assert (times[:, 1:] >= times[:, :-1]).all(), f"{p.name}: clocks out of order"


SAMPLE = Path(PACKAGES) / "llama-3.2-1b-sample-sm_90" / "sm_90"
DRAW_STEPS = 2500  # × 8 rows: 10000 draws for each of two settings


@pytest.fixture(scope="module")
def sampler():
    if not (SAMPLE / "manifest.json").exists():
        pytest.skip("MONOBUILD_TEST_PACKAGES does not hold llama-3.2-1b-sample-sm_90/sm_90 "
                    "(docs/measurements/2026-12-04-h200-serving/llama-3.2-1b-sample-sm_90.yaml)")
    pkg = runtime.load(SAMPLE)
    return pkg, pkg.bind_weights(random_state_dict(pkg, seed=3))


def _chi2_bound(df: int, z: float = 3.090) -> float:
    """χ²'s upper 0.1% point for ``df`` degrees of freedom (Wilson–Hilferty; z is the normal's)."""
    return df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3


def _allowed(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids a row may be drawn from (within top-k, and whose more likely ids hold less than
    top_p) and their probabilities, softmax(logits / temperature) renormalized over them."""
    p = torch.softmax(logits.double() / temperature, -1)
    order = p.argsort(descending=True)
    above = torch.cumsum(p[order], 0) - p[order]  # the mass of the ids more likely than each
    keep = above < top_p
    if top_k > 0:
        keep[top_k:] = False
    ids = order[keep]
    return ids, p[ids] / p[ids].sum()


@pytest.mark.parametrize("mode", ["persistent", "staged"])
def test_sampled_ids_follow_the_softmax_within_top_k_and_top_p(sampler, mode):
    """Eight rows with the same context draw, each with seeds of its own, 10000 times per setting:
    every draw is an allowed id, and the counts pass a χ² test against the renormalized softmax
    at the 0.1% level (rows 0–3: within top-k 20; rows 4–7: within a top-p that holds 30 ids)."""
    pkg, weights = sampler
    cache = random_kv_cache(pkg, NUM_BLOCKS, 31)
    case = random_case(pkg, [300], 1, NUM_BLOCKS, 31)
    i = case.inputs
    step = pkg.bind(weights, cache, mode)
    rows = 8
    tokens, positions = i.tokens.repeat(rows), i.positions.repeat(rows)
    tables, ctx = i.block_tables.repeat(rows, 1), i.context_lens.repeat(rows)
    dev = pkg.device
    greedy = runtime.Sampling(torch.zeros(rows, device=dev), torch.zeros(rows, dtype=torch.int32, device=dev),
                              torch.ones(rows, device=dev), torch.zeros(rows, dtype=torch.int64, device=dev))
    ids = step(tokens, positions, tables, ctx, sampling=greedy).clone()
    logits = step.logits[0].clone()
    assert torch.equal(ids.long(), step.logits.argmax(-1)), "temperature 0 is the greedy id"
    # Random weights with a tied head make one id (the input's) all but certain at temperature 1,
    # so each setting's temperature spreads its allowed ids: the 20th (30th) largest logit sits
    # three temperatures below the largest.
    top = logits.double().sort(descending=True).values
    t_k, t_p = float(top[0] - top[19]) / 3, float(top[0] - top[29]) / 3
    p_sorted = torch.softmax(logits.double() / t_p, -1).sort(descending=True).values
    top_p = float((p_sorted[:29].sum() + p_sorted[:30].sum()) / 2)  # a top-p that holds exactly 30 ids
    settings = [(t_k, 20, 1.0)] * 4 + [(t_p, 0, top_p)] * 4
    sampling = runtime.Sampling(torch.tensor([s[0] for s in settings], device=dev),
                                torch.tensor([s[1] for s in settings], dtype=torch.int32, device=dev),
                                torch.tensor([s[2] for s in settings], device=dev),
                                torch.zeros(rows, dtype=torch.int64, device=dev))
    draws = torch.empty(DRAW_STEPS, rows, dtype=torch.int32, device=dev)
    for n in range(DRAW_STEPS):
        sampling.seed.copy_(torch.arange(rows, device=dev) + rows * n + 1)
        draws[n] = step(tokens, positions, tables, ctx, sampling=sampling)
    assert torch.equal(step.logits[0], logits), "the logits do not depend on the draws"
    for first, (temperature, top_k, p) in ((0, settings[0]), (4, settings[4])):
        allowed, probs = _allowed(logits, temperature, top_k, p)
        got = draws[:, first:first + 4].flatten().long()
        assert torch.isin(got, allowed).all(), f"a draw outside the allowed ids ({temperature}, {top_k}, {p})"
        counts = (got[:, None] == allowed[None, :]).sum(0).double()
        expected = probs * got.numel()
        small = expected < 5  # cells too small for χ² are pooled into one
        obs = torch.cat([counts[~small], counts[small].sum()[None]]) if small.any() else counts
        exp = torch.cat([expected[~small], expected[small].sum()[None]]) if small.any() else expected
        chi2 = float(((obs - exp) ** 2 / exp).sum())
        df = obs.numel() - 1
        print(f"{mode} temperature {temperature:.3g} top-k {top_k} top-p {p:.4f}: {allowed.numel()} ids, χ² {chi2:.1f} "
              f"on {df} degrees of freedom (0.1% bound {_chi2_bound(df):.1f})")
        assert allowed.numel() == (20 if top_k else 30)
        assert chi2 < _chi2_bound(df)


def test_a_draw_is_reproducible_and_a_graph_replay_draws_afresh(sampler):
    """The same seed and position give the same id, eagerly or replayed; a replay reads the
    seeds its captured tensors hold, so new seeds give new draws with no host work."""
    pkg, weights = sampler
    cache = random_kv_cache(pkg, NUM_BLOCKS, 41)
    case = random_case(pkg, [200], 1, NUM_BLOCKS, 41)
    i = case.inputs
    step = pkg.bind(weights, cache, "persistent")
    dev = pkg.device
    args = (i.tokens, i.positions, i.block_tables, i.context_lens)
    greedy = runtime.Sampling(torch.zeros(1, device=dev), torch.zeros(1, dtype=torch.int32, device=dev),
                              torch.ones(1, device=dev), torch.tensor([7], device=dev))
    step(*args, sampling=greedy)
    top = step.logits[0].double().sort(descending=True).values
    spread = float(top[0] - top[19]) / 3  # a temperature under which the top ids are not all but certain
    sampling = runtime.Sampling(torch.full((1,), spread, device=dev), torch.full((1,), 20, dtype=torch.int32, device=dev),
                                torch.ones(1, device=dev), torch.tensor([7], device=dev))
    eager = [int(step(*args, sampling=sampling)) for _ in range(2)]
    assert eager[0] == eager[1]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(*args, sampling=sampling)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(*args, sampling=sampling)
    graph.replay()
    assert int(out) == eager[0]
    seen = set()
    for s in range(64):
        sampling.seed.fill_(1000 + s)
        graph.replay()
        seen.add(int(out))
    assert len(seen) > 1, "new seeds, the same id every replay"


@pytest.mark.parametrize("accept", [0, 2, 5])
def test_a_sampled_verify_bands_verdict_accepts_the_drafts_it_draws(sampler, accept):
    """A 1 × 6 verify step of the sampling package, its row sampled at a temperature that spreads
    the top ids, whose drafts are set, one at a time with the package's own steps, to the ids the
    step draws for them (the same seed and positions draw the same ids): its verdict accepts
    exactly that many and emits them and the id drawn after them."""
    pkg, weights = sampler
    if not any(s.band.tokens == 6 for s in pkg.manifest.steps):
        pytest.skip("the sampling package has no 1 × 6 verify band")
    cache = random_kv_cache(pkg, NUM_BLOCKS, 51 + accept)
    case = random_case(pkg, _contexts(1, 6, 51 + accept, dead=False), 6, NUM_BLOCKS, 51 + accept)
    i = case.inputs
    step = pkg.bind(weights, cache, "persistent")
    dev = pkg.device
    greedy = runtime.Sampling(torch.zeros(1, device=dev), torch.zeros(1, dtype=torch.int32, device=dev),
                              torch.ones(1, device=dev), torch.tensor([11], device=dev))
    step(i.tokens, i.positions, i.block_tables, i.context_lens, sampling=greedy)
    top = step.logits[0].double().sort(descending=True).values
    sampling = runtime.Sampling(torch.full((1,), float(top[0] - top[19]) / 3, device=dev),
                                torch.full((1,), 20, dtype=torch.int32, device=dev), torch.ones(1, device=dev),
                                torch.tensor([11], device=dev))
    _check_verdict(step, i, accept, sampling=sampling)


DRAFTED = Path(PACKAGES) / "llama-3.2-1b-draft-probs-sm_90" / "sm_90"
VERDICT_ROUND = 2  # the sampling head's (compiler.ops.head.VERDICT_ROUND): the verdict's uniforms follow its draw's


@pytest.fixture(scope="module")
def drafted():
    if not (DRAFTED / "manifest.json").exists():
        pytest.skip("MONOBUILD_TEST_PACKAGES does not hold llama-3.2-1b-draft-probs-sm_90/sm_90 "
                    "(tests/data/llama-3.2-1b-draft-probs-sm_90.yaml)")
    pkg = runtime.load(DRAFTED)
    return pkg, pkg.bind_weights(random_state_dict(pkg, seed=5))


def _spread_sampling(step, i, rows: int, dev, top_k: list[int]) -> tuple[runtime.Sampling, float]:
    """Per-row settings at a temperature that spreads the top ids of the step's first token row
    (its 20th largest logit three temperatures below the largest), from a greedy step first."""
    greedy = runtime.Sampling(torch.zeros(rows, device=dev), torch.zeros(rows, dtype=torch.int32, device=dev),
                              torch.ones(rows, device=dev), torch.zeros(rows, dtype=torch.int64, device=dev),
                              torch.full((rows, 3, step.package.geometry.vocab), 1 / step.package.geometry.vocab,
                                         device=dev))
    step(i.tokens, i.positions, i.block_tables, i.context_lens, sampling=greedy)
    top = step.logits[0].double().sort(descending=True).values
    temperature = float(top[0] - top[19]) / 3
    return runtime.Sampling(torch.full((rows,), temperature, device=dev), torch.tensor(top_k, dtype=torch.int32,
                                                                                         device=dev),
                            torch.ones(rows, device=dev), torch.arange(rows, dtype=torch.int64, device=dev) + 7,
                            greedy.draft_probs), temperature


@pytest.mark.parametrize("mode", ["persistent", "staged"])
def test_a_verdict_with_the_drafts_distributions_is_the_references(drafted, mode):
    """A 2 × 4 verify step whose rows' drafts come with the proposer's distributions: row 0 samples
    from every id, row 1 within top-k 20 (the allowed set's threshold searched for); over
    seeds and proposals near and far from the target, each decided verdict is
    ``proposal_verdict``'s over the step's own logits and draws, and the rule both keeps and
    corrects drafts."""
    pkg, weights = drafted
    dev = pkg.device
    cache = random_kv_cache(pkg, NUM_BLOCKS, 61)
    case = random_case(pkg, _contexts(2, 4, 61, dead=False), 4, NUM_BLOCKS, 61)
    i = case.inputs
    step = pkg.bind(weights, cache, mode)
    sampling, temperature = _spread_sampling(step, i, 2, dev, [0, 20])
    target = torch.softmax(step.logits.double().view(2, 4, -1)[:, :3] / temperature, -1)
    gen = torch.Generator().manual_seed(61)
    kept = corrected = decided = 0
    for n in range(40):
        noise = torch.softmax(torch.randn(target.shape, generator=gen, dtype=torch.float64), -1).to(dev)
        mix = (n % 4) / 4  # from the target itself to a proposal unrelated to it
        sampling.draft_probs.copy_(((1 - mix) * target + mix * noise).float())
        sampling.seed.copy_(torch.arange(2, device=dev) + 2 * n + 100)
        ids = step(i.tokens, i.positions, i.block_tables, i.context_lens, sampling=sampling).clone()
        accepted, emitted = (t.tolist() for t in step.verdict)
        for b in range(2):
            span = slice(4 * b, 4 * b + 4)
            want = proposal_verdict(step.logits[span].cpu(), i.tokens[span].tolist(), sampling.draft_probs[b].cpu(),
                                    ids[span].tolist(), temperature, int(sampling.top_k[b]), 1.0,
                                    int(sampling.seed[b]), i.positions[span].tolist(), VERDICT_ROUND)
            if want[2] > 1e-4:
                decided += 1
                assert (accepted[b], emitted[b]) == want[:2], f"step {n}, row {b}"
                if b == 0:
                    kept += want[0]
                    corrected += want[0] < 3
    print(f"{mode}: {decided} of 80 verdicts decided; row 0 kept {kept} drafts, corrected {corrected} times")
    assert decided >= 60 and kept > 0 and corrected > 0


def test_the_rule_emits_ids_distributed_as_the_target(drafted):
    """The speculative-sampling rule's first emitted id, over 6000 seeds with one draft and one
    proposal (half its mass on the draft, the target's 2nd most likely id, which the proposal
    over-weights), is distributed as the target's softmax within its top 20 ids: a χ² test at the
    0.1% level."""
    pkg, weights = drafted
    dev = pkg.device
    cache = random_kv_cache(pkg, NUM_BLOCKS, 67)
    case = random_case(pkg, [400, 400], 4, NUM_BLOCKS, 67)
    i = case.inputs
    step = pkg.bind(weights, cache, "persistent")
    sampling, temperature = _spread_sampling(step, i, 2, dev, [20, 0])
    logits = step.logits[0].double().cpu()  # row 0's target: within its top 20 ids (a random model's
    kth = logits.topk(20).values[-1]  # long tail would leave every id too few draws for a χ² test)
    p = torch.softmax(torch.where(logits >= kth, logits, float("-inf")) / temperature, -1)
    draft = int(p.argsort(descending=True)[1])
    tokens = i.tokens.clone()
    q = torch.softmax(torch.randn(p.shape, generator=torch.Generator().manual_seed(67), dtype=torch.float64), -1) / 2
    q[draft] += 0.5
    sampling.draft_probs.copy_(q.float().expand(2, 3, -1))
    steps = 6000
    # each step's draft drawn from the proposal, as a proposer's is: the rule's output is then p
    drafts = torch.multinomial(q, steps, replacement=True, generator=torch.Generator().manual_seed(68))
    first = torch.empty(steps, dtype=torch.int64, device=dev)
    for n in range(steps):  # row 0's (row 1 has a context of its own)
        sampling.seed.copy_(torch.arange(2, device=dev) + 2 * n + 1)
        tokens[1] = int(drafts[n])
        step(tokens, i.positions, i.block_tables, i.context_lens, sampling=sampling)
        first[n] = step.verdict[1][0, 0]
    got = first.cpu()
    top = p.argsort(descending=True)[:40]
    counts = (got[:, None] == top[None, :]).sum(0).double()
    expected = p[top] * got.numel()
    small = expected < 5
    obs = torch.cat([counts[~small], (got.numel() - counts[~small].sum())[None]])
    exp = torch.cat([expected[~small], (got.numel() - expected[~small].sum())[None]])
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    df = obs.numel() - 1
    kept = float(((got == drafts) & (drafts == draft)).double().sum() / (drafts == draft).double().sum())
    keep = float(torch.minimum(torch.ones((), dtype=torch.float64), p[draft] / q[draft]))
    print(f"χ² {chi2:.1f} on {df} degrees of freedom (0.1% bound {_chi2_bound(df):.1f}); the over-weighted draft "
          f"emitted {float((got == draft).double().mean()):.3f} of steps, p {float(p[draft]):.3f}; kept where "
          f"proposed {kept:.3f}, min(1, p/q) {keep:.3f}")
    assert chi2 < _chi2_bound(df)



SPLIT = Path(PACKAGES) / "llama-3.2-1b-tp2-sm_90" / "sm_90"


@pytest.mark.parametrize("rows,tokens", [(1, 1), (3, 1), (1, 3)])
def test_split_ranks_on_one_device_match_the_reference(rows, tokens):
    """Llama-3.2-1B split over 2 ranks (``tests/data/llama-3.2-1b-tp2-sm_90.yaml``), both ranks on
    this GPU (``bind_ranks``), each on its shard of one random checkpoint and its KV heads' caches:
    the ranks' logits side by side within 1.5× the bf16 framework's error of the whole model's
    float64 step, the same ids on both ranks, the reference's ids where its top-2 margin decides,
    each rank's new K/V its heads' of the reference's; and a second step, whose cross-rank
    targets are past the first's, the same."""
    from monobuild.parallel import TensorParallel
    from monobuild.runtime.shards import shard_state_dict
    from monobuild.runtime.weights import pack_hf_state_dict

    if not (SPLIT / "manifest.json").exists():
        pytest.skip("MONOBUILD_TEST_PACKAGES does not hold llama-3.2-1b-tp2-sm_90/sm_90 "
                    "(tests/data/llama-3.2-1b-tp2-sm_90.yaml)")
    pkg = runtime.load(SPLIT)
    g, tp = pkg.geometry, TensorParallel(2)
    sd = random_state_dict(pkg, seed=9)
    seed = 300 + 10 * rows + tokens
    cache = random_kv_cache(pkg, NUM_BLOCKS, seed)
    i = random_case(pkg, _contexts(rows, tokens, seed, dead=True), tokens, NUM_BLOCKS, seed).inputs
    heads = [tp.kv_heads(g, rank) for rank in range(2)]
    rank_caches = [runtime.KVCache(tuple(t[..., h, :].clone() for t in cache.k),
                                   tuple(t[..., h, :].clone() for t in cache.v)) for h in heads]
    step = pkg.bind_ranks([shard_state_dict(sd, g, tp, rank) for rank in range(2)], rank_caches)
    ranks = step.band_for(rows, tokens)
    for band in ranks:
        band.buffers.logits.fill_(float("nan"))
        band.buffers.next_ids.fill_(-1)
    ids = step(i.tokens, i.positions, i.block_tables, i.context_lens).clone()
    m = rows * tokens
    logits = torch.cat([band.buffers.logits[:m] for band in ranks], dim=-1)[:, :g.vocab]
    assert not torch.isnan(logits).any(), "logits left unwritten"
    assert torch.equal(ranks[1].buffers.next_ids[:m], ranks[0].buffers.next_ids[:m])
    whole = pack_hf_state_dict(sd, g, pkg.dtype, pkg.device)
    ref_k, ref_v = [t.clone() for t in cache.k], [t.clone() for t in cache.v]
    bf_k, bf_v = [t.clone() for t in cache.k], [t.clone() for t in cache.v]
    ref = reference_step(g, whole, ref_k, ref_v, i.tokens, i.positions, i.block_tables, i.context_lens, tokens)
    bf16 = reference_step(g, whole, bf_k, bf_v, i.tokens, i.positions, i.block_tables, i.context_lens, tokens,
                          compute_dtype=torch.bfloat16)
    ours, framework = _rel(logits, ref), _rel(bf16, ref)
    print(f"split 2 ranks {rows}x{tokens}: ours {ours:.2e}, bf16 framework {framework:.2e}")
    assert ours <= 1.5 * framework
    top2 = ref.topk(2, dim=-1).values
    err = torch.maximum((logits.double() - ref).abs().amax(-1), (bf16.double() - ref).abs().amax(-1))
    decided = top2[:, 0] - top2[:, 1] > err
    assert torch.equal(ids.long()[decided], ref.argmax(-1)[decided])
    for rank, h in enumerate(heads):
        for got, want, framework_kv in zip(rank_caches[rank].k + rank_caches[rank].v, ref_k + ref_v, bf_k + bf_v):
            want, framework_kv = want[..., h, :].double().nan_to_num(0), framework_kv[..., h, :].double().nan_to_num(0)
            ours_kv = (got.double().nan_to_num(0) - want).abs().max()
            assert ours_kv <= 1.5 * (framework_kv - want).abs().max() + want.abs().max() * 2**-8
    again = step(i.tokens, i.positions, i.block_tables, i.context_lens)  # the appends land in the same slots
    assert torch.equal(again, ids)


def test_one_rank_a_process_matches_the_ranks_on_one_device(tmp_path):
    """The split package bound one rank a process (``bind(..., group=)``): two processes on this
    GPU (``tests/ranks_worker.py``), a gloo group, each rank's buffers mapped into the other's
    process at bind. Each rank's ids, its step again and its step replayed from a CUDA graph it
    captured, are bind_ranks' ids on the same shards and inputs, bit for bit (the same programs
    add the same values in the same order)."""
    import json

    from monobuild.parallel import TensorParallel
    from monobuild.runtime.shards import shard_state_dict

    if not (SPLIT / "manifest.json").exists():
        pytest.skip("MONOBUILD_TEST_PACKAGES does not hold llama-3.2-1b-tp2-sm_90/sm_90")
    rows, tokens, seed = 3, 1, 331
    contexts = _contexts(rows, tokens, seed, dead=True)
    root = Path(__file__).resolve().parent.parent
    procs = [subprocess.Popen([sys.executable, "-m", "tests.ranks_worker", str(SPLIT), str(rank),
                               str(tmp_path / "store"), str(tmp_path), json.dumps(contexts), str(tokens), str(seed)],
                              cwd=root, stderr=subprocess.PIPE, text=True) for rank in range(2)]
    errors = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=420)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail("the ranks' processes did not finish in 420 s")
        if proc.returncode:
            errors.append(err[-3000:])
    assert not errors, "\n".join(errors)
    pkg = runtime.load(SPLIT)
    g, tp = pkg.geometry, TensorParallel(2)
    sd = random_state_dict(pkg, seed=9)
    cache = random_kv_cache(pkg, NUM_BLOCKS, seed)
    i = random_case(pkg, contexts, tokens, NUM_BLOCKS, seed).inputs
    heads = [tp.kv_heads(g, rank) for rank in range(2)]
    caches = [runtime.KVCache(tuple(t[..., h, :].clone() for t in cache.k),
                              tuple(t[..., h, :].clone() for t in cache.v)) for h in heads]
    want = pkg.bind_ranks([shard_state_dict(sd, g, tp, rank) for rank in range(2)], caches)(
        i.tokens, i.positions, i.block_tables, i.context_lens).cpu()
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        for what in ("first", "again", "graph"):
            assert torch.equal(got[what], want), (rank, what, got[what], want)
