"""The gdn-equiv pytest plugin: options, the run's plan, fixtures, Hypothesis profiles and the example-count
summary.

Installed with the package (``pytest11`` entry point ``gdn_equiv``), so another project can gate
its kernel with::

    pytest --pyargs gdn_equiv.suite --gdn-backend mypkg.kernels:conv

From a source checkout the root ``conftest.py`` loads this module instead (unless the entry point
already did). Installed in an environment, the plugin stays passive for unrelated test runs: it
only adds its command-line options. It switches on (profiles, xdist GPU pinning, the triton
interpreter without a GPU, NaN poisoning of fresh CUDA memory, skips for ``gpu``/``fla``/
``cuda_backend`` tests, the example-count line) when the run asks for it: ``--gdn-backend`` or
``--gdn-target`` or ``--gdn-serving-engine`` given, a test path inside the ``gdn_equiv`` package
(``--pyargs gdn_equiv.suite``), or ``gdn_equiv_suite = true`` in the ini file (as this repository's
``pyproject.toml`` does).

Switched on, it keeps SPEC §10's verdict promises before the first test: names (``--gdn-backend``,
``--gdn-target``, ``--gdn-family``, ``--gdn-serving-engine``) are checked (an unknown one is pytest's usage error),
and a backend, target or serving engine that cannot run on this machine ends the session with status 3 and
one line naming it and why (a run that skipped it would pass having checked nothing it was asked to).
``--gdn-isolate`` runs every check that calls the kernel under test in a worker process
(:mod:`gdn_equiv.harness.isolation`).

This module is the entry point only: the hooks live in :mod:`gdn_equiv.plugin`, one module a concern
(options and plan, fixtures, ordering, the xdist stop, the example counts, the reports), loaded through
``pytest_plugins``. pytest imports every installed plugin at start-up: importing this one imports gdn_equiv
(torch included).
"""

from __future__ import annotations

pytest_plugins = [
    "gdn_equiv.plugin.options",
    "gdn_equiv.plugin.fixtures",
    "gdn_equiv.plugin.ordering",
]
