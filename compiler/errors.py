"""Errors that the CLI turns into one line and exit code 2.

Every input problem names the file and the field, so a user can fix it without reading a
traceback: ``recipes/x.yaml: kv_cache.block_size: must be a power of two, got 12``.
"""

from __future__ import annotations


class InputError(Exception):
    """A bad or unsupported input: a file, a field, and why."""

    def __init__(self, source: str, field: str | None, reason: str):
        self.source = str(source)
        self.field = field
        self.reason = reason
        where = f"{self.source}: {field}" if field else self.source
        super().__init__(f"{where}: {reason}")


class Refusal(Exception):
    """A well-formed deployment that the programs do not serve, with the reason."""

    def __init__(self, source: str, reason: str):
        self.source = str(source)
        self.reason = reason
        super().__init__(f"{self.source}: not served: {reason}")


class CompileError(Exception):
    """The toolchain failed on an emitted program; carries the program name and a repro hint."""
