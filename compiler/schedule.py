"""Frozen per-target schedule tables (``schedules/<target>.yaml``).

The planner asks for the entry of a program (kind, hidden size, band, the projections' dtype);
the most specific matching entry's keys override the defaults. An entry matches on the keys it
names: one without ``weights`` serves every dtype, one with ``weights: fp8e4nv`` an FP8
checkpoint's programs only (their GEMVs move half the bytes and run on another executor, so
their best tiles differ), and outranks every entry that does not name the dtype; otherwise the
entry naming the most keys wins, and of those the first. The chosen entry is part of each
program's cache key, so a tuned table recompiles exactly the programs whose entries changed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

import yaml

from .errors import InputError
from .inputs import read_text


@dataclass(frozen=True)
class ScheduleEntry:
    num_warps: int
    ctas_per_sm: int
    block_n: int
    block_k: int
    head_block_n: int
    embed_block: int
    max_splits: int
    weight_stages: int = 1
    max_split_k: int = 1
    max_split_qkv: int = 1
    kv_tile: int = 16
    kv_stages: int = 1
    long_kv_tile: int = 0
    long_kv_stages: int = 0
    kv_substreams: int = 1
    norm_rows: int = 1
    norm_stages: int = 0
    streaming: int = 0
    stream_slots: int = 0


_KEYS = {f.name for f in fields(ScheduleEntry)}
# weight_stages defaults to 1 (the register double-buffer), max_split_k (o, down) and
# max_split_qkv to 1 (no K split), kv_tile to 16 (one page of the usual block size per attention
# iteration), kv_stages to 1, long_kv_tile to 0 (every split walks kv_tile tokens per iteration),
# long_kv_stages to 0 (the long walk is pipelined as deep as the short one), kv_substreams to 1
# (the long walk keeps one online-softmax state), norm_rows to 1 (a norm stage stages one row of x̂
# per load), norm_stages to 0 (each CTA of a GEMV after an RMSNorm — qkv, up, the LM head — stages
# x̂ itself), streaming to 0 (the layer programs are the Triton executor's; 1: the persistent layer
# program is the streaming executor's, compiler/executor.py), stream_slots to 0 (its weight ring
# holds as many units as shared memory does).
_OPTIONAL = {"weight_stages", "max_split_k", "max_split_qkv", "kv_tile", "kv_stages", "long_kv_tile", "long_kv_stages",
             "kv_substreams", "norm_rows", "norm_stages", "streaming", "stream_slots"}
_FLAGS = {"norm_stages", "streaming"}  # 0 or 1
# a pipeline depth or a ring's slots need not be a power of two
_ANY_POSITIVE = {"weight_stages", "kv_stages", "long_kv_stages", "stream_slots"}
# keys where 0 is allowed, and what it means
_ZERO_MEANS = {"long_kv_tile": "off", "long_kv_stages": "as kv_stages", "stream_slots": "as many as fit"}
_MATCH_KEYS = {"kind", "hidden", "rows", "tokens", "weights"}
_ENTRY_KEYS = {"match", "set", "measured"}  # measured: where the entry's numbers come from (monobuild tune)


@dataclass(frozen=True)
class Schedule:
    source: str
    defaults: ScheduleEntry
    entries: tuple[tuple[tuple[tuple[str, object], ...], tuple[tuple[str, int], ...]], ...]

    def entry(self, kind: str, hidden: int, rows: int, tokens: int, *, weights: str) -> ScheduleEntry:
        """The entry for a program: ``weights`` is its layer projections' dtype (bf16, fp32, fp8e4nv)."""
        facts = {"kind": kind, "hidden": hidden, "rows": rows, "tokens": tokens, "weights": weights}
        matching = [(match, overrides) for match, overrides in self.entries if all(facts[k] == v for k, v in match)]
        if not matching:
            return self.defaults
        # the most specific: naming the weights' dtype first, then the most keys; of those, the first
        _, overrides = max(matching, key=lambda e: (any(k == "weights" for k, _ in e[0]), len(e[0])))
        return ScheduleEntry(**{**self.defaults.__dict__, **dict(overrides)})


def _checked(src: str, field: str, values: dict, *, partial: bool) -> dict:
    if not isinstance(values, dict):
        raise InputError(src, field, "expected a mapping")
    unknown = sorted(set(values) - _KEYS)
    if unknown:
        raise InputError(src, f"{field}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(_KEYS))})")
    missing = sorted(_KEYS - _OPTIONAL - set(values))
    if missing and not partial:
        raise InputError(src, f"{field}.{missing[0]}", "missing")
    for key, value in values.items():
        if key in _FLAGS:
            if type(value) is not int or value not in (0, 1):
                raise InputError(src, f"{field}.{key}", f"expected 0 or 1, got {value!r}")
            continue
        if key in _ZERO_MEANS and type(value) is int and value == 0:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            wanted = "a positive integer"
            if key in _ZERO_MEANS:
                wanted = f"0 ({_ZERO_MEANS[key]}) or " + (wanted if key in _ANY_POSITIVE else "a power of two")
            raise InputError(src, f"{field}.{key}", f"expected {wanted}, got {value!r}")
        if key not in _ANY_POSITIVE and value & (value - 1):
            raise InputError(src, f"{field}.{key}", f"expected a power of two, got {value!r}")
    return values


def parse_schedule(doc, src: str, source: str | None = None) -> Schedule:
    """The table in ``doc`` (read from ``src``, which errors name); ``source`` is what the table
    says it came from (default ``src``)."""
    if not isinstance(doc, dict):
        raise InputError(src, None, "expected a mapping with defaults and entries")
    defaults = ScheduleEntry(**_checked(src, "defaults", doc.get("defaults"), partial=False))
    entries = []
    for i, item in enumerate(doc.get("entries") or []):
        if not isinstance(item, dict) or not isinstance(item.get("match"), dict):
            raise InputError(src, f"entries[{i}].match", "expected a mapping of kind/hidden/rows/tokens/weights")
        extra = sorted(set(item) - _ENTRY_KEYS)
        if extra:
            raise InputError(src, f"entries[{i}].{extra[0]}", f"unknown key (known: {', '.join(sorted(_ENTRY_KEYS))})")
        bad = sorted(set(item["match"]) - _MATCH_KEYS)
        if bad:
            raise InputError(src, f"entries[{i}].match.{bad[0]}", f"unknown key (known: {', '.join(sorted(_MATCH_KEYS))})")
        overrides = _checked(src, f"entries[{i}].set", item.get("set", {}), partial=True)
        entries.append((tuple(sorted(item["match"].items())), tuple(sorted(overrides.items()))))
    return Schedule(source or src, defaults, tuple(entries))


def schedule_to_json(schedule: Schedule) -> dict:
    """The table as a package records it (what ``check`` plans the package's programs again with)."""
    return {"source": schedule.source, "defaults": dict(schedule.defaults.__dict__),
            "entries": [{"match": dict(match), "set": dict(overrides)} for match, overrides in schedule.entries]}


def schedule_from_json(doc, src: str) -> Schedule:
    """A table recorded by ``schedule_to_json``, validated as a table file is."""
    if not isinstance(doc, dict) or not isinstance(doc.get("source"), str):
        raise InputError(src, "schedule", "expected the table the package was planned with")
    return parse_schedule({k: v for k, v in doc.items() if k != "source"}, src, source=doc["source"])


def load_schedule(target: str, directory: Path | None = None) -> Schedule:
    """The shipped table for ``target``, or the one in ``directory`` when given."""
    if directory is None:
        path = resources.files("monobuild.schedules") / f"{target}.yaml"
    else:
        path = Path(directory) / f"{target}.yaml"
    return read_schedule(path, f"no schedule for target {target}")


def read_schedule(path, missing: str = "no such schedule table") -> Schedule:
    """The table in the file at ``path`` (a user's file read as inputs.read_text reads one: regular,
    bounded, UTF-8; the shipped tables through importlib.resources)."""
    if isinstance(path, Path):
        if not path.exists():
            raise InputError(str(path), None, missing)
        text = read_text(path, "schedule table")
    else:
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise InputError(str(path), None, missing) from None
    try:
        return parse_schedule(yaml.safe_load(text), str(path))
    except yaml.YAMLError as e:
        raise InputError(str(path), None, f"malformed YAML: {e}") from None
