"""A page's picture in the system's Chromium, driven by Playwright (``pip install gdn-equiv[browser]``).

    python tools/page_screenshot.py gdn-equiv-report/run.html docs/results/report-page.png
    python tools/page_screenshot.py http://127.0.0.1:9999/ docs/results/fuzz-dashboard/dashboard.png --settle 4

The README's pictures of the report page and of the HypoFuzz dashboard are taken this way
(:func:`gdn_equiv.run.browser.screenshot`); exit 3 with the reason where no browser is installed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gdn_equiv.run import browser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", help="a file (an HTML page) or an http:// address")
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("--width", type=int, default=1400, help="viewport width in pixels (default 1400)")
    parser.add_argument("--height", type=int, default=900, help="viewport height in pixels (default 900)")
    parser.add_argument(
        "--settle", type=float, default=0.0, help="seconds to wait after loading (a page its script draws)"
    )
    parser.add_argument("--first-screen", action="store_true", help="the viewport only, not the whole page")
    args = parser.parse_args(argv)
    reason = browser.missing()
    if reason is not None:
        print(f"page_screenshot: {reason}", file=sys.stderr)
        return 3
    url = args.page if "://" in args.page else Path(args.page).resolve().as_uri()
    out = browser.screenshot(
        url,
        Path(args.out),
        width=args.width,
        height=args.height,
        settle_ms=int(args.settle * 1000),
        full_page=not args.first_screen,
    )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
