"""A finding as files: the shrunk example as a versioned JSON (:func:`write_failure`, validated on read by
:func:`read_failure`, what ``gdn-equiv repro`` replays) and a standalone reproducer script beside it."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdn_equiv.model.example import Example
from gdn_equiv.model.families import DEFAULT_FAMILY
from gdn_equiv.run.rows import Check

__all__ = [
    "FORMAT_VERSION",
    "REPRO_TEMPLATE",
    "Failure",
    "InvalidFailureFile",
    "file_name_part",
    "read_failure",
    "write_atomically",
    "write_failure",
]

#: the failure JSON's ``format_version``; bump it when a field changes meaning or is removed
FORMAT_VERSION = 1


REPRO_TEMPLATE = '''#!/usr/bin/env python
"""Standalone reproducer written by gdn-equiv: {name} on backend {backend!r} (family {family}).

{failure}
"""
import os

import torch

if {device!r} == "cpu" and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # as gdn-equiv ran it: Triton kernels in the interpreter

from gdn_equiv.harness.interpreter import make_faithful

make_faithful()  # the interpreter rounding fp32->bf16 as a GPU does, as gdn-equiv ran it

from gdn_equiv.model.example import Example
from gdn_equiv.harness.properties import {function}

EXAMPLE = Example.from_json({example_json!r})

if __name__ == "__main__":
    {function}(EXAMPLE, device={device!r}{extra})
    print("no failure: the defect is gone")
'''


def file_name_part(name: str) -> str:
    """A backend name (``pkg.mod:fn``) as a file-name part."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_failure(out_dir: Path, stem: str, check: Check, device: str) -> None:
    """The failure JSON and the reproducer of ``check`` (a failing row with its example) under ``out_dir``, named
    ``stem``; the row learns where they are (``repro``, ``repro_json``)."""
    assert check.example is not None
    failure_json = out_dir / f"{stem}.json"
    write_atomically(
        failure_json,
        json.dumps(
            {
                "format_version": FORMAT_VERSION,
                "property": check.name,
                "function": check.function,
                "family": check.family,
                "backend": check.backend,
                "dtype": check.dtype,
                "target": check.target,
                "target_options": dict(check.target_options),
                "device": device,
                "failure": check.failure,
                "example": json.loads(check.example.to_json()),
            },
            indent=2,
        ),
    )
    extra = ""
    if check.function == "check_target_guard":
        options = {"target": check.target, **check.target_options}
        extra = "".join(f", {k}={v!r}" for k, v in options.items())
    script = out_dir / f"{stem}.py"
    own = getattr(check.example, "reproducer", None)  # a serving case (S1-S7) writes its own script
    script.write_text(
        own(check.function, check.failure)
        if own is not None
        else REPRO_TEMPLATE.format(
            name=check.name,
            backend=check.backend,
            family=check.family,
            failure=check.failure.replace('"""', "'''"),
            function=check.function,
            example_json=check.example.to_json(),
            device=device,
            extra=extra,
        )
    )
    check.repro, check.repro_json = str(script), str(failure_json)


# ---- reading a failure back (gdn-equiv repro) ------------------------------------------------


class InvalidFailureFile(ValueError):
    """A failure JSON that cannot be replayed: missing, unreadable, of an unknown format version or
    not validating. The message is one line naming the file, the value and the rule."""


@dataclass(frozen=True)
class Failure:
    """A validated failure JSON (format version 1)."""

    property: str
    function: str
    family: str
    backend: str
    dtype: str
    target: str
    target_options: dict[str, str]
    device: str
    failure: str
    example: Example


_FAILURE_FIELDS: dict[str, type] = {
    "format_version": int,
    "property": str,
    "function": str,
    "family": str,
    "backend": str,
    "dtype": str,
    "target": str,
    "target_options": dict,
    "device": str,
    "failure": str,
    "example": dict,
}
#: the example fields format version 1 was written with; fields Example gained since (``family``)
#: may be absent and take their defaults
_EXAMPLE_FIELDS_V1 = frozenset(
    {
        "config",
        "dtype",
        "batch",
        "seq_len",
        "seed",
        "scale",
        "varlen",
        "seq_lens",
        "pad_side",
        "cache",
        "prefix_len",
        "use_cache",
        "grad",
        "train",
    }
)
_TYPE_NAMES = {int: "an integer", str: "a string", dict: "a JSON object", bool: "a boolean", float: "a number"}


def _is(value: Any, kind: type) -> bool:
    # JSON's true/false arrive as bool, a subclass of int: never let one pass for a number
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, kind)


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve: leave those fields to the class's own checks
        return {}


def _fits(value: Any, hint: Any) -> bool | None:
    """Whether a JSON ``value`` fits a field's type hint; ``None`` when the hint is not a plain JSON type."""
    if hint is type(None):
        return value is None
    if hint in (bool, int, float, str):
        return _is(value, hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        verdicts = [_fits(value, a) for a in args]
        return True if True in verdicts else None if None in verdicts else False
    if origin in (tuple, list):
        if not isinstance(value, list):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            # a fixed-length tuple (``tuple[str, Any]``): one hint per position
            return len(value) == len(args) and all(_fits(v, a) is not False for v, a in zip(value, args, strict=True))
        element = args[0] if args else None
        return element is None or all(_fits(v, element) is not False for v in value)
    if dataclasses.is_dataclass(hint):
        return isinstance(value, dict)
    return None


def _check_fields(where: str, path: str, payload: dict[str, Any], cls: type) -> None:
    """Type-check the keys of ``payload`` that are fields of dataclass ``cls``, recursing into nested
    dataclasses (a config's conv specs). Unknown keys are left to the class's own ``from_*``."""
    hints = _hints(cls)
    for name, value in payload.items():
        hint = hints.get(name)
        if hint is None:
            continue
        if _fits(value, hint) is False:
            raise InvalidFailureFile(f"{where}: {path}.{name} must be {_hint_name(hint)}, got {json.dumps(value)}")
        nested = [h for h in (hint, *typing.get_args(hint)) if isinstance(h, type) and dataclasses.is_dataclass(h)]
        if nested and isinstance(value, dict):
            _check_fields(where, f"{path}.{name}", value, nested[0])


def _hint_name(hint: Any) -> str:
    if hint in _TYPE_NAMES:
        return _TYPE_NAMES[hint]
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _validate_example(where: str, payload: dict[str, Any], family: str) -> Example:
    fields = {f.name for f in dataclasses.fields(Example)}
    unknown = sorted(set(payload) - fields - {"family"})
    if unknown:
        raise InvalidFailureFile(f"{where}: example has unknown field(s) {', '.join(map(repr, unknown))}")
    missing = sorted((_EXAMPLE_FIELDS_V1 & fields) - set(payload))
    if missing:
        raise InvalidFailureFile(f"{where}: example is missing field(s) {', '.join(map(repr, missing))}")
    if not _is(payload.get("family", family), str):
        raise InvalidFailureFile(f"{where}: example.family must be a string, got {json.dumps(payload['family'])}")
    _check_fields(where, "example", payload, Example)
    payload = dict(payload)
    if payload.get("family", family) != family:
        raise InvalidFailureFile(f"{where}: example family {payload['family']!r} contradicts family {family!r}")
    if "family" not in fields:
        # an Example without a family field is a gated_deltanet one
        payload.pop("family", None)
        if family != DEFAULT_FAMILY:
            raise InvalidFailureFile(f"{where}: family {family!r} needs a gdn-equiv that knows layer families")
    try:
        return Example.from_json(payload)
    except Exception as exc:  # the example's own validation (config ranges, names): a bad file, not a crash
        message = " ".join(str(exc).split())
        raise InvalidFailureFile(f"{where}: example does not validate: {type(exc).__name__}: {message}") from exc


def read_failure(path: Path, *, functions: tuple[str, ...]) -> Failure:
    """Read and validate a failure JSON written by :class:`ReportWriter`; ``functions`` are the
    property names a failure may name. Raises :class:`InvalidFailureFile`."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidFailureFile(f"{where}: no such file") from None
    except IsADirectoryError:
        raise InvalidFailureFile(f"{where}: is a directory, not a failure JSON") from None
    except UnicodeDecodeError as exc:
        raise InvalidFailureFile(f"{where}: not a UTF-8 text file ({exc.reason})") from None
    except OSError as exc:
        raise InvalidFailureFile(f"{where}: cannot be read: {exc.strerror or exc}") from None
    if not text.strip():
        raise InvalidFailureFile(f"{where}: is empty, expected a failure JSON written by gdn-equiv")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidFailureFile(f"{where}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidFailureFile(f"{where}: must hold a JSON object, got {type(data).__name__}")
    version = data.get("format_version")
    if "format_version" not in data:
        raise InvalidFailureFile(
            f"{where}: has no format_version; a failure JSON written by gdn-equiv has format_version {FORMAT_VERSION}"
        )
    if not _is(version, int) or version != FORMAT_VERSION:
        raise InvalidFailureFile(
            f"{where}: format_version {json.dumps(version)} is unknown; this gdn-equiv reads {FORMAT_VERSION}"
        )
    missing = [k for k in _FAILURE_FIELDS if k not in data]
    if missing:
        raise InvalidFailureFile(f"{where}: missing field(s) {', '.join(map(repr, missing))}")
    unknown = sorted(set(data) - set(_FAILURE_FIELDS))
    if unknown:
        raise InvalidFailureFile(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")
    for name, kind in _FAILURE_FIELDS.items():
        if not _is(data[name], kind):
            raise InvalidFailureFile(
                f"{where}: field {name!r} must be {_TYPE_NAMES[kind]}, got {json.dumps(data[name])}"
            )
    if data["function"] not in functions:
        raise InvalidFailureFile(
            f"{where}: function {data['function']!r} is not a gdn-equiv property; known: {', '.join(functions)}"
        )
    options = data["target_options"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
        raise InvalidFailureFile(f"{where}: target_options must map strings to strings, got {json.dumps(options)}")
    example = _validate_example(where, data["example"], data["family"])
    return Failure(
        property=data["property"],
        function=data["function"],
        family=data["family"],
        backend=data["backend"],
        dtype=data["dtype"],
        target=data["target"],
        target_options=dict(options),
        device=data["device"],
        failure=data["failure"],
        example=example,
    )
