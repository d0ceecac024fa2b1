"""Markers of the suite's own tests: ``network`` marks tests that pip-install a plugin (its build needs
setuptools from an index); deselect them with ``-m "not network"`` or set ORT_CONFORMANCE_OFFLINE=1."""


def pytest_configure(config):
    config.addinivalue_line("markers", "network: pip-installs a plugin (needs an index for its build backend)")
