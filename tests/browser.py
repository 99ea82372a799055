"""Pages checked as a reader sees them: rendered by headless Chromium (Debian's ``chromium``), measured by a script
run in the page after it loaded, read back from the dumped DOM.

:func:`check_page` copies the page with a probe script first in its ``<head>`` (it records script errors,
``console.error`` calls and resources that failed to load from the start), renders it at 1280 px wide, and returns
what the rendered page shows: its visible text without code blocks, each image's natural width, the page's and the
viewport's widths, and where the first element matching the headline lies.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

PROBE = """<script>
window.__errors = [];
window.addEventListener("error", function (e) {
  var t = e.target || {};
  window.__errors.push(e.message || ("failed to load " + (t.src || t.href || t.tagName)));
}, true);
(function () {
  var original = console.error;
  console.error = function () { window.__errors.push(Array.from(arguments).join(" ")); original.apply(console, arguments); };
})();
window.addEventListener("load", function () {
  var headline = new RegExp(document.documentElement.dataset.headline);
  var found = Array.from(document.body.querySelectorAll("h1, h2, p, strong, li, td")).find(function (el) {
    return headline.test(el.textContent.trim());
  });
  var rect = found ? found.getBoundingClientRect() : null;
  var clone = document.body.cloneNode(true);
  clone.querySelectorAll("pre, code, script").forEach(function (el) { el.remove(); });
  document.body.appendChild(clone);  /* innerText needs a rendered element */
  clone.style.position = "absolute"; clone.style.left = "-99999px";
  var text = clone.innerText;
  clone.remove();
  var result = {
    text: text, errors: window.__errors,
    images: Array.from(document.images).map(function (i) { return {alt: i.alt, complete: i.complete, width: i.naturalWidth}; }),
    page_width: document.documentElement.scrollWidth, viewport_width: window.innerWidth,
    viewport_height: window.innerHeight,
    headline: rect ? {top: rect.top, bottom: rect.bottom, text: found.textContent.trim().slice(0, 200)} : null
  };
  var out = document.createElement("pre"); out.id = "__check"; out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>"""

#: Markdown syntax that must not reach a reader as text
MARKDOWN_MARKERS = (re.compile(r"\*\*"), re.compile(r"\]\("), re.compile(r"^#{1,6} ", re.M),
                    re.compile(r"^\|?\s*-{3,}\s*\|", re.M), re.compile(r"```"), re.compile(r"(?<!\w)__\w"))


def check_page(page: Path, headline: str, width: int = 1280, height: int = 800) -> dict[str, Any]:
    """Render ``page`` in headless Chromium at ``width`` x ``height`` and return the probe's measurements;
    ``headline`` is a regular expression for the text of the element that must be in the first screen."""
    assert CHROMIUM, "chromium is not installed"
    source = page.read_text(encoding="utf-8")
    probed = source.replace("<head>", "<head>" + PROBE, 1).replace(
        "<html", f"<html data-headline=\"{html.escape(headline)}\"", 1)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / page.name
        copy.write_text(probed, encoding="utf-8")
        done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               f"--window-size={width},{height}", "--virtual-time-budget=10000",
                               f"--user-data-dir={tmp}/profile", "--dump-dom", copy.as_uri()],
                              capture_output=True, text=True, timeout=120)
    match = re.search(r'<pre id="__check">(.*?)</pre>', done.stdout, re.S)
    assert match, f"the probe did not report (chromium exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(match.group(1)))


def problems(result: dict[str, Any]) -> list[str]:
    """Everything a reader would see wrong, from :func:`check_page`'s result (empty: the page passes)."""
    found = [f"literal Markdown {m.pattern!r} on screen: ...{result['text'][max(0, s.start() - 40):s.end() + 40]!r}..."
             for m in MARKDOWN_MARKERS if (s := m.search(result["text"]))]
    found += [f"image {i['alt']!r} did not load" for i in result["images"] if not (i["complete"] and i["width"] > 0)]
    if result["page_width"] > result["viewport_width"]:
        found.append(f"horizontal overflow: the page is {result['page_width']} px wide in a "
                     f"{result['viewport_width']} px window")
    head = result["headline"]
    if head is None:
        found.append("the headline is not on the page")
    elif not (0 <= head["top"] and head["bottom"] <= result["viewport_height"]):
        found.append(f"the headline {head['text'][:60]!r} is not in the first screen (top {head['top']:.0f} px, "
                     f"bottom {head['bottom']:.0f} px of {result['viewport_height']})")
    found += [f"console error: {e}" for e in result["errors"]]
    return found
