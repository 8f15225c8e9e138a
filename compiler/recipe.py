"""A recipe: a deployment YAML plus the model geometry it names, validated and frozen.

The YAML says where and how the model runs (target, SM/CU count, dtypes, paged KV cache, batch
bands, speculative verify width, maximum context, head output); the geometry, and how the
checkpoint stores its weights, come from the model's own ``config.json`` named by the ``config:``
key, relative to the recipe. Every error names the file and the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from ..parallel import SIZES as PARALLEL_SIZES
from ..parallel import TensorParallel
from ..schema import Band, DtypeRoles, KVLayout, PackageDeployment, WeightQuant
from .errors import InputError, Refusal
from .geometry import Geometry, is_pow2, load_config
from .inputs import package_name, read_text, show
from .quant import restated_quant
from .targets import TARGETS, Target

DTYPES = ("bf16", "fp16", "fp32")
HEADS = ("logits", "ids", "sample")
MODES = ("persistent", "staged")
MAX_ROWS = 16  # rows × tokens of one step: the programs pad the row dimension to 16
MAX_SM_COUNT = 1024  # SMs or CUs of one device: the grid is a multiple of it
MAX_CONTEXT = 1 << 20  # tokens per row: the runtime's RoPE table holds a row per position
MAX_QUERY_ROWS = 128  # an attention task's query rows, its GQA group × tokens (Qwen3-235B-A22B's 16 × 6 = 96)


@dataclass(frozen=True)
class Deployment:
    target: Target
    sm_count: int
    dtype: str
    kv_cache: KVLayout
    bands: tuple[Band, ...]
    max_context: int
    head: str
    modes: tuple[str, ...]
    lifetime_steps: int
    # Debug builds only: a wait gives up after this many polls of its counter and records which
    # CTA waited on which counter for which target (0: wait forever, the production build).
    debug_wait_spins: int = 0
    # Profiling builds only: every CTA records the SM it runs on and the global timer when each
    # stage starts (after its wait) and ends (before its signal), into a ``stage_clock`` buffer.
    stage_clock: bool = False
    # How the checkpoint stores its projection weights: config.json's quantization_config, which
    # the recipe may restate (``quantization:``) but not change. None: in ``dtype``.
    quant: WeightQuant | None = None
    # A sampling head's verify band takes the proposer's distributions of its drafts and decides
    # by the speculative-sampling rule (accept with min(1, p/q), correct from max(0, p − q)).
    draft_probs: bool = False
    # The ranks the model is split over (``monobuild.parallel``): each rank runs the same programs
    # over its shard, and the layers' all-reduces and the head's argmax meet across ranks.
    tensor_parallel: int = 1

    @property
    def tp(self) -> TensorParallel:
        return TensorParallel(self.tensor_parallel)

    @property
    def dtypes(self) -> DtypeRoles:
        """The dtype of each tensor role: ``dtype`` for the weights and the activations a GEMV
        reads, the KV cache's own, fp32 accumulation; a quantized checkpoint's projections in
        its FP8 with fp32 block scales."""
        quant = self.quant
        return DtypeRoles(weights=self.dtype, activations=self.dtype, kv=self.kv_cache.dtype,
                          scales="fp32" if quant else None, projections=quant.dtype if quant else None)

    def package_record(self) -> PackageDeployment:
        """What the package serves, as its manifest records it for the runtime."""
        return PackageDeployment(self.dtypes, self.kv_cache, self.bands, self.max_context, self.head, self.modes,
                                 self.lifetime_steps, self.debug_wait_spins, self.stage_clock, self.quant,
                                 self.draft_probs, self.tensor_parallel)


@dataclass(frozen=True)
class Recipe:
    name: str
    source: str
    config_path: str
    geometry: Geometry
    deployment: Deployment

    @property
    def rank_geometry(self) -> Geometry:
        """The geometry one rank's programs are planned for: the model's own without tensor
        parallelism, its share of heads, intermediate rows and vocabulary with it."""
        return self.deployment.tp.rank_geometry(self.geometry)


_KNOWN_KEYS = {
    "config", "target", "sm_count", "dtype", "kv_cache", "bands", "verify", "max_context", "head",
    "modes", "lifetime_steps", "debug_wait_spins", "stage_clock", "quantization", "tensor_parallel",
}


def _int(src: str, field: str, value, *, minimum: int = 1, maximum: int = 2**31 - 1) -> int:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(src, field, f"expected an integer, got {show(value)}")
    if value < minimum:
        raise InputError(src, field, f"must be ≥ {minimum}, got {show(value)}")
    if value > maximum:
        raise InputError(src, field, f"must be ≤ {maximum}, got {show(value)}")
    return value


def _bool(src: str, field: str, value) -> bool:
    if not isinstance(value, bool):
        raise InputError(src, field, f"expected true or false, got {show(value)}")
    return value


def _choice(src: str, field: str, value, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise InputError(src, field, f"expected one of {', '.join(choices)}, got {show(value)}")
    return value


def _bands(src: str, doc: dict) -> tuple[Band, ...]:
    rows = doc.get("bands")
    if not isinstance(rows, list) or not rows or len(rows) > MAX_ROWS:
        raise InputError(src, "bands", f"expected a list of 1 to {MAX_ROWS} rows per step, e.g. [1, 2, 4, 8]")
    bands = [Band(_int(src, f"bands[{i}]", r)) for i, r in enumerate(rows)]
    verify = doc.get("verify")
    if verify is not None:
        if not isinstance(verify, dict) or set(verify) - {"rows", "tokens", "draft_probs"}:
            raise InputError(src, "verify", "expected a mapping with rows and tokens (and optionally draft_probs)")
        bands.append(
            Band(_int(src, "verify.rows", verify.get("rows")), _int(src, "verify.tokens", verify.get("tokens"), minimum=2))
        )
    for i, band in enumerate(bands):
        field = f"bands[{i}]" if band.tokens == 1 else "verify"
        if band.m > MAX_ROWS:
            raise Refusal(src, f"{field}: {band.rows} rows × {band.tokens} tokens = {band.m} exceeds {MAX_ROWS}")
    if len(set(bands)) != len(bands):
        raise InputError(src, "bands", "a band is listed twice")
    return tuple(sorted(bands))


def deployment_from_doc(doc: dict, src: str) -> Deployment:
    unknown = sorted(set(doc) - _KNOWN_KEYS)
    if unknown:
        raise InputError(src, unknown[0], f"unknown field (known: {', '.join(sorted(_KNOWN_KEYS))})")
    for key in ("target", "sm_count", "dtype", "kv_cache", "bands", "max_context", "head"):
        if key not in doc:
            raise InputError(src, key, "missing")
    target = TARGETS.get(doc["target"]) if isinstance(doc["target"], str) else None
    if target is None:
        raise InputError(src, "target", f"unknown target {show(doc['target'])} (served: {', '.join(TARGETS)})")
    kv = doc["kv_cache"]
    if not isinstance(kv, dict):
        raise InputError(src, "kv_cache", "expected a mapping with dtype and block_size")
    unknown = sorted(set(kv) - {"dtype", "block_size"})
    if unknown:
        raise InputError(src, f"kv_cache.{unknown[0]}", "unknown field (known: block_size, dtype)")
    block_size = _int(src, "kv_cache.block_size", kv.get("block_size"))
    if not is_pow2(block_size) or not 16 <= block_size <= 256:
        raise InputError(src, "kv_cache.block_size", f"must be a power of two in 16..256, got {block_size}")
    modes = doc.get("modes", list(MODES))
    if not isinstance(modes, list) or not modes:
        raise InputError(src, "modes", f"expected a non-empty list of {', '.join(MODES)}")
    modes = tuple(_choice(src, f"modes[{i}]", m, MODES) for i, m in enumerate(modes))
    head = _choice(src, "head", doc["head"], HEADS)
    return Deployment(
        target=target,
        sm_count=_int(src, "sm_count", doc["sm_count"], maximum=MAX_SM_COUNT),
        dtype=_choice(src, "dtype", doc["dtype"], DTYPES),
        kv_cache=KVLayout(_choice(src, "kv_cache.dtype", kv.get("dtype"), DTYPES), block_size),
        bands=_bands(src, doc),
        max_context=_int(src, "max_context", doc["max_context"], minimum=16, maximum=MAX_CONTEXT),
        head=head,
        modes=tuple(sorted(set(modes), key=MODES.index)),
        lifetime_steps=_int(src, "lifetime_steps", doc.get("lifetime_steps", 10**15), maximum=2**62),
        debug_wait_spins=_int(src, "debug_wait_spins", doc.get("debug_wait_spins", 0), minimum=0),
        stage_clock=_bool(src, "stage_clock", doc.get("stage_clock", False)),
        draft_probs=_draft_probs(src, doc, head),
        tensor_parallel=_tensor_parallel(src, doc),
    )


def _tensor_parallel(src: str, doc: dict) -> int:
    """``tensor_parallel``: the ranks the model is split over (a model that does not split is
    refused with its reason, ``_refuse_unserved``)."""
    n = _int(src, "tensor_parallel", doc.get("tensor_parallel", 1))
    if n not in PARALLEL_SIZES:
        raise InputError(src, "tensor_parallel", f"expected one of {', '.join(map(str, PARALLEL_SIZES))}, got {n}")
    return n


def _draft_probs(src: str, doc: dict, head: str) -> bool:
    """``verify.draft_probs``: whether the verify band's head takes the proposer's distributions
    (a sampling head's; a greedy head's verdict needs none: its target puts all on one id)."""
    verify = doc.get("verify")
    wanted = _bool(src, "verify.draft_probs", verify.get("draft_probs", False)) if isinstance(verify, dict) else False
    if wanted and head != "sample":
        raise InputError(src, "verify.draft_probs", f"only a sampling head takes the drafts' distributions (head: "
                                                    f"{head}; a greedy verdict accepts a draft iff it is the greedy id)")
    return wanted


def load_recipe(path: str | Path) -> Recipe:
    """Read, validate and freeze a recipe; raise InputError or Refusal naming file and field."""
    path = Path(path)
    src = str(path)
    name = package_name(src, path.stem)
    text = read_text(path, "recipe")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise InputError(src, None, f"malformed YAML{where}: {getattr(e, 'problem', e)}") from None
    except RecursionError:
        raise InputError(src, None, "malformed YAML: nested too deeply") from None
    if not isinstance(doc, dict):
        raise InputError(src, None, "expected a YAML mapping of recipe fields")
    config = doc.get("config")
    if not isinstance(config, str) or not config:
        raise InputError(src, "config", "missing: the path of the model's config.json, relative to the recipe")
    try:
        config_path = (path.parent / config).resolve()
        found = config_path.is_file()
    except (OSError, RuntimeError, ValueError) as e:  # too long, a symlink loop, a NUL byte
        why = getattr(e, "strerror", None) or str(e)[:80]
        raise InputError(src, "config", f"{show(config)}: cannot resolve: {why}") from None
    if not found:
        raise InputError(src, "config", f"{show(config)}: no such file (resolved against the recipe: "
                                        f"{show(str(config_path))})")
    geometry, quant = load_config(config_path)
    deployment = deployment_from_doc(doc, src)
    restated_quant(doc, src, str(config_path), quant)
    if quant is not None and deployment.dtype != "bf16":
        raise InputError(src, "dtype", f"{deployment.dtype} with the FP8 checkpoint {config}: its projections are "
                                       "read in FP8 and everything else in bf16 (served: dtype bf16)")
    deployment = replace(deployment, quant=quant)
    _refuse_unserved(src, geometry, deployment)
    return Recipe(name, src, config, geometry, deployment)


def _refuse_unserved(src: str, g: Geometry, d: Deployment) -> None:
    if d.tensor_parallel > 1:
        reason = d.tp.refusal(g, d.quant)
        if reason is not None:
            raise Refusal(src, f"tensor_parallel {d.tensor_parallel}: {reason}")
    if d.max_context > g.max_positions:
        raise Refusal(src, f"max_context {d.max_context} exceeds the model's max_position_embeddings {g.max_positions}")
    if g.group * max(b.tokens for b in d.bands) > MAX_QUERY_ROWS:
        raise Refusal(src, f"GQA group × verify tokens exceeds {MAX_QUERY_ROWS} query rows per attention task")
    if g.experts is not None and d.quant is not None and g.experts.intermediate % d.quant.block_rows:
        raise Refusal(src, f"an FP8 checkpoint whose experts' {g.experts.intermediate} gate rows are not whole "
                           f"{d.quant.block_rows}-row scale blocks: its fused gate|up scales would mix an expert's "
                           "gate and up rows in one block, which the routed GEMV scales apart")
