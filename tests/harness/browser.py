"""Headless Chromium (Debian's ``chromium``, installed by scripts/setup.sh) for the rollout page's tests
and its screenshot: load a local file, run it, give back the DOM as it stands after the load, or a PNG.

``--no-sandbox``: the tests run as root, where Chromium's sandbox refuses to start. Every run gets its
own profile directory (removed after), so nothing is left behind and runs do not share state.
``--disable-gpu``/``--headless``: no display. Nothing is fetched from the network: the page is a file
and loads nothing.
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

NAMES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-extensions", "--mute-audio")
MEASURED = re.compile(r'<pre id="measured">(.*?)</pre>', re.S)

# Written into a copy of the page before it is loaded: what a person sees, measured by the browser
# (each host's bar: its segments' kinds, seconds, left edge and width in pixels; the fatal marker's
# place; the band of the time out of the router; the host's visible text), as JSON in <pre id="measured">.
MEASURE = """<script>
(() => {
  const out = {title: document.title, scripts: document.querySelectorAll('script').length - 1, hosts: {}};
  for (const host of document.querySelectorAll('div.host')) {
    const entry = {verdict: host.dataset.verdict || null, text: host.innerText, segments: [], marker: null, out_of_router: null, bar_width: null};
    const svg = host.querySelector('svg.bar');
    if (svg) {
      const box = svg.getBoundingClientRect();
      entry.bar_width = box.width;
      for (const rect of svg.querySelectorAll('rect.segment')) {
        const b = rect.getBoundingClientRect();
        entry.segments.push({kind: rect.dataset.kind, seconds: Number(rect.dataset.seconds), x: b.left - box.left, width: b.width});
      }
      const out = svg.querySelector('rect.out');
      if (out) {
        const b = out.getBoundingClientRect();
        entry.out_of_router = {x: b.left - box.left, width: b.width};
      }
      const marker = svg.querySelector('line.fatal-marker');
      if (marker) {
        const b = marker.getBoundingClientRect();
        entry.marker = {seconds: Number(marker.dataset.seconds), x: b.left + b.width / 2 - box.left};
      }
    }
    out.hosts[host.dataset.host] = entry;
  }
  const pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def chromium() -> str | None:
    """The Chromium executable, or None when none is installed."""
    return next((found for found in (shutil.which(name) for name in NAMES) if found), None)


def _run(page: Path, *flags: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    executable = chromium()
    if executable is None:
        raise RuntimeError(f"no Chromium found (looked for {', '.join(NAMES)}): scripts/setup.sh installs Debian's chromium")
    with tempfile.TemporaryDirectory(prefix="inferops-chromium-") as profile:
        cmd = [executable, *FLAGS, f"--user-data-dir={profile}", *flags, page.resolve().as_uri()]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)


def measure(page: Path, workdir: Path, width: int = 1200) -> dict[str, Any]:
    """The page as a person sees it at ``width`` pixels: MEASURE's JSON, from a copy of the page with
    the measuring script added (the page itself has none)."""
    copy = workdir / f"measured-{page.name}"
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    dom = _run(copy, f"--window-size={width},900", "--dump-dom").stdout
    found = MEASURED.search(dom)
    if found is None:
        raise AssertionError(f"the measuring script left nothing in the DOM of {copy}:\n{dom[-2000:]}")
    result: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return result


def screenshot(page: Path, png: Path, width: int = 1100, height: int = 900) -> Path:
    """A PNG of the page's first ``height`` pixels at ``width``."""
    _run(page, f"--window-size={width},{height}", f"--screenshot={png.resolve()}")
    return png
