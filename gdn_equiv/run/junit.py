"""The ledger as JUnit XML (``--junit-xml``), one testcase per asked row: a writer of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.run.failures import file_name_part
from gdn_equiv.run.rows import Check

__all__ = ["write_junit"]


def write_junit(checks: list[Check], path: Path, *, meta: dict[str, Any]) -> None:
    """JUnit XML, one testcase per row: a failure carries the message, the shrunk example and its
    reproducer; "not exercised" and "not reached" are failures too; a P6 search that found nothing (or cannot run here)
    is a skip with the reason."""
    import socket
    import xml.etree.ElementTree as ET
    from datetime import datetime, timezone

    failures = sum(Outcome(c.result).fails for c in checks)
    skipped = sum(Outcome(c.result).reports for c in checks)
    seconds = f"{sum(c.seconds for c in checks):.3f}"
    counts = {"tests": str(len(checks)), "failures": str(failures), "errors": "0", "skipped": str(skipped)}
    root = ET.Element("testsuites", {"name": "gdn-equiv", **counts, "time": seconds})
    suite = ET.SubElement(
        root,
        "testsuite",
        {
            "name": f"gdn-equiv {meta.get('mode', 'check')}",
            **counts,
            "time": seconds,
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "hostname": socket.gethostname(),
        },
    )
    props = ET.SubElement(suite, "properties")
    for key, value in meta.items():
        ET.SubElement(props, "property", {"name": str(key), "value": str(value)})
    for check in checks:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"gdn_equiv.{check.family}.{file_name_part(check.backend)}",
                "name": check.row_id,
                "time": f"{check.seconds:.3f}",
            },
        )
        worst_diff, tol = check.worst_cells()
        out = (
            f"family: {check.family}; examples: {check.examples} (n/a: {check.not_applicable}); "
            f"result: {check.result}; worst difference: {worst_diff} ({tol}); guard reasons: {dict(check.reasons)}"
        )
        outcome = Outcome(check.result)
        if outcome in (Outcome.FAILED, Outcome.MISSED_FUSION):
            text = [check.failure]
            if check.example is not None:
                text += ["", f"Shrunk example: {check.example.short()}", check.example.to_json()]
            if check.repro:
                text += ["", f"Reproducer: python {check.repro}", f"Replay: gdn-equiv repro {check.repro_json}"]
            first = check.failure.splitlines()[0] if check.failure else "failed"
            kind = check.failure.split(":", 1)[0] if ":" in check.failure else "Failure"
            ET.SubElement(case, "failure", {"message": first[:500], "type": kind}).text = "\n".join(text)
        elif outcome.fails:  # not exercised, not reached, crashed, interrupted
            kind = "".join(word.capitalize() for word in outcome.name.split("_"))
            ET.SubElement(case, "failure", {"message": check.failure[:500], "type": kind})
        elif outcome.reports:
            reasons = {
                Outcome.NONE_FOUND: f"no counterexample found in {check.examples} examples: the condition may be "
                f"unnecessary on {check.backend}",
                Outcome.NOT_APPLICABLE: f"cannot run here: {check.failure}",
                Outcome.UPSTREAM_REFUSED: f"the upstream constructor refused a drawn config: {check.failure[:400]}",
                Outcome.MISSED_FUSION_ALLOWED: f"missed fusion, allowed: {check.failure[:400]}",
            }
            reason = reasons[outcome]
            ET.SubElement(case, "skipped", {"message": reason})
        ET.SubElement(case, "system-out").text = out
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
