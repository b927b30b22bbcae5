"""The run's page (``--html``, ``--gdn-html``) from real runs with findings, read back as data and in a browser.

A ``check`` of a planted backend (``gdn_equiv.harness.planted:scaled``: wrong on some channel counts) over two
families, two backends and two properties writes its report and page; the page must show every row the ledger
asked, each with the ledger's result, and link each finding's failure JSON and reproducer. In a real browser
(Chromium driven by Playwright, the ``browser`` extra; skipped, saying why, where either is missing) the filters
must hide exactly the rows that do not match, and a finding's reproducer link must open the file the report
directory holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from gdn_equiv.run import browser as run_browser
from gdn_equiv.run import cli, html_report
from gdn_equiv.run.cli import common as cli_common

PLANTED = "gdn_equiv.harness.planted:scaled"
RUN = [
    "check", "--profile", "dev", "--examples", "20", "--max-seq-len", "4", "--dtype", "float32", "--skip-necessity",
    "--backend", f"torch,{PLANTED}", "--no-isolate", "--family", "gated_deltanet,kda",
    "--property", "P7-backend-vs-torch", "--property", "P3-forward-exact",
]  # fmt: skip


class _Rows(HTMLParser):
    """The ledger rows of a page: their ``data-*`` attributes, the row id's text (``id``) and the status
    badge's (``shown``)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self._in_status = self._in_id = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "tr" and "ledger-row" in a.get("class", ""):
            self.rows.append({k[5:]: v for k, v in a.items() if k.startswith("data-")})
        self._in_status = tag == "span" and "status" in a.get("class", "").split()
        if tag == "td":
            self._in_id = "id" in a.get("class", "").split()

    def handle_data(self, data: str) -> None:
        if self._in_status and self.rows:
            self.rows[-1]["shown"] = data.strip()
            self._in_status = False
        elif self._in_id and self.rows and data.strip():
            self.rows[-1]["id"] = data.strip()
            self._in_id = False


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real ``check`` with findings: its exit status, summary and page."""
    pytest.importorskip("jinja2", reason="the page needs Jinja2 (pip install gdn-equiv[html])")
    import torch

    where = tmp_path_factory.mktemp("page")
    report, page = where / "report", where / "pages" / "run.html"
    threads = torch.get_num_threads()
    try:  # the command sets one torch thread for its tiny examples: the rest of this process keeps its own
        status = cli.main([*RUN, "--report", str(report), "--database", str(where / "db"), "--html", str(page)])
    finally:
        torch.set_num_threads(threads)
    summary = json.loads((report / "summary.json").read_text())
    return {"status": status, "summary": summary, "page": page, "report": report}


def test_check_page_shows_every_asked_row_with_the_ledgers_result(run: dict[str, Any]) -> None:
    checks = run["summary"]["checks"]
    assert run["status"] == cli_common.EXIT_FAILED and any(c["result"] == "FAIL" for c in checks), checks
    parser = _Rows()
    parser.feed(run["page"].read_text())
    asked = [(c["property"], c["family"], c["backend"], c["result"]) for c in checks]
    shown = [(r["property"], r["family"], r["backend"], r["shown"]) for r in parser.rows]
    assert shown == asked and len(asked) == 8  # 2 properties x 2 families x 2 backends, n/a rows included
    assert {r["result"] for r in parser.rows} >= {"FAIL", "pass", "n/a"}


def test_html_without_jinja2_refuses_before_any_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(html_report, "missing", lambda: "--html needs Jinja2: pip install gdn-equiv[html]")
    report = tmp_path / "report"
    status = cli.main([*RUN, "--report", str(report), "--html", str(tmp_path / "p.html")])
    assert status == cli_common.EXIT_ENVIRONMENT
    assert not report.exists() and not (tmp_path / "p.html").exists()


GATE_TEST = """
import time
from hypothesis import Phase, given, settings, strategies as st
import pytest

def test_fine():
    pass

@pytest.mark.skip(reason="planted skip")
def test_skipped():
    pass

@given(st.integers(0, 100))
def test_small(n):
    assert n < 10

# runs until the stop of -x reaches it (between two examples, or before it starts)
@settings(max_examples=20_000, database=None, deadline=None, phases=[Phase.generate])
@given(st.integers())
def test_stopped(n):
    time.sleep(0.005)

def test_never():
    pass
"""


@pytest.mark.slow
def test_gate_page_lists_every_collected_test_with_pytests_outcome(tmp_path: Path) -> None:
    """``--gdn-html`` in a pytest run (a subprocess: the plugin's state is per session) under xdist with ``-x``:
    every collected test with its outcome, the failure with Hypothesis' falsifying example and its rerun command,
    the tests the stop kept from running (or finishing) ``not reached``, and the process' own exit status (1:
    the plugin turns xdist's "interrupted" 2 of a -x stop into "tests failed"; the page said 2, issue #49)."""
    pytest.importorskip("jinja2", reason="the page needs Jinja2 (pip install gdn-equiv[html])")
    (tmp_path / "test_planted.py").write_text(GATE_TEST)
    page = tmp_path / "gate.html"
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-n", "1", "-p", "no:cacheprovider", "--gdn-html", str(page)]
    env = {**os.environ, "HYPOTHESIS_PROFILE": "dev"}
    done = subprocess.run([*command, "test_planted.py"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    parser = _Rows()
    text = page.read_text()
    assert "pytest exit status 1" in text and "pytest exit status 2" not in text
    assert 'id="run-status">stopped at its first failure (-x)<' in text
    parser.feed(text)
    results = {r["id"].partition("::")[2]: r["shown"] for r in parser.rows}
    assert results == {
        "test_fine": "pass", "test_skipped": "skipped", "test_small": "FAIL", "test_stopped": "not reached",
        "test_never": "not reached",
    }, results  # fmt: skip
    assert (
        "Failing test case: test_small(\nn=10,\n)" in text
        and "python -m pytest &#39;test_planted.py::test_small&#39;" in text
    )
    assert "planted skip" in text


# ---- in a real browser ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Any:
    """A headless system Chromium under Playwright; skipped with the reason where either is missing."""
    reason = run_browser.missing()
    if reason is not None:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=run_browser.chromium_path(), args=list(run_browser.CHROMIUM_ARGS)
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, run: dict[str, Any]) -> Any:
    tab = browser.new_page()
    tab.goto(run["page"].resolve().as_uri())
    yield tab
    tab.close()


def _visible(page: Any) -> list[dict[str, str]]:
    return page.eval_on_selector_all(
        "tr.ledger-row",
        "rows => rows.filter(r => r.offsetParent !== null).map(r => ({...r.dataset,"
        " shown: r.querySelector('.status').innerText}))",
    )


def test_browser_shows_every_asked_row_with_its_status(page: Any, run: dict[str, Any]) -> None:
    checks = run["summary"]["checks"]
    rows = _visible(page)
    assert [(r["property"], r["family"], r["backend"], r["shown"]) for r in rows] == [
        (c["property"], c["family"], c["backend"], c["result"]) for c in checks
    ]
    assert page.inner_text("#shown-count") == str(len(checks))
    failing = sum(c["result"] in ("FAIL", "not exercised", "not reached") for c in checks)
    assert page.inner_text("#failing-count") == str(failing) and failing > 0


@pytest.mark.parametrize(("select", "key"), [("status", "result"), ("property", "property"),
                                             ("family", "family"), ("backend", "backend")])  # fmt: skip
def test_browser_filter_shows_exactly_the_matching_rows(page: Any, run: dict[str, Any], select: str, key: str) -> None:
    checks = run["summary"]["checks"]
    values = sorted({c[key] for c in checks})
    assert len(values) > 1, f"the run must have rows of more than one {key} for the filter to be tested"
    for value in values:
        page.select_option(f"#filter-{select}", value)
        expected = [(c["property"], c["family"], c["backend"]) for c in checks if c[key] == value]
        shown = [(r["property"], r["family"], r["backend"]) for r in _visible(page)]
        assert shown == expected, (select, value)
        assert page.inner_text("#shown-count") == str(len(expected))
    page.select_option(f"#filter-{select}", "")
    assert len(_visible(page)) == len(checks)


def test_browser_filters_combine(page: Any, run: dict[str, Any]) -> None:
    checks = run["summary"]["checks"]
    page.select_option("#filter-status", "FAIL")
    page.select_option("#filter-backend", PLANTED)
    expected = [c["property"] for c in checks if c["result"] == "FAIL" and c["backend"] == PLANTED]
    assert [r["property"] for r in _visible(page)] == expected and expected


def test_browser_findings_reproducer_link_opens_the_reports_file(page: Any, run: dict[str, Any]) -> None:
    failed = [c for c in run["summary"]["checks"] if c["result"] == "FAIL"]
    assert page.locator(".finding").count() == len(failed) > 0
    first = page.locator(".finding").first
    row = failed[0]
    assert first.locator(".example-short").inner_text().startswith(f"Example(family={row['family']}")
    for selector, key in ((".repro", "repro"), (".repro-json", "repro_json")):
        href = first.locator(selector).get_attribute("href")
        target = (run["page"].parent / href).resolve()
        assert target == Path(row[key]).resolve() and target.is_file()
        with page.expect_navigation():
            first.locator(selector).click()
        assert page.url == target.as_uri()
        assert Path(row[key]).read_text()[:40] in page.inner_text("body")
        page.go_back()


def test_gate_ledger_files_each_test_by_record_backend_and_family_and_an_unrun_one_fails_the_page(
    tmp_path: Path,
) -> None:
    """Without pytest: the node ids' parameters name the backend (dashes inside a name kept) and family, a
    gate test is filed under its record, and a collected test that never reported stays ``not reached``,
    counted failing on the page (a session stopped by ``-x`` checked less than it was asked)."""
    ledger = html_report.GateLedger(
        records={"test_fused_forward_is_bitwise_equal": "P3-forward-exact"},
        backends=["torch", "fla-triton"],
        families=["gla", "gated_deltanet"],
    )
    ids = [
        "test_properties.py::test_fused_forward_is_bitwise_equal[fla-triton-gla]",
        "tests/test_x.py::test_passes[torch]",
        "tests/test_x.py::test_never_ran",
    ]
    ledger.collected(ids)
    ledger.reported(ids[0], when="call", outcome="failed", longrepr="E   boom", duration=0.5, examples=7, xfail=False)
    ledger.reported(ids[0], when="teardown", outcome="passed", longrepr="", duration=0.1, examples=0, xfail=False)
    ledger.reported(ids[1], when="call", outcome="passed", longrepr="", duration=0.2, examples=3, xfail=False)
    summary = ledger.summary(status="complete", meta={})
    rows = [(c["property"], c["family"], c["backend"], c["result"], c["examples"]) for c in summary["checks"]]
    assert rows == [
        ("P3-forward-exact", "gla", "fla-triton", "FAIL", 7),
        ("test_x", "gla,gated_deltanet", "torch", "pass", 3),
        ("test_x", "gla,gated_deltanet", "-", "not reached", 0),
    ]
    page = tmp_path / "gate.html"
    env = {"device": "cpu"}
    text = html_report.render(summary, page=page, report_dir=None, title="t", env=env, failing=html_report.GATE_FAILING)
    assert '<b id="failing-count">2</b>' in text and text.count('class="finding"') == 2
