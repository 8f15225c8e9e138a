"""Human and JSON views of a plan and of a package."""

from __future__ import annotations

from dataclasses import asdict

from ..compiler.balance import unit_spread
from ..compiler.plan import Plan
from ..footprint import Footprint, footprint
from ..manifest import Manifest


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def plan_json(plan: Plan, bandwidth: float, context: int) -> dict:
    r = plan.recipe
    return {
        "recipe": r.name, "target": r.deployment.target.name, "sm_count": r.deployment.sm_count,
        "tensor_parallel": r.deployment.tensor_parallel, "schedule": plan.schedule_source, "bandwidth": bandwidth,
        "context": context,
        "programs": [
            {"name": p.name, "kind": p.kind, "mode": p.mode, "band": asdict(p.band), "grid": p.grid,
             "num_warps": p.num_warps, "launch": {"pdl": p.launch_pdl, "cooperative": p.launch_cooperative},
             "stages": [asdict(s) for s in p.stages], "regions": [asdict(x) for x in p.regions],
             "syncs": [asdict(s) for s in p.syncs], "counters": p.counters, "args": [asdict(a) for a in p.args],
             "cross_rank": [asdict(c) for c in p.cross_rank],
             "ops": [{"name": op.name, "body": op.body, "prefetch": op.prefetch,
                      "weights": [asdict(w) for w in op.weights], "needs": [asdict(n) for n in op.needs]}
                     for op in p.ops],
             "params": dict(p.params)}
            for p in plan.programs
        ],
        "steps": [
            {"band": asdict(s.band), "mode": s.mode, "launches": len(s.launches),
             "layer_programs": sorted({x.program for x in s.launches if x.layer is not None}),
             "bytes": plan.step_bytes(s.band, context),
             "roofline_ms": plan.step_bytes(s.band, context) / bandwidth * 1e3}
            for s in plan.steps
        ],
    }


def _ranks_line(r) -> list[str]:
    """Under tensor parallelism, what one rank holds (its programs' shapes)."""
    n = r.deployment.tensor_parallel
    if n == 1:
        return []
    g, rank = r.geometry, r.rank_geometry
    replicas = r.deployment.tp.kv_replicas(g)
    return [f"tensor parallel over {n} ranks, each: heads {rank.q_heads}/{rank.kv_heads}"
            + (f" (each KV head on {replicas} ranks)" if replicas > 1 else "")
            + f", intermediate {rank.intermediate}, vocab rows {rank.vocab} of {r.deployment.tp.padded_vocab(g)}"]


def plan_text(plan: Plan, bandwidth: float, context: int) -> str:
    r = plan.recipe
    g = r.geometry
    routed = ""
    if g.experts:
        e = g.experts
        routed = (f", {len(g.moe_layers)} routed: {e.count} experts of {e.intermediate}, {e.top_k} a token"
                  + (" (renormalized)" if e.normalize else ""))
    lines = [
        f"{r.name}: {g.family}, {g.layers} layers{routed}, hidden {g.hidden}, heads {g.q_heads}/{g.kv_heads}×"
        f"{g.head_dim}, intermediate {g.intermediate}, vocab {g.vocab}",
        *_ranks_line(r),
        f"target {r.deployment.target.name} × {r.deployment.sm_count} units; schedule {plan.schedule_source}",
        "",
    ]
    persistent = "persistent" in r.deployment.modes
    for p in plan.programs:
        if persistent and p.mode == "staged" and len(p.stages) == 1 and p.kind != "embed":
            continue  # the staged programs repeat the persistent one's stages
        flags = ", ".join(f for f, on in (("PDL", p.launch_pdl), ("cooperative", p.launch_cooperative)) if on)
        lines.append(f"program {p.name}: grid {p.grid} × {p.num_warps} warps{' (' + flags + ')' if flags else ''}")
        ops = {op.name: op for op in p.ops}
        for s in p.stages:
            moved = s.weight_bytes + s.io_bytes + s.kv_bytes_per_token * g.attended(context)
            routed = f" + {_mb(s.bytes_per_expert)} a chosen expert" if s.bytes_per_expert else ""
            spread = unit_spread(ops[s.name], p.grid) if p.executor == "gluon" else None
            spread_text = f"; {spread.text()}" if spread else ""
            lines.append(f"  stage {s.index} {s.name:<8} {s.tasks:>6} tasks  {_mb(moved):>11}{routed}  {s.task}"
                         f"{spread_text}")
        for op in p.ops:
            if op.needs:
                needs = "; ".join(f"{n.region}: {n.part}" for n in op.needs)
                lines.append(f"  needs  {op.name:<8} {needs}")
        for x in p.regions:
            readers = ", ".join(x.readers) or "next program"
            lines.append(f"  region {x.name:<9} {x.kind:<8} {x.dtype} {list(x.shape)}: {x.writer or 'before launch'}"
                         f" → {readers}")
        for e in p.syncs:
            lines.append(f"  sync   #{e.counter} {e.producer} → {e.consumer}: target (epoch+1)×{e.signals_per_epoch},"
                         f" orders {', '.join(e.regions) or 'nothing but stage order'}")
        lines.append("")
    lines.append(f"roofline at context {context}, {bandwidth / 1e12:.2f} TB/s"
                 + (f", each routed layer's rows choosing as many distinct experts as they can (at most "
                    f"min({g.experts.count}, rows × {g.experts.top_k}); a step's own count is in its record, "
                    "which monobuild bench reads)" if g.experts else "") + ":")
    lines.append(f"  {'band':<6} {'mode':<11} {'launches':>8} {'bytes':>12} {'floor':>10}")
    for s in plan.steps:
        nbytes = plan.step_bytes(s.band, context)
        lines.append(f"  {s.band.name:<6} {s.mode:<11} {len(s.launches):>8} {_mb(nbytes):>12} "
                     f"{nbytes / bandwidth * 1e3:>8.3f} ms")
    return "\n".join(lines)


def _footprints(m: Manifest) -> list[Footprint]:
    return [footprint(m, mode) for mode in m.deployment.modes]


def inspect_json(m: Manifest) -> dict:
    return {
        "recipe": m.recipe, "target": m.target, "sm_count": m.sm_count, "toolchain": dict(m.toolchain),
        "deployment": m.deployment.to_json(),
        "memory": [{"mode": f.mode, "total": f.total, "rope": f.rope,
                    "bands": [{"band": asdict(b.band), **{k: v for k, v in asdict(b).items() if k != "band"}}
                              for b in f.bands]}
                   for f in _footprints(m)],
        "programs": [
            {"name": p.name, "kind": p.kind, "mode": p.mode, "band": asdict(p.band), "grid": p.grid,
             "block": p.block, "shared_bytes": p.shared_bytes, "resources": asdict(p.resources),
             "fits": p.grid <= p.resources.ctas_per_unit * m.sm_count, "fingerprint": p.fingerprint,
             "code": p.code}
            for p in m.programs
        ],
    }


def _serves(m: Manifest) -> str:
    """What the package serves, as an engine matches it: the head, the bands (a verify band's
    drafts' distributions), the modes, the dtypes and the KV cache's page, the longest context."""
    d = m.deployment
    weights = (f"{d.quant.fmt} projections in {d.quant.block_rows}×{d.quant.block_cols} scale blocks, "
               f"{d.dtypes.weights} otherwise" if d.quant else f"{d.dtypes.weights} weights")
    drafts = " (verify bands take the drafts' distributions)" if d.draft_probs else ""
    ranks = f"each of {d.tensor_parallel} tensor-parallel ranks: " if d.tensor_parallel > 1 else ""
    return (f"serves: {ranks}head {d.head}; bands {', '.join(b.name for b in d.bands)}{drafts}; "
            f"modes {', '.join(d.modes)}; "
            f"{weights}; {d.kv_cache.dtype} KV cache in pages of {d.kv_cache.block_size}; "
            f"context up to {d.max_context}")


def inspect_text(m: Manifest) -> str:
    tools = ", ".join(f"{k} {v}" for k, v in m.toolchain)
    lines = [f"{m.recipe} for {m.target} × {m.sm_count} units ({tools})", _serves(m),
             f"{'program':<26} {'grid':>5} {'thr':>4} {'regs':>5} {'spill':>5} {'smem':>7} {'CTA/unit':>8}"
             f" {'fits':>4}  fingerprint"]
    for p in m.programs:
        r = p.resources
        fits = "yes" if p.grid <= r.ctas_per_unit * m.sm_count else "NO"
        lines.append(f"{p.name:<26} {p.grid:>5} {p.block:>4} {r.registers:>5} {r.spill_bytes:>5} {r.shared_bytes:>7}"
                     f" {r.ctas_per_unit:>8} {fits:>4}  {p.fingerprint[:16]}")
    lines.append("device memory a bound step holds beyond the engine's weights and KV cache, which it reads in "
                 "place (given on the device, contiguous, aligned):")
    for f in _footprints(m):
        bands = ", ".join(f"{b.band.name} {_mb(b.total)}" for b in f.bands)
        lines.append(f"  {f.mode}: {_mb(f.total)} of step buffers ({bands}; RoPE table {_mb(f.rope)})")
    return "\n".join(lines)


def bench_text(result) -> str:
    """The bench table: one line per band × context × mode; "×r1t1" is the band's median over the
    1-row step's in the same run, context and mode (when the run has it); for a routed model,
    "experts" is how many distinct experts a routed layer's rows chose in the timed step (the
    roofline's bytes count those), on average over its routed layers. A ``--floor`` run adds
    the floor's four variants (bench/floor.py) and, below, how much of each case's time they are."""
    floors = any(r.floors for r in result.rows)
    routed = any(r.experts is not None for r in result.rows)  # a routed model: the experts its layers chose
    names = (("per_layer", "floor"), ("one_launch", "1-launch"), ("streaming", "streaming"),
             ("streaming_one_launch", "str+1-l"))
    floor_head = "".join(f" {label:>9}" for _, label in names) if floors else ""
    lines = [f"{result.package} on {result.device}; device-to-device copy {result.copy_gbps / 1e9:.0f} GB/s",
             f"{'band':6} {'ctx':>6} {'mode':10} {'MB moved':>9} {'roofline':>9}{floor_head} {'median':>9} {'p90':>9} "
             f"{'GB/s':>6} {'%roof':>6} {'×r1t1':>6} {'torch.compile+graph':>20} {'speedup':>8} {'base≠ours':>9}"
             + (f" {'experts':>7}" if routed else "")]
    for r in result.rows:
        base = f"{r.baseline.median_ms:.3f} ms" if r.baseline else "—"
        speed = f"{r.speedup:.2f}×" if r.speedup else "—"
        diff = f"{r.baseline_rel_diff:.1e}" if r.baseline_rel_diff is not None else "—"
        ratio = result.vs_one_row(r)
        vs_one = f"{ratio:.2f}×" if ratio is not None else "—"
        floor_cols = ""
        if floors:
            floor_cols = "".join(f" {f.median_ms:>6.3f} ms" if f else f" {'—':>9}"
                                 for f in (r.floor(variant) for variant, _ in names))
        lines.append(f"{r.band:6} {r.context:>6} {r.mode:10} {r.bytes / 1e6:>9.1f} {r.roofline_ms:>6.3f} ms{floor_cols} "
                     f"{r.ours.median_ms:>6.3f} ms {r.ours.p90_ms:>6.3f} ms {r.gbps:>6.0f} {r.roofline_pct:>5.1f}% "
                     f"{vs_one:>6} {base:>20} {speed:>8} {diff:>9}" + (f" {r.experts:>7.1f}" if routed else ""))
    if floors:
        lines += ["", "floor: the step's bytes through its own launches and sync edges, nothing else; 1-launch: every "
                      "layer and the head in one launch; streaming: each CTA's copies running ahead of its waits; "
                      "str+1-l: both. Roofline ÷ each, and each ÷ ours:",
                  f"{'band':6} {'ctx':>6} {'roofline':>9}" + "".join(f" {label:>9}" for _, label in names)
                  + "".join(f" {'roof/' + label:>14}" for _, label in names)
                  + "".join(f" {label + '/ours':>14}" for _, label in names)]
        for r in (r for r in result.rows if r.floors):
            timings = [r.floor(variant) for variant, _ in names]  # None: a variant the target has not
            lines.append(f"{r.band:6} {r.context:>6} {r.roofline_ms:>6.3f} ms"
                         + "".join(f" {f.median_ms:>6.3f} ms" if f else f" {'—':>9}" for f in timings)
                         + "".join(f" {100 * r.roofline_ms / f.median_ms:>13.1f}%" if f else f" {'—':>14}"
                                   for f in timings)
                         + "".join(f" {100 * f.median_ms / r.ours.median_ms:>13.1f}%" if f else f" {'—':>14}"
                                   for f in timings))
    return "\n".join(lines)
