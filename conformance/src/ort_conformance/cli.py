"""The ``ort-conformance`` command: run the suite on one provider and write its report.

A thin wrapper over pytest (the suite is a pytest plugin plus test modules); its exit status is
0 when the provider is certified, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import pytest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ort-conformance", description="certify an ort-core execution provider")
    ap.add_argument("--provider", required=True, help="provider name, e.g. CPUExecutionProvider")
    ap.add_argument("--report", default=None, help="folder for conformance-<provider>.json/.md")
    ap.add_argument("--known-failures", default=None, help="known-failures file (default: the packaged one)")
    ap.add_argument("--update-known-failures", action="store_true",
                    help="rewrite the known-failures file with this run's failing cases")
    ap.add_argument("--only", choices=("contract", "operators", "models"), action="append",
                    help="run only these parts (repeatable); default: all")
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression to select cases")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    args = ap.parse_args(argv)

    parts = args.only or ["contract", "operators", "models"]
    modules = {"contract": "test_contract", "operators": "test_operators", "models": "test_models"}
    suite_dir = os.path.join(os.path.dirname(__file__), "suite")
    targets = [os.path.join(suite_dir, modules[p] + ".py") for p in parts]
    pytest_args = ["-p", "ort_conformance.pytest_plugin", "-p", "no:cacheprovider", "--rootdir", suite_dir,
                   "--ort-provider", args.provider, "-q" if not args.verbose else "-v", "-rfE", "--tb=line",
                   "-W", "ignore::RuntimeWarning", "-W", "ignore:provider assignment", *targets]
    if args.report:
        pytest_args += ["--ort-report", args.report]
    if args.known_failures:
        pytest_args += ["--ort-known-failures", args.known_failures]
    if args.update_known_failures:
        pytest_args.append("--ort-update-known-failures")
    if args.keyword:
        pytest_args += ["-k", args.keyword]
    code = pytest.main(pytest_args)
    if args.report:
        path = os.path.join(args.report, f"conformance-{args.provider}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                rep = json.load(f)
            print(f"{args.provider}: {rep['verdict']}; report: {path} (+ .md)")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
