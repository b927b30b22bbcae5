"""The ledger and registry checks run here through the importable suite: the tests live in
:mod:`gdn_equiv.suite.test_verdict` (so ``pytest --pyargs gdn_equiv.suite`` runs them); edit them there."""

from gdn_equiv.suite.test_verdict import *  # noqa: F403
