"""Profiling builds (``--stage-clock``): the clocks are in the code only when asked for, the
contracts still hold, and the host-side decoding turns known clocks into the right table."""

import torch
from click.testing import CliRunner

from monobuild.bench.clock import placement, stage_rows
from monobuild.cli.main import main
from monobuild.manifest import read_manifest

from .conftest import compile_tiny


def test_a_clock_build_clocks_every_stage_and_keeps_its_contracts(tmp_path):
    recipe, plain = compile_tiny(tmp_path)
    _, clocked = compile_tiny(tmp_path, "--stage-clock")
    assert clocked.parent.name == "tiny-clock"
    manifest = read_manifest(clocked)
    assert manifest.deployment.stage_clock is True
    for p in manifest.programs:
        ptx = (clocked / "ir" / f"{p.name}.ptx").read_text()
        names = [a.name for a in p.args]
        if p.kind == "embed":
            assert "stage_clock" not in names and "%globaltimer" not in ptx
        else:  # a start and an end per stage
            assert "stage_clock" in names and ptx.count("%globaltimer") >= 2 * len(p.stages), p.name
    for p in read_manifest(plain).programs:
        assert "stage_clock" not in [a.name for a in p.args]
        assert "%globaltimer" not in (plain / "ir" / f"{p.name}.ptx").read_text()
    result = CliRunner().invoke(main, ["check", str(clocked)])
    assert result.exit_code == 0, result.output

    result = CliRunner().invoke(main, ["compile", str(recipe), "--out", str(tmp_path / "amd"), "--stage-clock",
                                       "--target", "gfx942", "--sm-count", "4", "--cache", str(tmp_path / "cache")])
    assert result.exit_code == 2 and "stage_clock" in result.output and "sm_90 only" in result.output
    assert not (tmp_path / "amd").exists()


def test_stage_rows_reads_spans_work_and_waits(tmp_path):
    _, clocked = compile_tiny(tmp_path, "--stage-clock")
    manifest = read_manifest(clocked)
    programs = {p.name: p for p in manifest.programs}
    spec = next(s for s in manifest.steps if s.mode == "persistent" and s.band.rows == 1)
    grid = max(programs[launch.program].grid for launch in spec.launches)
    slots = max(programs[launch.program].clock_slots for launch in spec.launches)
    clock = torch.zeros(len(spec.launches), grid, slots, dtype=torch.int64)
    for i, launch in enumerate(spec.launches):
        p = programs[launch.program]
        if p.kind == "embed":
            continue
        for c in range(p.grid):
            clock[i, c, 0] = c % 4  # the SM: 4 SMs, CTAs dealt round-robin
            for k in (stage.index for stage in p.stages):
                start = 1_000_000 * i + 10_000 * k + 100 * c  # CTA c starts 0.1 µs after CTA c−1
                clock[i, c, 1 + 2 * k] = start
                clock[i, c, 2 + 2 * k] = start + 2_000 + 1_000 * (c == p.grid - 1)  # the last CTA is slow
    rows = {(r.program, r.stage): r for r in stage_rows(clock, programs, spec.launches)}
    layer = next(p for p in programs.values() if p.kind == "layer" and p.mode == "persistent" and p.band == spec.band)
    attn = rows[(layer.name, "attn")]
    assert attn.launches == sum(1 for launch in spec.launches if launch.program == layer.name)
    assert attn.work_median_us == 2.0 and attn.work_max_us == 3.0
    # each CTA waits from its previous stage's end to this stage's start: 10 µs − 2 µs (the slow one: 7 µs)
    assert attn.wait_median_us == 8.0 and attn.wait_max_us == 8.0
    first = layer.stages[0].name  # qkv, or norm_qkv where the table makes the norms stages
    assert rows[(layer.name, first)].wait_median_us is None  # a launch's first stage
    span = (100 * (layer.grid - 1) + 3_000) / 1e3  # first start to the slow CTA's end
    assert abs(attn.span_us - attn.launches * span) < 1e-6
    # no CTA inside a stage between qkv's slow CTA ending and attn's first CTA starting
    assert abs(attn.gap_us - attn.launches * (10 - span)) < 1e-6
    # a layer launch's first stage: from the previous launch's last end (the embedding has no
    # clocks, so the first layer's first stage has nothing before it and counts no gap)
    opening = rows[(layer.name, first)]
    last_stage = len(layer.stages) - 1
    assert abs(opening.gap_us - (opening.launches - 1) * (1_000 - 10 * last_stage - span)) < 1e-6
    assert placement(clock, 1, layer.grid) == {layer.grid // 4: 4}
