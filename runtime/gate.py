"""Whether a package serves an engine's deployment, and each step of it: answers an engine can route by.

At load, ``open_package`` compares what the engine runs (``EngineDeployment``: its model's
config.json, dtypes, KV page and longest context, its device) with the package's manifest and
either loads the package or declines it with the reason, under one typed setting, ``Use``:

- ``auto``: a package that cannot serve the deployment is declined with one log line saying why
  (the engine runs its own decode);
- ``force``: the same reason is raised (``Declined``);
- ``off``: the package is never used.

Per step, ``step_refusal`` is the host-side answer to "does the package serve this batch?" (rows,
tokens per row, longest context): ``None`` or the reason, from the manifest alone, without
touching the device, so an engine can ask it every step and run its own path for a step it
declines. ``DecodeStep.serves`` asks it for a bound step.

The model's geometry is compared as the compiler reads it (``compiler/geometry.py``, which is
plain Python: no Triton is imported), so a config the compiler would plan differently is declined
whatever its file looks like, and one that differs only in fields the programs never see is not.
"""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from ..manifest import Manifest, PackageError, read_manifest
from ..schema import Band, Geometry

log = logging.getLogger("monobuild")

#: the environment variable ``Use.from_env`` reads by default
SETTING = "MONOBUILD_DECODE"


class Declined(PackageError):
    """Under ``Use.FORCE``, a package that cannot serve the engine's deployment: the message says why."""


class Use(enum.Enum):
    """Whether an engine decodes with a package: ``auto`` where it serves, ``force`` or ``off``."""

    AUTO = "auto"
    FORCE = "force"
    OFF = "off"

    @classmethod
    def parse(cls, value: str | Use) -> Use:
        """``auto`` / ``force`` / ``off`` (and 1 / 0 as force / off), case-insensitive."""
        if isinstance(value, Use):
            return value
        word = str(value).strip().lower()
        word = {"1": "force", "0": "off", "on": "force", "true": "force", "false": "off"}.get(word, word)
        try:
            return cls(word)
        except ValueError:
            raise ValueError(f"{value!r}: expected auto, force or off") from None

    @classmethod
    def from_env(cls, name: str = SETTING, default: Use | str = "auto") -> Use:
        """The setting from the environment variable ``name`` (unset or empty: ``default``)."""
        value = os.environ.get(name, "")
        try:
            return cls.parse(value or default)
        except ValueError as e:
            raise ValueError(f"{name}={e}") from None


@dataclass(frozen=True)
class EngineDeployment:
    """What an engine runs, as far as a package's programs depend on it."""

    config: dict  # the model's Hugging Face config.json, parsed
    dtype: torch.dtype  # the dtype the engine holds the model's (unquantized) weights in
    kv_dtype: torch.dtype
    block_size: int  # the engine's KV page, in tokens
    max_context: int  # the longest context it will ask a step for (max_model_len)
    device: int = 0  # the CUDA device index


def geometry_difference(package: Geometry, config: dict, source: str = "the engine's config.json") -> str | None:
    """Why a model of ``config`` is not the package's model (None: the same geometry and quantization
    as far as the programs see), naming the first fields that differ."""
    from ..compiler.errors import InputError
    from ..compiler.geometry import geometry_from_config

    try:
        engine = geometry_from_config(config, source)
    except InputError as e:
        return str(e)
    differ = [f.name for f in fields(Geometry) if getattr(engine, f.name) != getattr(package, f.name)]
    if not differ:
        return None
    shown = ", ".join(f"{n} {getattr(engine, n)!r} (package {getattr(package, n)!r})" for n in differ[:3])
    more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
    return f"the model is not the package's: {shown}{more}"


def deployment_refusal(manifest: Manifest, engine: EngineDeployment) -> str | None:
    """Why the package cannot serve ``engine`` (None: it can), from the manifest alone."""
    from ..compiler.quant import quant_from_config
    from .buffers import TORCH_DTYPES

    d = manifest.deployment
    why = geometry_difference(manifest.geometry, engine.config)
    if why:
        return why
    quant = quant_from_config(engine.config, "the engine's config.json")
    if quant != d.quant:
        return f"the checkpoint's quantization is {quant or 'none'}, the package's {d.quant or 'none'}"
    weights, kv = TORCH_DTYPES[d.dtypes.weights], TORCH_DTYPES[d.dtypes.kv]
    if engine.dtype != weights:
        return f"the engine holds its weights in {engine.dtype}, the package's programs read {weights}"
    if engine.kv_dtype != kv:
        return f"the engine's KV cache is {engine.kv_dtype}, the package's {kv}"
    if engine.block_size != d.kv_cache.block_size:
        return (f"the engine's KV page is {engine.block_size} tokens, the package's {d.kv_cache.block_size} "
                "(compile with kv_cache.block_size set to the engine's)")
    if engine.max_context > d.max_context:
        return (f"the engine serves contexts up to {engine.max_context} tokens, the package up to {d.max_context} "
                "(compile with a larger max_context)")
    return None


def open_package(package_dir: str | Path, engine: EngineDeployment, use: Use | str = Use.AUTO):
    """The loaded package where it serves ``engine`` under ``use``, else None (``auto``, with one
    log line saying why) or ``Declined`` (``force``). ``off`` never reads the package."""
    from .package import DeviceRefused, load

    use = Use.parse(use)
    if use is Use.OFF:
        return None
    path = Path(package_dir)
    try:
        reason = deployment_refusal(read_manifest(path), engine)
        if reason is None:
            return load(path, engine.device)
    except DeviceRefused as e:
        reason = str(e)
    except PackageError as e:
        if use is Use.FORCE:
            raise
        reason = str(e)
    if use is Use.FORCE:
        raise Declined(f"{path}: {reason}")
    log.info("monobuild: %s not used: %s", path, reason)
    return None


def step_refusal(bands: tuple[Band, ...], max_context: int, rows: int, tokens: int, longest_context: int) -> str | None:
    """Why a step of ``rows`` rows × ``tokens`` tokens, the longest row's context (its tokens included)
    ``longest_context``, is not served by a package of ``bands`` (None: it is): no band of these
    tokens per row holds the rows, or the context is past the programs' ``max_context``."""
    if rows < 1 or tokens < 1:
        return f"{rows} rows × {tokens} tokens: a step has at least one row of at least one token"
    widest = max((b.rows for b in bands if b.tokens == tokens), default=0)
    if not widest:
        served = sorted({b.tokens for b in bands})
        return f"{tokens} tokens per row: the package's bands take {', '.join(map(str, served))}"
    if rows > widest:
        return f"{rows} rows of {tokens} token{'s' if tokens > 1 else ''}: the package's widest band has {widest}"
    if longest_context > max_context:
        return f"a context of {longest_context} tokens: the package's programs serve up to {max_context}"
    return None
