"""A content-addressed cache of code objects.

The key hashes, by name, everything that changes the code: the program's kernel, ABI,
constexprs (which carry every recipe field and schedule entry that matters) and launch
options; the target; a digest of the emitter's sources; the toolchain's version; and the
cache format. The program's *name* is not in the key, so identical programs of different
recipes share an entry. Entries are written to a private temporary directory and renamed into
place, so concurrent or interrupted compiles never leave a partial entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from .emit import Program
from .resources import Resources
from .targets import Target
from .toolchain import CodeObject

CACHE_FORMAT = 1


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


class CodeCache:
    def __init__(self, root: Path):
        self.root = Path(root) / f"v{CACHE_FORMAT}"

    def _entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str, program_name: str) -> CodeObject | None:
        entry = self._entry(key)
        try:
            meta = json.loads((entry / "meta.json").read_text())
            binary = (entry / "code.bin").read_bytes()
            ir = tuple((kind, (entry / f"ir.{kind}").read_text()) for kind in meta["ir"])
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return None
        return CodeObject(
            program=program_name, target=meta["target"], symbol=meta["symbol"], binary=binary, ir=ir,
            shared_bytes=meta["shared_bytes"], num_warps=meta["num_warps"],
            resources=Resources(**meta["resources"]), fingerprint=meta["fingerprint"],
        )

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
