"""``gdn-equiv families``: the layer families ``--family`` accepts."""

from __future__ import annotations

import argparse
from typing import Any

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model import families as registry  # registry.get_family read per call (a test plants a failing one)
from gdn_equiv.run.cli.common import EXIT_OK, one_line, subcommand


def cmd_families(args: argparse.Namespace) -> int:
    """One aligned row per family: its fla layer, mask handling, conv channels and activations (for its
    default config), the targets that run it, and what it computes."""
    fla_only = registry.fla_only_families()
    rows = [["family", "fla layer", "mask", "q / k / v channels", "activation", "targets", "what it is"]]
    for name in [*registry.known_families(), *fla_only]:
        try:
            family: Any = registry.get_family(name)
        except (ImportError, InvalidArgument) as exc:  # a family whose module (or its extra) is not installed
            rows.append([name, "-", "-", "-", "-", "-", f"cannot be loaded here: {one_line(str(exc))}"])
            continue
        c = family.config_cls()
        if name in fla_only:  # fla's class with another family's examples (its channels are fla's)
            channels = [family.conv_channels(c, n) for n in c.SLOTS]
            targets = f"[fla-only] fla, {family.like}'s examples"
        else:
            channels = [c.conv_channels(n) for n in c.SLOTS]
            targets = "gdn_equiv, fla" if family.fla_class else "gdn_equiv"
        activations = [str(c.conv_spec(n).activation or "none") for n in c.SLOTS]
        activation = activations[0] if len(set(activations)) == 1 else " / ".join(activations)
        fla_layer = family.fla_class or "-"
        rows.append(
            [name, fla_layer, family.mask, " / ".join(map(str, channels)), activation, targets, family.description]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    rows.insert(1, ["-" * w for w in widths])
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """``families``' parser."""
    p = subcommand(sub, "families", "list the layer families --family accepts")
    p.set_defaults(prepare=lambda args: args, run=cmd_families)
