"""A minimal document model rendered twice: Markdown (``report.md``) and self-contained HTML
(``report.html``, images embedded as base64 data URIs, no external assets).

A document is a list of blocks: :class:`Heading`, :class:`Paragraph`, :class:`Table`, :class:`Image`,
:class:`Code`, and :class:`Markdown` (free text from callers, rendered as CommonMark with pipe tables; raw HTML
in it is escaped).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


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

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:980px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #ddd;padding-bottom:.3em}h2{font-size:1.25em;margin-top:1.6em}
table{border-collapse:collapse;margin:.8em 0;font-size:.92em}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left}
th{background:#f4f4f4}tr:nth-child(even) td{background:#fafafa}
pre{background:#f6f8fa;border:1px solid #e1e4e8;padding:.8em;overflow-x:auto;font-size:.85em}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}
"""


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


def _table_html(headers: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_to_html(text: str) -> str:
    """CommonMark with pipe tables (markdown-it-py, the parser ``rich`` uses); raw HTML in the text is shown
    escaped, never interpreted (class names and paths come from users)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text.strip())


def to_html(blocks: Sequence[Block], title: str) -> str:
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            body.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Paragraph):
            body.append(f"<p>{html.escape(b.text)}</p>")
        elif isinstance(b, Table):
            body.append(_table_html(b.headers, b.rows))
        elif isinstance(b, Image):
            data = base64.b64encode(b.png).decode("ascii")
            body.append(f'<img alt="{html.escape(b.alt)}" src="data:image/png;base64,{data}">')
        elif isinstance(b, Code):
            body.append(f"<pre>{html.escape(b.text)}</pre>")
        elif isinstance(b, Markdown):
            body.append(markdown_to_html(b.text))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")
