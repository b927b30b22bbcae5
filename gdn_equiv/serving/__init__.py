"""The prologue where it is served (SPEC §11): short convs over a pool of conv states, as inference engines run them.

- :mod:`~gdn_equiv.serving.pool`: the §11 call (prefill over packed sequences into pool slots), step (decode and
  speculative verify with an accepted count) and prefix-cache snapshots, in pure torch on the torch backend
- :mod:`~gdn_equiv.serving.cases`: drawn cases as plain data, and their tensors for one adapter
- :mod:`~gdn_equiv.serving.adapters`: the engine protocol, and the in-house reference behind it
- :mod:`~gdn_equiv.serving.engines`: vLLM's and sglang's ops behind the protocol, one version table each
- :mod:`~gdn_equiv.serving.surface`: each engine version's op entry points with every argument they take, as
  data; the reference of one call on that surface; S0-surface and S0-outside
- :mod:`~gdn_equiv.serving.properties`: S0-S7
- :mod:`~gdn_equiv.serving.planted`: engines with one defect each, and the property that catches it
"""
