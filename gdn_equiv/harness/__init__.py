"""The harness: properties, the comparison, conformance, ground truth, bad input, diagnosis, isolation."""
