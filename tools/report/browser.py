"""What a person sees of a report page: headless Chromium loads it at a given window size and a probe script
reads the drawn layout (the headline's text and place, the grids' cells, the run history's dots drawn inside
the window, anything wider than the window). Layout, not markup: only a browser knows whether a table or a
chart overflows.

The page is copied with the probe appended, opened from a file (no network: the page is self-contained) in a
throwaway profile, and the DOM Chromium dumps after load holds the probe's JSON."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile

BROWSERS = ("chromium", "chromium-browser", "google-chrome")

PROBE = """<script>
window.addEventListener("load", () => {
  const vw = document.documentElement.clientWidth;
  const name = e => e.tagName.toLowerCase() + (typeof e.className === "string" && e.className ? "." + e.className : "");
  const wide = [...document.querySelectorAll("body *")].filter(e => {
    const r = e.getBoundingClientRect(); return r.width > 0 && r.right > vw + 1; });
  const h = document.querySelector(".headline");
  const r = h ? h.getBoundingClientRect() : null;
  const out = {viewport: vw, scroll_width: document.documentElement.scrollWidth,
    headline: h ? h.innerText.trim() : null, headline_top: r ? r.top : null, headline_height: r ? r.height : 0,
    grid_cells: document.querySelectorAll("table.grid:not(.fake) td[data-cell]").length,
    fake_cells: document.querySelectorAll("table.grid.fake td[data-cell]").length,
    history_runs: [...document.querySelectorAll("svg.history circle[data-commit]")].filter(c => {
      const b = c.getBoundingClientRect(); return b.width > 0 && b.left >= 0 && b.right <= vw; }).length,
    overflow: [...new Set(wide.map(name))].slice(0, 20)};
  const pre = document.createElement("pre");
  pre.id = "sleepwake-probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""
_RESULT = re.compile(r'<pre id="sleepwake-probe">(.*?)</pre>', re.S)


class BrowserError(RuntimeError):
    pass


def find_browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    raise BrowserError(
        "no Chromium on PATH (looked for %s): install Debian's chromium (tools/setup.sh does)" % ", ".join(BROWSERS)
    )


def look(
    page_html: str, width: int = 1280, height: int = 900, browser: str | None = None, timeout_s: float = 60.0
) -> dict:
    """The probe's reading of page_html drawn in a width x height window."""
    browser = browser or find_browser()
    with tempfile.TemporaryDirectory(prefix="sleepwake-browser-") as tmp:
        page = os.path.join(tmp, "page.html")
        with open(page, "w", encoding="utf-8") as f:
            f.write(page_html.replace("</body>", PROBE + "</body>") if "</body>" in page_html else page_html + PROBE)
        argv = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--user-data-dir=" + os.path.join(tmp, "profile"),
            "--window-size=%d,%d" % (width, height),
            "--virtual-time-budget=5000",
            "--dump-dom",
            "file://" + page,
        ]
        env = dict(os.environ, HOME=tmp)  # Chromium writes under $HOME, which a sandbox may not allow
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            raise BrowserError("%s did not finish drawing the page in %.0f s" % (browser, timeout_s)) from None
        found = _RESULT.search(done.stdout)
        if not found:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise BrowserError(
                "%s (exit %d) dumped no probe result; its last lines:\n%s" % (browser, done.returncode, tail)
            )
        return json.loads(html.unescape(found.group(1)))
