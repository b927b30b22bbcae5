"""The comparison's own tests (the judge judged) run here through the importable suite: they live in
:mod:`gdn_equiv.suite.test_compare`; edit them there."""

from gdn_equiv.suite.test_compare import *  # noqa: F403
