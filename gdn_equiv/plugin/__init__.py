"""The gdn-equiv pytest plugin, one module a concern (:mod:`gdn_equiv.pytest_plugin` is its entry point and
loads them all):

- :mod:`~gdn_equiv.plugin.options`: the options, whether the run is a gdn-equiv run, and its
  :class:`~gdn_equiv.run.plan.RunPlan`, built once at configure time and kept in ``config.stash``;
- :mod:`~gdn_equiv.plugin.fixtures`: parametrisation and fixtures, read from the plan;
- :mod:`~gdn_equiv.plugin.ordering`: xdist scheduling and the order of the tests (first tier, slow tests);
- :mod:`~gdn_equiv.plugin.stop`: ``-x``/``--maxfail`` stopping every xdist worker at once;
- :mod:`~gdn_equiv.plugin.counts`: each test's examples counted, summed and summarised (the ledger's hooks);
- :mod:`~gdn_equiv.plugin.reports`: the failure log and the run's page.

No module keeps state: what a run holds lives on its config (the plan in ``config.stash``, and the objects of
the last three concerns registered with ``config.pluginmanager`` at configure time).
"""
