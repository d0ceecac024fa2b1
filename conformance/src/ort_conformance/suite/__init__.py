"""The conformance checks, as pytest modules: contract, operators (node cases), models."""
