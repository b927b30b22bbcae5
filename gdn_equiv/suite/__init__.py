"""The property suite as an importable package: ``pytest --pyargs gdn_equiv.suite --gdn-backend mypkg.kernels:conv``.

- ``test_guard``: P1 on the spec's exhaustive decision tables, for the guard of ``--gdn-target`` (unsafe fusion fails;
  a missed fusion is ``missed fusion``; an upstream version's known gaps are strict xfails); P1 on drawn states is
  in ``test_properties``
- ``test_properties``: P1 on drawn states, P2-P5 (path taken, fused == separate forward and gradients, exact fallback)
- ``test_necessity``: P6 (every guard condition has a state where forcing fusion is wrong)
- ``test_conformance``: the backend against the torch backend, call by call (forward, gradients,
  update, varlen, final state within the §6 table; fused channel slices bitwise)
- ``test_ground_truth``: every backend, torch included, against an independently written fp64
  ``F.conv1d`` conv (:mod:`gdn_equiv.harness.ground_truth`): a defect shared with the torch backend shows here
- ``test_callers``: the reference layers' cache bookkeeping measured from the inputs alone, and inputs
  shaped like real callers' (masks longer than the call, generation loops, fla's own ``Cache`` object as
  a caller hands it over); torch backend, fp64

The options, fixtures and Hypothesis profiles come from the installed pytest plugin
(:mod:`gdn_equiv.pytest_plugin`). This package holds only the gate: the harness's own tests (the comparison,
the ledger, the plugin) are the repository's ``tests/``; the repository's test command collects both.
"""
