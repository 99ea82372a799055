"""Reading command-line overrides before Hydra does, for one-line messages (Hydra's own are a page long)."""

from __future__ import annotations

import re
from pathlib import Path


def unknown_group_choice(args: list[str], root: Path) -> str | None:
    """The message for the first ``group=choice`` (or ``+group=choice``) override naming a config that does not
    exist (e.g. ``method=foo``), listing the available choices; None if there is none. Comma lists are read
    value by value; sweep functions (``choice(...)``...) are left to the sweep check."""
    for arg in args:
        if "=" not in arg or arg.startswith(("~", "-")):
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+")  # +experiment=NAME, +sweep=NAME: groups added to the defaults list
        group = root / key
        try:
            is_group = "." not in key and group.is_dir()
        except OSError:  # a key too long for a file name is no group (the key check names it)
            is_group = False
        if not is_group or value in ("", "null"):
            continue
        if re.match(r"\s*[A-Za-z_]+\(", value):  # a sweep function: choice(...), glob(...), range(...)
            continue
        choices = sorted(p.stem for p in group.glob("*.yaml"))
        for v in value.split(","):
            if v.strip() not in choices:
                return f"unknown {key} {v.strip()!r}; choose one of: {', '.join(choices)}"
    return None


def unknown_key_message(error: BaseException) -> str | None:
    """The message for a composition error caused by overriding a key the config does not have
    (``attack.nshadow=4``), or None for any other error."""
    text = str(error)
    found = re.match(r"Could not override '([^']+)'", text)
    if found is not None and "not in struct" in str(error.__cause__ or text):
        return f"{found.group(1)} is not a setting of this command; check the spelling (--cfg job prints every setting)"
    return None
