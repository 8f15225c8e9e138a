"""The roofline's numerator from a manifest: the bytes a step must move at a given context.

Every weight once, the KV the rows attend to, the activations in and out: summed over the
stages of the step's launches as the planner recorded them (``Plan.step_bytes`` on the compile
side computes the same from the plan; a CPU test holds them equal).
"""

from __future__ import annotations

from ..manifest import Manifest
from ..schema import Band


def step_bytes(manifest: Manifest, band: Band, context: int, mode: str | None = None) -> int:
    mode = mode or manifest.deployment.modes[0]
    step = next(s for s in manifest.steps if s.band == band and s.mode == mode)
    total = 0
    for launch in step.launches:
        for stage in manifest.program(launch.program).stages:
            total += stage.weight_bytes + stage.io_bytes + stage.kv_bytes_per_token * manifest.geometry.attended(context)
    return total
