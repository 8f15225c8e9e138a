"""The roofline's numerator from a manifest: the bytes a step must move at a given context.

Every weight once, the KV the rows attend to, the activations in and out: summed over the
stages of the step's launches as the planner recorded them (``Plan.step_bytes`` on the compile
side computes the same from the plan; a CPU test holds them equal). A routed layer's experts
count once for each distinct expert its rows chose in the step (``selected``, from the step's own
record, ``DecodeStep.routed``), or, without it, as many as its rows can choose.
"""

from __future__ import annotations

from ..manifest import Manifest
from ..schema import Band, Geometry, Launch, Stage


def stage_bytes(g: Geometry, stage: Stage, launch: Launch, band: Band, context: int,
                selected: dict[int, int] | None = None) -> int:
    """The bytes one stage of a launch must move: a routed stage's for the experts ``selected``
    by the launch's layer, or as many as the band's rows can choose."""
    return stage.bytes_moved(g.attended(context), g.experts_chosen(launch.layer, band.m, selected))


def step_bytes(manifest: Manifest, band: Band, context: int, mode: str | None = None,
               selected: dict[int, int] | None = None) -> int:
    mode = mode or manifest.deployment.modes[0]
    step = next(s for s in manifest.steps if s.band == band and s.mode == mode)
    return sum(stage_bytes(manifest.geometry, stage, launch, band, context, selected)
               for launch in step.launches for stage in manifest.program(launch.program).stages)
