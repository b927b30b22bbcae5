"""The plugin's configure-time promises run here through the importable suite: the tests live in
:mod:`gdn_equiv.suite.test_plugin_promises` (so ``pytest --pyargs gdn_equiv.suite`` runs them); edit them there."""

from gdn_equiv.suite.test_plugin_promises import *  # noqa: F403
