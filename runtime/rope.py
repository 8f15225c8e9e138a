"""Rotary position embedding tables, computed in float64 from the manifest's geometry.

The kernels read a float32 table ``[max_context, head_dim]``: cos of each frequency in the
first half of a row, sin in the second. Computing the angles in float64 keeps long-context
positions exact where an fp32 product ``position × inv_freq`` would not be.
"""

from __future__ import annotations

import math

import torch

from ..schema import Geometry


def inv_freq(geometry: Geometry) -> torch.Tensor:
    """The per-pair inverse frequencies, with llama3 scaling where the geometry has it."""
    d = geometry.head_dim
    freq = 1.0 / (geometry.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    if geometry.rope_kind != "llama3":
        return freq
    s = geometry.rope_scaling
    old = s.original_max_position_embeddings
    low_wavelen, high_wavelen = old / s.low_freq_factor, old / s.high_freq_factor
    wavelen = 2 * math.pi / freq
    scaled = torch.where(wavelen > low_wavelen, freq / s.factor, freq)
    smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def angles(geometry: Geometry, positions: torch.Tensor) -> torch.Tensor:
    """[len(positions), head_dim/2] float64 angles."""
    return positions.to(torch.float64)[:, None] * inv_freq(geometry)[None, :]


def rope_table(geometry: Geometry, max_context: int, device=None) -> torch.Tensor:
    """The kernels' table: row p = [cos(p·f), sin(p·f)] in float32."""
    a = angles(geometry, torch.arange(max_context))
    return torch.cat([a.cos(), a.sin()], dim=1).to(torch.float32).to(device)
