"""Callers' inputs and absolute cache bookkeeping run here through the importable suite: they live in
:mod:`gdn_equiv.suite.test_callers`; edit them there."""

from gdn_equiv.suite.test_callers import *  # noqa: F403
