"""Print the engines' declared op surfaces (:func:`gdn_equiv.serving.surface.surfaces`) as a markdown table,
releases with the same row grouped: what S0-surface draws and what S0-outside asks outside.

    python scripts/serving_surface_table.py
"""

from __future__ import annotations

from gdn_equiv.serving.surface import REFERENCE_SURFACES, OpSurface, surfaces


def cells(s: OpSurface) -> tuple[str, ...]:
    w = f"{s.widths[0]}-{s.widths[1]}"
    drawn = [
        "/".join(s.addressing),
        f"W {w}",
        f"D 1-8, {s.block_n - 1}-{s.block_n + 1}, {2 * s.block_n + 1}" if s.block_n else "D 1-8, 255-257, 513",
        f"state W-1..W-1+{s.max_extra} ({s.layout})",
        "counts 1..k" if s.accepted else "-",
        "circular" if s.circular else "-",
        "pads between rows" if s.pad_id is not None else "no pads",
        f"B {','.join(map(str, s.block_sizes))}" if s.block_sizes else "-",
    ]
    return (s.engine, s.path, s.op, s.function.split(":")[1], "; ".join(d for d in drawn if d != "-"),
            ", ".join(s.outside) or "-", ", ".join(a for a in s.args))  # fmt: skip


def main() -> None:
    rows: dict[tuple[str, ...], list[str]] = {}
    for (_, version), ops in surfaces().items():
        for s in ops:
            rows.setdefault(cells(s), []).append(version)
    for s in REFERENCE_SURFACES:
        rows.setdefault(cells(s), []).append("in-house")
    print("| engine | releases | path | op | function | drawn | outside (raise or answer right) | arguments |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (engine, path, op, fn, drawn, outside, args), versions in rows.items():
        rel = versions[0] if len(versions) == 1 else f"{versions[0]}-{versions[-1]}"
        print(f"| {engine} | {rel} | {path} | {op} | `{fn}` | {drawn} | {outside} | {args} |")


if __name__ == "__main__":
    main()
