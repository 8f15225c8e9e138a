"""Reading the user's files safely: regular files of bounded size, UTF-8, and values shown short.

Recipes and configs come from users and from whatever an image build points at: a device file
would block a read forever, a huge or deeply nested document would exhaust memory or the stack,
and an error message that printed a value whole could itself be the blow-up (a YAML alias bomb
expands when printed). Everything here fails with one ``InputError`` naming the file.
"""

from __future__ import annotations

import re
import reprlib
from pathlib import Path

from .errors import InputError

MAX_INPUT_BYTES = 4 << 20  # a recipe or a config.json is a few KB; the largest published configs ~100 KB
PACKAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

_short = reprlib.Repr()
_short.maxlevel, _short.maxlist, _short.maxdict, _short.maxstring, _short.maxother = 2, 4, 4, 60, 60


def show(value) -> str:
    """``repr(value)``, cut short: safe to put in an error message whatever the value is."""
    return _short.repr(value)


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of a regular file of at most MAX_INPUT_BYTES."""
    src = str(path)
    try:
        if not path.exists():
            raise InputError(src, None, "file not found")
        if path.is_dir():
            raise InputError(src, None, f"is a directory, not a {what}")
        if not path.is_file():
            raise InputError(src, None, f"not a regular file (a {what} is read from a file)")
        size = path.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise InputError(src, None, f"{size} bytes: too large for a {what} (at most {MAX_INPUT_BYTES})")
        data = path.read_bytes()
    except OSError as e:
        raise InputError(src, None, f"cannot read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(src, None, f"not UTF-8 text (byte {e.start})") from None


def package_name(source: str, stem: str) -> str:
    """The package directory a recipe file names (its stem), refused unless it is a plain name: a
    stem like ``..`` would place, and replace, a directory outside ``--out``."""
    if not PACKAGE_NAME.fullmatch(stem) or set(stem) == {"."}:
        raise InputError(source, None, f"the file's name {show(stem)} is the package's directory name, so it must be "
                                       "letters, digits, '.', '_' or '-' (not only dots), starting with a letter "
                                       "or digit, at most 128 characters")
    return stem
