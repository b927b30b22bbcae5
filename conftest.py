"""Source-tree wiring: load the gdn-equiv pytest plugin (:mod:`gdn_equiv.pytest_plugin`).

Installed (``pip install -e .``), pytest has already imported the plugin through its ``pytest11``
entry point before this file runs; naming it again here would register it twice. From a plain
checkout (nothing installed) this is what loads it. ``gdn_equiv_suite = true`` in pyproject.toml
switches it on for this repository's tests.
"""

from __future__ import annotations

import sys

pytest_plugins = [] if "gdn_equiv.pytest_plugin" in sys.modules else ["gdn_equiv.pytest_plugin"]
