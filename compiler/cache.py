"""A content-addressed cache of code objects.

The key hashes, by name, everything that changes the code: the program's kernel source (which
carries every recipe field and schedule entry that matters), ABI and launch options; the target;
a digest of the emitter's sources; the toolchain's version; and the cache format. The program's
*name* is not in the key, so identical programs of different recipes share an entry. Entries are
written to a private temporary directory and renamed into place, so concurrent or interrupted
compiles never leave a partial entry; each records the sha256 of its files, and one that does
not match (truncated, bit-flipped, half-deleted) is discarded and compiled again, never shipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from ..schema import TensorMap
from .emit import Program
from .resources import Resources
from .targets import Target
from .toolchain import CodeObject

CACHE_FORMAT = 3  # 2: every entry carries the sha256 of its files; 3: and its TMA descriptors' boxes


def toolchain_versions() -> tuple[tuple[str, str], ...]:
    import triton

    return (("triton", triton.__version__),)


def cache_key(program: Program, target: Target, emitter_digest: str) -> str:
    parts = {
        "format": CACHE_FORMAT,
        "program": program.key_parts(),
        "target": target.name,
        "emitter": emitter_digest,
        "toolchain": toolchain_versions(),
    }
    blob = json.dumps(parts, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _digests(binary: bytes, ir) -> dict[str, str]:
    """The sha256 of an entry's code object and of each IR text, so a corrupted entry is seen."""
    out = {"code.bin": hashlib.sha256(binary).hexdigest()}
    out.update({f"ir.{kind}": hashlib.sha256(text.encode()).hexdigest() for kind, text in ir})
    return out


class CodeCache:
    def __init__(self, root: Path):
        self.root = Path(root) / f"v{CACHE_FORMAT}"

    def _entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str, program_name: str) -> CodeObject | None:
        entry = self._entry(key)
        if not entry.exists():
            return None
        try:
            meta = json.loads((entry / "meta.json").read_text())
            binary = (entry / "code.bin").read_bytes()
            ir = tuple((kind, (entry / f"ir.{kind}").read_text()) for kind in meta["ir"])
            if meta["sha256"] != _digests(binary, ir):
                raise ValueError("contents do not match their recorded sha256")
            return CodeObject(
                program=program_name, target=meta["target"], symbol=meta["symbol"], binary=binary, ir=ir,
                shared_bytes=meta["shared_bytes"], num_warps=meta["num_warps"],
                resources=Resources(**meta["resources"]), fingerprint=meta["fingerprint"],
                tensor_maps=tuple(TensorMap(t["arg"], tuple(t["box"]), t["swizzle"], t["elem_bytes"])
                                  for t in meta["tensor_maps"]),
            )
        except (OSError, ValueError, KeyError, TypeError):  # truncated, flipped, half-deleted: rebuild it
            shutil.rmtree(entry, ignore_errors=True)
            return None

    def put(self, key: str, code: CodeObject) -> None:
        entry = self._entry(key)
        if entry.exists():
            return
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        try:
            (tmp / "code.bin").write_bytes(code.binary)
            for kind, text in code.ir:
                (tmp / f"ir.{kind}").write_text(text)
            meta = {
                "target": code.target, "symbol": code.symbol, "shared_bytes": code.shared_bytes,
                "num_warps": code.num_warps, "resources": asdict(code.resources),
                "fingerprint": code.fingerprint, "ir": [kind for kind, _ in code.ir],
                "tensor_maps": [asdict(t) for t in code.tensor_maps],
                "sha256": _digests(code.binary, code.ir),
            }
            (tmp / "meta.json").write_text(json.dumps(meta, sort_keys=True))
            try:
                os.rename(tmp, entry)  # atomic; fails if another process got there first
            except OSError:
                if not entry.exists():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
