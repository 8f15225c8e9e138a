"""Child process of test_tensor_parallel: one decode step of a tensor-parallel package's staged
programs on every rank under the interpreter (``InterpretedRanks``), twice (the second step's
cross-rank targets are the first's plus a step), against the whole model's float64 reference.
A case with ``head: logits`` reports the logits every rank gathered. A case with ``silent`` (a
debug build) leaves one launch of one rank out instead, and reports what the other ranks'
cross-rank waits logged when they gave up, then steps again.

Run with TRITON_INTERPRET=1. Reads a case as JSON from argv, prints one JSON line.
"""

import dataclasses
import json
import sys
from pathlib import Path

import torch
import yaml

from monobuild.bench.checkpoints import random_hf_state_dict
from monobuild.bench.reference import greedy_verdict, reference_step, sample_reference
from monobuild.compiler.interpret import InterpretedRanks
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe
from monobuild.compiler.schedule import load_schedule, parse_schedule
from monobuild.runtime.buffers import Sampling, StepInputs
from monobuild.runtime.hangs import WaitTimeout, check_ranks_hang_logs
from monobuild.runtime.shards import shard_state_dict
from monobuild.runtime.weights import pack_hf_state_dict

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
SAMPLING = [(0.0, 0, 1.0), (0.8, 0, 1.0), (1.0, 5, 1.0), (1.5, 0, 0.3), (1.2, 3, 0.9)]  # (temperature, top-k, top-p)
DECIDED = 1e-4  # a draw closer than this to changing is not compared (numerics_worker's bound)


def main(case: dict, workdir: Path) -> dict:
    rows, tokens, dtype, n = case["rows"], case["tokens"], case["dtype"], case["ranks"]
    config = json.loads((Path(__file__).parent / "data" / case["config"]).read_text())
    config.update(case.get("config_changes", {}))
    (workdir / "config.json").write_text(json.dumps(config))
    mode = case.get("mode", "staged")  # persistent: planned for one CTA (the interpreter's ranks side by side)
    doc = {"config": "config.json", "target": "sm_90", "sm_count": 1 if mode == "persistent" else 4, "dtype": dtype,
           "kv_cache": {"dtype": dtype, "block_size": 16}, "bands": [rows] if tokens == 1 else [1],
           "max_context": 512, "head": case.get("head", "ids"), "modes": [mode], "tensor_parallel": n,
           "debug_wait_spins": case.get("debug_wait_spins", 0)}
    if tokens > 1:
        doc["verify"] = {"rows": rows, "tokens": tokens}
    path = workdir / "tiny.yaml"
    path.write_text(yaml.safe_dump(doc))
    recipe = load_recipe(path)
    band = next(b for b in recipe.deployment.bands if (b.rows, b.tokens) == (rows, tokens))
    g, r, tp = recipe.geometry, recipe.rank_geometry, recipe.deployment.tp
    t = DTYPES[dtype]
    gen = torch.Generator().manual_seed(case["seed"])
    sd = random_hf_state_dict(g, t, gen)
    blocks, block_size, pages = 40 * rows, 16, 32
    shape = (blocks, block_size, g.kv_heads, g.head_dim)
    k_caches = [torch.randn(shape, generator=gen).to(t) for _ in range(g.layers)]
    v_caches = [torch.randn(shape, generator=gen).to(t) for _ in range(g.layers)]
    heads = [tp.kv_heads(g, rank) for rank in range(n)]
    rank_k = [[c[..., h, :].clone() for c in k_caches] for h in heads]
    rank_v = [[c[..., h, :].clone() for c in v_caches] for h in heads]
    weights = [pack_hf_state_dict(shard_state_dict(sd, g, tp, rank), r, t) for rank in range(n)]
    for rank, w in enumerate(weights):  # padding rows that would win every argmax, were they not left out
        start, stop = tp.vocab_range(g, rank)
        w.w_head[max(0, min(stop, g.vocab) - start):] = 30.0
    ctx = torch.tensor(case["context_lens"], dtype=torch.int32)
    tables = torch.randperm(blocks, generator=gen)[: rows * pages].view(rows, pages).to(torch.int32)
    positions = torch.cat([torch.arange(int(c) - tokens, int(c)) if c else torch.zeros(tokens, dtype=torch.long)
                           for c in ctx]).to(torch.int32)
    ids = torch.randint(0, g.vocab, (rows * tokens,), generator=gen, dtype=torch.int32)
    ref_k, ref_v = [c.clone() for c in k_caches], [c.clone() for c in v_caches]
    ref = reference_step(g, pack_hf_state_dict(sd, g, t), ref_k, ref_v, ids, positions, tables, ctx, tokens)

    schedule = load_schedule("sm_90")
    if mode == "persistent":
        schedule = parse_schedule({"defaults": {**schedule.defaults.__dict__, "ctas_per_sm": 1}}, "one CTA")
    plan = plan_recipe(recipe, schedule)
    step = InterpretedRanks(plan, band, weights, rank_k, rank_v, mode)
    sampling = None
    if recipe.deployment.head == "sample":  # the rows' settings: greedy, over every id, within top-k / top-p
        settings = [SAMPLING[(case["seed"] + b) % len(SAMPLING)] if b else SAMPLING[0] for b in range(rows)]
        sampling = Sampling(torch.tensor([x[0] for x in settings], dtype=torch.float32),
                            torch.tensor([x[1] for x in settings], dtype=torch.int32),
                            torch.tensor([x[2] for x in settings], dtype=torch.float32),
                            torch.randint(-2**62, 2**62, (rows,), generator=gen, dtype=torch.int64), None)
    inputs = StepInputs(ids, positions, tables, ctx, sampling)
    if "silent" in case:
        return _silent_rank(case["silent"], plan, step, inputs, ref)
    ranks = step(inputs)
    if sampling is not None:  # each token row's draw against the reference's over the gathered logits
        logits = ranks[0].logits
        draws = [sample_reference(logits[m].float(), float(sampling.temperature[m // tokens]),
                                  int(sampling.top_k[m // tokens]), float(sampling.top_p[m // tokens]),
                                  int(sampling.seed[m // tokens]), int(positions[m]))
                 for m in range(rows * tokens)]
        return {"rel_err": ((logits.double() - ref).norm() / ref.norm()).item(),
                "logits_same": all(torch.equal(b.logits, logits) for b in ranks),
                "ids_same": all(torch.equal(b.next_ids, ranks[0].next_ids) for b in ranks),
                "samples_decided": sum(int(margin > DECIDED) for _, margin in draws),
                "samples_ok": all(int(ranks[0].next_ids[m]) == x for m, (x, margin) in enumerate(draws)
                                  if margin > DECIDED),
                "sampled": ranks[0].next_ids.tolist(), "sampled_wanted": [x for x, _ in draws]}
    if recipe.deployment.head == "logits":  # every rank gathers the whole vocabulary's logits
        return {"rel_err": ((ranks[0].logits.double() - ref).norm() / ref.norm()).item(),
                "unwritten_logits": int(torch.isnan(ranks[0].logits).sum()), "shape": list(ranks[0].logits.shape),
                "logits_same": all(torch.equal(b.logits, ranks[0].logits) for b in ranks)}
    logits = torch.cat([b.logits for b in ranks], dim=-1)
    first = [b.tp_counters.clone() for b in ranks]
    again = step(inputs)  # the same step: the appends rewrite the same slots, the counts grow by a step
    second = [b.tp_counters.clone() for b in again]
    next_ids = [b.next_ids.tolist() for b in ranks]
    # each rank's tile maxima leave its padding rows of the vocabulary out (their logits are 0)
    head = next(p for p in plan.programs if p.kind == "head" and p.band == band and any(
        op.name == "logits" for op in p.ops))
    bn = head.param("BN")
    masked = True
    for rank, b in enumerate(ranks):
        start, stop = tp.vocab_range(g, rank)
        valid = max(0, min(stop, g.vocab) - start)
        real = b.logits[:, :valid]
        for tile in range(-(-r.vocab // bn)):
            part = real[:, tile * bn:(tile + 1) * bn]
            want = part.max(-1).values if part.shape[1] else torch.full((real.shape[0],), float("-inf"))
            masked &= torch.equal(b.scratch["tile_max"][:, tile], want)
    kv_err = 0.0
    for rank, h in enumerate(heads):
        for got, want in zip(rank_k[rank] + rank_v[rank], ref_k + ref_v):
            want = want[..., h, :].double()
            kv_err = max(kv_err, ((got.double() - want).abs().max() / want.abs().max()).item())
    verdict = {}
    if tokens > 1:
        live = [b for b in range(rows) if ctx[b]]
        want_accepted, want_emitted = greedy_verdict(ranks[0].next_ids, ids, tokens)
        verdict = {"verdicts_same": all(torch.equal(b.verdict["emitted"], ranks[0].verdict["emitted"])
                                        and torch.equal(b.verdict["accepted"], ranks[0].verdict["accepted"])
                                        for b in ranks),
                   "verdict_ok": all(ranks[0].verdict["accepted"].tolist()[b] == want_accepted[b]
                                     and ranks[0].verdict["emitted"].tolist()[b] == want_emitted[b] for b in live)}
    return {
        "rel_err": ((logits[:, :g.vocab].double() - ref).norm() / ref.norm()).item(),
        "unwritten_logits": int(torch.isnan(logits).sum()),
        "ids_same": all(x == next_ids[0] for x in next_ids),
        "ids_match": next_ids[0] == ref.argmax(-1).tolist(),
        "padding_masked": masked,
        "hidden_same": all(torch.equal(b.act[0], ranks[0].act[0]) and torch.equal(b.act[1], ranks[0].act[1])
                           for b in ranks),
        "kv_rel_err": kv_err,
        "counters_first": [c.tolist() for c in first],
        "counters_second": [c.tolist() for c in second],
        "launches": [x.program for x in step.ranks[0].step.launches],
        # a step's signals into each site from each rank, as the plan declares them: a count per
        # CTA of each launch whose program signals the site
        "planned_signals": [sum(plan.program(x.program).grid for x in step.ranks[0].step.launches
                                for c in plan.program(x.program).cross_rank if c.kind == "signal" and c.site == site)
                            for site in range(4)],
        "grids": {p.name: p.grid for p in plan.programs},
        **verdict,
    }


def _silent_rank(silent: dict, plan, step: InterpretedRanks, inputs: StepInputs, ref: torch.Tensor) -> dict:
    """The step with rank ``silent['rank']``'s launch of ``silent['program']`` at layer
    ``silent['layer']`` left out: the records the ranks' logs decode to (``check_ranks_hang_logs``,
    the plan standing in for the manifest: the same programs and steps), then a whole step after
    the reset, against the reference."""
    spec = step.ranks[0].step
    left_out = next(k for k, x in enumerate(spec.launches)
                    if x.program == silent["program"] and x.layer == silent["layer"])
    for k in range(len(spec.launches)):
        for rank, r in enumerate(step.ranks):
            if (rank, k) != (silent["rank"], left_out):
                r.launch(k, inputs)
    records = []
    try:
        check_ranks_hang_logs(plan, [(r.step, r.buffers) for r in step.ranks])
    except WaitTimeout as e:
        records = [dataclasses.asdict(x) | {"line": x.line()} for x in e.records]
    reset = [int(b.tp_counters.abs().sum() + b.counters.abs().sum() + b.hang_log.abs().sum()) for b in
             (r.buffers for r in step.ranks)]
    again = step(inputs)
    return {"records": records, "reset": reset, "grids": {p.name: p.grid for p in plan.programs},
            "ids_after": again[0].next_ids.tolist(), "ids_ref": ref.argmax(-1).tolist(),
            "ids_same_after": all(torch.equal(b.next_ids, again[0].next_ids) for b in again)}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]), Path(sys.argv[2]))))
