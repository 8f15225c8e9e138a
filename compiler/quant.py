"""A checkpoint's weight quantization, read from its ``config.json`` and checked against what the
programs serve: FP8 E4M3 with block scales (``weight_block_size``), the format of the published
FP8 checkpoints (Qwen3-*-FP8, DeepSeek-V3 and the community ones).

A config's ``quantization_config`` (or ``compression_config``) decides how its tensors are bound:
a method the programs do not read is refused with its name and why, never planned as bf16 (that
would bind e4m3 or int4 bytes as something they are not). A recipe may restate the quantization
(``quantization:``, HF's own keys) but not change it: a contradiction names both files.
"""

from __future__ import annotations

from ..schema import WeightQuant
from .errors import InputError
from .inputs import show

SERVED = "fp8 (fmt e4m3) with block scales (weight_block_size)"
#: The decoder-layer projections an FP8 checkpoint quantizes (the programs' quantized GEMVs).
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
RESTATED = ("quant_method", "fmt", "weight_block_size", "activation_scheme")


def quant_from_config(cfg: dict, source: str) -> WeightQuant | None:
    """The config's weight quantization (None: the weights are stored unquantized), or an
    InputError naming the field and what is served."""
    if cfg.get("compression_config") is not None:
        q = cfg["compression_config"]
        fmt = q.get("format") if isinstance(q, dict) else None
        raise InputError(source, "compression_config", f"{show(fmt) + ' ' if fmt else ''}compressed-tensors "
                                                       f"checkpoints are not served (served: {SERVED})")
    q = cfg.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict):
        raise InputError(source, "quantization_config", f"expected a mapping, got {show(q)}")
    method = q.get("quant_method")
    if method != "fp8":
        what = f"{show(method)} quantization" if method else "a quantization without quant_method"
        raise InputError(source, "quantization_config.quant_method", f"{what} is not served (served: {SERVED})")
    fmt = q.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise InputError(source, "quantization_config.fmt", f"FP8 {show(fmt)} is not served (served: e4m3)")
    scheme = q.get("activation_scheme", "dynamic")
    if scheme != "dynamic":
        raise InputError(source, "quantization_config.activation_scheme",
                         f"{show(scheme)} activation scales are not served (served: dynamic; the programs keep "
                         "activations in bf16 and need none)")
    block = q.get("weight_block_size")
    if block is None:
        raise InputError(source, "quantization_config.weight_block_size",
                         "missing: per-tensor and per-channel FP8 scales are not served (served: block scales)")
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and 16 <= b <= 4096 and b & (b - 1) == 0
                    for b in block)):
        raise InputError(source, "quantization_config.weight_block_size",
                         f"expected [rows, columns], powers of two in 16..4096, got {show(block)}")
    for key in ("modules_to_not_convert", "ignored_layers"):
        kept = q.get(key) or []
        if not isinstance(kept, list):
            raise InputError(source, f"quantization_config.{key}", f"expected a list of module names, got {show(kept)}")
        for name in kept:
            if isinstance(name, str) and any(p in name for p in PROJECTIONS):
                raise InputError(source, f"quantization_config.{key}",
                                 f"{show(name)}: a projection left unquantized is not served (the programs read "
                                 "every decoder layer's projections in FP8)")
    return WeightQuant("fp8", "e4m3", block[0], block[1])


def restated_quant(doc: dict, recipe: str, config: str, quant: WeightQuant | None) -> None:
    """Check a recipe's ``quantization:`` (HF's keys: quant_method, fmt, weight_block_size,
    activation_scheme) against the config's; the recipe may only restate it."""
    stated = doc.get("quantization")
    if stated is None:
        return
    if stated == "none":
        if quant is not None:
            raise InputError(recipe, "quantization", f"'none' contradicts {config}: quantization_config says fp8 "
                                                     f"with {quant.block_rows}×{quant.block_cols} block scales")
        return
    if not isinstance(stated, dict) or not stated:
        raise InputError(recipe, "quantization", f"expected none or a mapping of {', '.join(RESTATED)}, got "
                                                 f"{show(stated)}")
    unknown = sorted(set(stated) - set(RESTATED))
    if unknown:
        raise InputError(recipe, f"quantization.{unknown[0]}", f"unknown field (known: {', '.join(RESTATED)})")
    if quant is None:
        raise InputError(recipe, "quantization", f"{config} has no quantization_config: the recipe may restate the "
                                                 "checkpoint's quantization, not add one")
    actual = {"quant_method": quant.method, "fmt": quant.fmt, "activation_scheme": "dynamic",
              "weight_block_size": [quant.block_rows, quant.block_cols]}
    for key, value in stated.items():
        if value != actual[key]:
            raise InputError(recipe, f"quantization.{key}", f"{show(value)} contradicts {config}'s "
                                                            f"quantization_config.{key}, {show(actual[key])}")
