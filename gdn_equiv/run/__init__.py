"""The front ends outside pytest: the command line, the property runner, the report and ledger, bench."""
