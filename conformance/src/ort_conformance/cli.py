"""The ``ort-conformance`` command: run the suite on providers and write their reports.

A thin wrapper over pytest (the suite is a pytest plugin plus test modules), and, with ``--plugin``,
over pip (install.py). Exit status: 0 when every provider run is certified, 1 when one is not, 2 for
a usage error or a plugin that cannot be installed or found.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from . import install

EPILOG = """\
--plugin installs into the CURRENT environment (this interpreter's, with pip) before certifying:
use a virtual environment you can throw away. The plugin's own known failures, if it ships
known_failures/<Provider>.txt beside the module its entry point names, are listed in the report
apart from the suite's verdict.

examples:
  ort-conformance --provider CPUExecutionProvider --report reports
  ort-conformance --plugin ./ort-ep-myvendor --report reports         (a project folder)
  ort-conformance --plugin dist/ort_ep_myvendor-1.0-py3-none-any.whl   (a built wheel)
  ort-conformance --plugin ort-ep-myvendor --no-install                (already installed)
  ort-conformance diff model.onnx --provider NAME     (first node whose outputs differ from the CPU
                                                       provider's; see ort-conformance diff --help)
"""


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ort-conformance", description="certify ort-core execution providers",
                                 epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--provider", default=None,
                    help="provider name, e.g. CPUExecutionProvider; with --plugin, one of the plugin's providers "
                         "(default: every provider the plugin registers)")
    ap.add_argument("--plugin", metavar="PATH_OR_WHEEL", default=None,
                    help="a plugin project folder (with pyproject.toml) or a built wheel: pip-installs it into the "
                         "current environment, then certifies the providers it registers; the name of an installed "
                         "distribution certifies it as installed")
    ap.add_argument("--no-install", action="store_true",
                    help="with --plugin: do not run pip; the plugin must already be installed here")
    ap.add_argument("--plugin-source", default=None, help=argparse.SUPPRESS)  # set when re-run after installing
    ap.add_argument("--report", default=None, help="folder for conformance-<provider>.json/.md")
    ap.add_argument("--known-failures", default=None,
                    help="the suite's known-failures file for the provider (default: the packaged one)")
    ap.add_argument("--update-known-failures", action="store_true",
                    help="rewrite the known-failures file with this run's failing cases")
    ap.add_argument("--only", choices=("contract", "operators", "models"), action="append",
                    help="run only these parts (repeatable); default: all")
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression to select cases")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["diff"]:
        from . import diff

        return diff.main(argv[1:])
    ap = _parser()
    args = ap.parse_args(argv)
    if not args.provider and not args.plugin:
        ap.error("give --provider NAME, --plugin PATH_OR_WHEEL, or both")
    if args.no_install and not args.plugin:
        ap.error("--no-install goes with --plugin")
    if not args.plugin:
        return _certify([args.provider], args, None)
    try:
        source = install.resolve(args.plugin)
        if source.kind != "installed" and not args.no_install:
            install.pip_install(source)
            # certify in a fresh interpreter: it sees the new distribution's entry points, and any
            # dependency pip upgraded, as an application starting now would
            again = [*argv, "--plugin", source.distribution, "--no-install", "--plugin-source", source.path]
            return subprocess.call([sys.executable, "-m", "ort_conformance.cli", *again])
        dist = install.describe(source)
        providers = install.providers_of(dist)
    except install.PluginError as e:
        print(f"ort-conformance: error: {e}", file=sys.stderr)
        return 2
    print(f"ort-conformance: {dist['distribution']} {dist['version']} registers {', '.join(providers)} "
          f"(entry points: {', '.join(f'{k} = {v}' for k, v in dist['entry_points'].items())})", flush=True)
    if args.provider and args.provider not in providers:
        print(f"ort-conformance: error: {dist['distribution']} does not register {args.provider}; it registers "
              f"{', '.join(providers)}", file=sys.stderr)
        return 2
    return _certify([args.provider] if args.provider else providers, args,
                    args.plugin_source or source.path)


def _certify(providers: list[str], args, source: str | None) -> int:
    """One suite run per provider; prints each verdict at the end."""
    verdicts = {}
    for k, provider in enumerate(providers, 1):
        if len(providers) > 1:
            print(f"ort-conformance: certifying {provider} ({k} of {len(providers)}) ...", flush=True)
        code = pytest.main(_pytest_args(provider, args, source))
        verdicts[provider] = _verdict(provider, args.report, code)
    for provider, line in verdicts.items():
        print(f"{provider}: {line[1]}")
    return 0 if all(ok for ok, _ in verdicts.values()) else 1


def _pytest_args(provider: str, args, source: str | None) -> list[str]:
    parts = args.only or ["contract", "operators", "models"]
    modules = {"contract": "test_contract", "operators": "test_operators", "models": "test_models"}
    suite_dir = os.path.join(os.path.dirname(__file__), "suite")
    targets = [os.path.join(suite_dir, modules[p] + ".py") for p in parts]
    out = ["-p", "ort_conformance.pytest_plugin", "-p", "no:cacheprovider", "--rootdir", suite_dir,
           "--ort-provider", provider, "-q" if not args.verbose else "-v", "-rfE", "--tb=line",
           "-W", "ignore::RuntimeWarning", "-W", "ignore:provider assignment", *targets]
    if args.report:
        out += ["--ort-report", args.report]
    if args.known_failures:
        out += ["--ort-known-failures", args.known_failures]
    if args.update_known_failures:
        out.append("--ort-update-known-failures")
    if args.keyword:
        out += ["-k", args.keyword]
    if source:
        out += ["--ort-plugin-source", source]
    return out


def _verdict(provider: str, report_dir: str | None, code: int) -> tuple[bool, str]:
    """(certified?, one line) from the report when one was written, else from pytest's exit status."""
    path = os.path.join(report_dir, f"conformance-{provider}.json") if report_dir else None
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            rep = json.load(f)
        vendor = rep.get("known_by_vendor", {}).get("counts", {})
        extra = "".join(f"; {n} of the plugin's known failures {s}" for s, n in vendor.items() if n)
        return rep["verdict"] == "certified" and code == 0, f"{rep['verdict']}{extra}; report: {path} (+ .md)"
    return code == 0, "all selected tests passed" if code == 0 else f"tests failed (pytest exit status {code})"


if __name__ == "__main__":
    sys.exit(main())
