"""Reading command-line overrides before Hydra does, for one-line messages (Hydra's own are a page long)."""

from __future__ import annotations

import re
from pathlib import Path


def unknown_group_choice(args: list[str], root: Path) -> str | None:
    """The message for the first ``group=choice`` (or ``+group=choice``) override naming a config that does not
    exist (e.g. ``method=foo``), listing the available choices; None if there is none. Comma lists are read
    value by value; sweep functions (``choice(...)``...) are left to the sweep check. Config directories added
    with ``hydra.searchpath=[file://DIR,...]`` are searched too (a tuned preset in a sweep directory); with a
    search path Hydra reads otherwise (``pkg://``) the choice is left to Hydra."""
    roots = search_roots(args, root)
    if roots is None:
        return None
    for arg in args:
        if "=" not in arg or arg.startswith(("~", "-")):
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+")  # +experiment=NAME, +sweep=NAME: groups added to the defaults list
        if "." in key or not _is_dir(root / key) or value in ("", "null"):
            continue
        if re.match(r"\s*[A-Za-z_]+\(", value):  # a sweep function: choice(...), glob(...), range(...)
            continue
        choices = sorted({p.stem for r in roots if _is_dir(r / key) for p in (r / key).glob("*.yaml")})
        for v in value.split(","):
            if v.strip() not in choices:
                return f"unknown {key} {v.strip()!r}; choose one of: {', '.join(choices)}"
    return None


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a key too long for a file name is no group (the key check names it)
        return False


def search_roots(args: list[str], root: Path) -> list[Path] | None:
    """``root`` and the ``file://`` directories of a ``hydra.searchpath=[...]`` override; None where the search
    path names another kind of source (``pkg://``), whose groups only Hydra can list."""
    roots = [root]
    for arg in args:
        key, _, value = arg.partition("=")
        if key.lstrip("+") != "hydra.searchpath":
            continue
        for entry in value.strip().strip("[]").split(","):
            entry = entry.strip().strip("'\"")
            if not entry:
                continue
            if not entry.startswith("file://"):
                return None
            roots.append(Path(entry[len("file://"):]).expanduser())
    return roots


def unknown_key_message(error: BaseException) -> str | None:
    """The message for a composition error caused by overriding a key the config does not have
    (``attack.nshadow=4``), or None for any other error."""
    text = str(error)
    found = re.match(r"Could not override '([^']+)'", text)
    if found is not None and "not in struct" in str(error.__cause__ or text):
        return f"{found.group(1)} is not a setting of this command; check the spelling (--cfg job prints every setting)"
    return None
