"""A minimal document model rendered twice: Markdown (``report.md``) and self-contained HTML
(``report.html``, images embedded as base64 data URIs, no external assets) from the Jinja2 template
``page.html.j2`` with the style sheet ``page.css`` (both beside this module).

A document is a list of blocks: :class:`Heading`, :class:`Paragraph`, :class:`Table`, :class:`Image`,
:class:`Code`, and :class:`Markdown` (free text from callers, rendered as CommonMark with pipe tables; raw HTML
in it is escaped).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader
from markupsafe import Markup


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str


@dataclass
class Table:
    headers: Sequence[str]
    rows: Sequence[Sequence[Any]]
    sortable: bool = False  # HTML: a click on a column's header sorts the rows by it (numbers as numbers)


@dataclass
class Image:
    path: str  # relative to the report (for Markdown)
    png: bytes  # embedded in HTML
    alt: str


@dataclass
class Code:
    text: str
    lang: str = ""


@dataclass
class Markdown:
    text: str


Block = Heading | Paragraph | Table | Image | Code | Markdown

#: the page template and its style sheet, beside this module (package data)
TEMPLATE, STYLE = "page.html.j2", "page.css"


def _cell_md(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Paragraph):
            out.append(b.text)
        elif isinstance(b, Table):
            lines = ["| " + " | ".join(_cell_md(h) for h in b.headers) + " |", "|" + "---|" * len(b.headers)]
            lines += ["| " + " | ".join(_cell_md(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, Image):
            out.append(f"![{b.alt}]({b.path})")
        elif isinstance(b, Code):
            out.append(f"```{b.lang}\n{b.text.rstrip()}\n```")
        elif isinstance(b, Markdown):
            out.append(b.text.strip())
    return "\n\n".join(out) + "\n"


def markdown_to_html(text: str) -> str:
    """CommonMark with pipe tables (markdown-it-py, the parser ``rich`` uses); raw HTML in the text is shown
    escaped, never interpreted (class names and paths come from users)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text.strip())


def _view(b: Block) -> dict[str, Any]:
    """A block as the template's data: its ``kind`` and fields (images base64-encoded, Markdown rendered)."""
    if isinstance(b, Heading):
        return {"kind": "heading", "text": b.text, "level": b.level}
    if isinstance(b, Paragraph):
        return {"kind": "paragraph", "text": b.text}
    if isinstance(b, Table):
        return {"kind": "table", "headers": [str(h) for h in b.headers], "rows": [[str(c) for c in r] for r in b.rows],
                "sortable": b.sortable}
    if isinstance(b, Image):
        return {"kind": "image", "alt": b.alt, "base64": base64.b64encode(b.png).decode("ascii")}
    if isinstance(b, Code):
        return {"kind": "code", "text": b.text}
    return {"kind": "html", "html": Markup(markdown_to_html(b.text))}


@lru_cache(maxsize=1)
def _environment() -> Environment:
    return Environment(loader=PackageLoader("duck.report", ""), autoescape=True, keep_trailing_newline=True)


def to_html(blocks: Sequence[Block], title: str) -> str:
    """The blocks as one self-contained HTML page (Jinja2 template :data:`TEMPLATE`, style :data:`STYLE` inlined,
    images as data URIs)."""
    from importlib.resources import files

    css = files("duck.report").joinpath(STYLE).read_text(encoding="utf-8")
    views = [_view(b) for b in blocks]
    return _environment().get_template(TEMPLATE).render(title=title, css=Markup(css), blocks=views,
                                                        sortable=any(v.get("sortable") for v in views))
