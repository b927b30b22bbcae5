"""Source-tree wiring: load the gdn-equiv pytest plugin (:mod:`gdn_equiv.pytest_plugin`).

Installed (``pip install -e .``), pytest has already imported the plugin through its ``pytest11``
entry point before this file runs; naming it again here would register it twice. From a plain
checkout (nothing installed) this is what loads it. ``gdn_equiv_suite = true`` in pyproject.toml
switches it on for this repository's tests.
"""

from __future__ import annotations

import sys

import pytest

pytest_plugins = [] if "gdn_equiv.pytest_plugin" in sys.modules else ["gdn_equiv.pytest_plugin"]


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``pytest -n N`` without ``--dist`` schedules by work stealing: this suite's long end-to-end tests
    (subprocess gates, crash isolation, interpreter kernels) otherwise leave one worker idle at the end;
    on 2 CPU cores the README's test command took 167 s instead of 189 s (issue #17). Runs before
    pytest-xdist turns ``-n`` into ``--dist load``; an explicit ``--dist`` is kept."""
    option = config.option
    if getattr(option, "numprocesses", None) and getattr(option, "dist", None) == "no":
        option.dist = "worksteal"
