"""The property suite as an importable package (``pytest --pyargs gdn_equiv.suite``)."""
