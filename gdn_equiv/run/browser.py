"""Pictures of pages in a real browser: the system's Chromium driven by Playwright (the ``browser`` extra).

Playwright drives a Chromium installed by the system (Debian: ``apt-get install chromium``) through
``executable_path``, so nothing is downloaded. :func:`missing` says why no picture can be taken here; the
callers (the HypoFuzz dashboard's snapshot, ``tools/page_screenshot.py``, the report page's browser tests)
say so rather than fail.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

BROWSER_EXTRA = "pip install gdn-equiv[browser]"
#: a headless Chromium that reaches nothing on its own (CI runs as root in a container: no sandbox)
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def chromium_path() -> str | None:
    """The Chromium to drive: ``$GDN_EQUIV_CHROMIUM``, else ``chromium`` (or ``chromium-browser``) on the PATH."""
    return os.environ.get("GDN_EQUIV_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def missing() -> str | None:
    """Why no page can be opened here, or ``None``."""
    if importlib.util.find_spec("playwright") is None:
        return f"needs Playwright: {BROWSER_EXTRA}"
    if chromium_path() is None:
        return "needs a Chromium: apt-get install chromium (or GDN_EQUIV_CHROMIUM=/path/to/chromium)"
    return None


def screenshot(
    url: str,
    out: Path,
    *,
    width: int = 1400,
    height: int = 900,
    settle_ms: int = 0,
    wait_for: str | None = None,
    full_page: bool = True,
) -> Path:
    """Open ``url`` (a ``file://`` or ``http://`` address) and save the whole page as a PNG at ``out``;
    ``wait_for`` is a selector to wait for (a page its script draws), ``settle_ms`` a pause after it;
    ``full_page=False`` keeps the viewport's first screen only."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    if executable is None:
        raise RuntimeError(str(missing()))
    out.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=list(CHROMIUM_ARGS))
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(url, wait_until="networkidle")
            if wait_for is not None:
                page.wait_for_selector(wait_for, timeout=30_000)
            if settle_ms:
                page.wait_for_timeout(settle_ms)
            page.screenshot(path=str(out), full_page=full_page)
        finally:
            browser.close()
    return out
