"""The model: the layer the suite checks, its facts and guard, conv ops, families and conv backends."""
