"""``ort-conformance --plugin`` on a plugin written outside the package tree (fixtures/outside/ort-ep-numpyish).

The plugin is pip-installed into a throwaway virtual environment that sees the test environment's packages
(so this environment never gains a provider), certified with the one command, and its report checked:
verdict, the vendor's known failures listed apart, provenance. Building the plugin needs setuptools from
an index: marked ``network``, skipped when pip cannot reach one or with ORT_CONFORMANCE_OFFLINE=1.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import site
import subprocess
import time
import venv
from importlib import metadata
from pathlib import Path

import ort_conformance
import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "outside" / "ort-ep-numpyish"
PROVIDER = "NumpyishExecutionProvider"
DIST = "ort-ep-numpyish"
KNOWN = "test_reduce_log_sum_empty_set_expanded"  # the one case the plugin's list declares
OFFLINE = ("Could not find a version that satisfies the requirement setuptools",
           "No matching distribution found for setuptools", "Failed to establish a new connection",
           "Temporary failure in name resolution", "Network is unreachable")
pytestmark = [pytest.mark.network,
              pytest.mark.skipif(os.environ.get("ORT_CONFORMANCE_OFFLINE") == "1", reason="ORT_CONFORMANCE_OFFLINE=1")]


def _run(python: Path | str, *args: str) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.run([str(python), "-m", "ort_conformance.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    if proc.returncode == 2 and "pip could not install" in out and any(s in out for s in OFFLINE):
        pytest.skip("pip cannot fetch the plugin's build backend (offline?)")
    return proc.returncode, out, time.perf_counter() - t0


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> Path:
    """A fresh venv's interpreter that also sees this environment's packages (ort-core, the suite, pip).

    Not ``--system-site-packages``: from inside a venv that means the base interpreter's packages, not
    this environment's; a .pth file adding this environment's site folders does it."""
    root = tmp_path_factory.mktemp("throwaway") / "venv"
    venv.create(root, with_pip=False)
    exe = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.check_output([str(exe), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                      text=True).strip()
    lines = "; ".join(f"site.addsitedir({p!r})" for p in site.getsitepackages())
    Path(purelib, "_ort_conformance_test_env.pth").write_text(f"import site; {lines}\n")
    return exe


@pytest.fixture(scope="module")
def vendor_copy(tmp_path_factory) -> Path:
    """The fixture as a vendor's checkout, with two entries a true list would not hold, to see them reported:
    a case that passes and a name that is no case."""
    dst = tmp_path_factory.mktemp("vendor") / DIST
    shutil.copytree(FIXTURE, dst, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    listed = dst / "src" / "ort_ep_numpyish" / "known_failures" / f"{PROVIDER}.txt"
    listed.write_text(listed.read_text() + "test_abs  # stale: fixed in 0.3.0\ntest_no_such_case  # a typo\n")
    return dst


@pytest.fixture(scope="module")
def certified(python, vendor_copy, tmp_path_factory):
    """The one command, run once: install the folder and certify every provider it registers."""
    report = tmp_path_factory.mktemp("report")
    code, out, seconds = _run(python, "--plugin", vendor_copy, "--report", report)
    print(f"ort-conformance --plugin (install + full suite) took {seconds:.1f} s")
    json_path = report / f"conformance-{PROVIDER}.json"
    assert json_path.exists(), out[-3000:]
    rep = json.loads(json_path.read_text())
    return code, out, rep, (report / f"conformance-{PROVIDER}.md").read_text()


def test_out_of_tree_plugin_is_installed_and_certified(certified):
    code, out, rep, md = certified
    assert code == 0, out[-3000:]
    assert f"installing {DIST} from" in out and f"registers {PROVIDER}" in out
    assert rep["verdict"] == "certified" and rep["reasons"] == [] and rep["failed_tests"] == []
    assert rep["totals"]["node"]["known_by_vendor"] == 1 and rep["totals"]["node"]["unexpected_failures"] == 0
    assert f"{PROVIDER}: certified; 1 of the plugin's known failures still fails" in out
    assert md.startswith(f"# Conformance report: {PROVIDER}") and "**Verdict: certified**" in md
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.distribution(DIST)  # installed in the throwaway venv only


def test_vendor_known_failures_are_listed_apart(certified):
    _, _, rep, md = certified
    block = rep["known_by_vendor"]
    assert block["file"].endswith(os.path.join("ort_ep_numpyish", "known_failures", f"{PROVIDER}.txt"))
    status = {c["case"]: c for c in block["cases"]}
    assert status[KNOWN]["status"] == "still fails" and "Log clamps" in status[KNOWN]["reason"]
    assert "got -87.33655, expected -inf" in status[KNOWN]["message"]  # the failure message, first index and all
    assert status["test_abs"]["status"] == "now passes"
    assert status["test_no_such_case"]["status"] == "not a case of this suite"
    assert block["counts"]["still fails"] == 1 and block["counts"]["now passes"] == 1
    assert "## Known by the vendor" in md and "| test_abs | stale: fixed in 0.3.0 | now passes |" in md
    assert "not counted against the suite's verdict" in md


def test_report_provenance(certified, vendor_copy):
    _, _, rep, md = certified
    plugin = rep["plugin"]
    assert plugin["distribution"] == DIST and plugin["version"] == "0.3.1" and plugin["entry_point"] == "numpyish"
    assert plugin["module"] == "ort_ep_numpyish.plugin" and plugin["installed_from"] == str(vendor_copy)
    assert rep["suite"]["ort_conformance"] == ort_conformance.__version__ and rep["suite"]["onnx"]
    assert rep["device"]["provider_devices"] == ["cpu:0"] and rep["device"]["provider_version"] == "0.3.1"
    assert rep["device"]["cpus"] and rep["device"]["os"] and rep["timestamp"].endswith("Z")
    assert "## Provenance" in md and f"{DIST} 0.3.1, entry point 'numpyish'" in md and str(vendor_copy) in md


def test_installed_plugin_with_no_install(certified, python):
    code, out, _ = _run(python, "--plugin", DIST, "--no-install", "--provider", "NoSuchExecutionProvider")
    assert code == 2 and f"{DIST} does not register NoSuchExecutionProvider; it registers {PROVIDER}" in out


def test_wheel_is_installed_and_named_in_the_report(certified, python, vendor_copy, tmp_path):
    """A built wheel installs the same way, over the same version installed from the folder; the report keeps its
    digest (one case, to stay quick)."""
    build = subprocess.run([str(python), "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(vendor_copy)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    wheel = next(tmp_path.glob("ort_ep_numpyish-0.3.1-*.whl"))
    code, out, _ = _run(python, "--plugin", wheel, "--report", tmp_path, "--only", "operators", "-k", "test_abs")
    assert "replacing the installed ort_ep_numpyish 0.3.1 with the wheel's files" in out, out[-3000:]
    rep = json.loads((tmp_path / f"conformance-{PROVIDER}.json").read_text())
    # a partial run is never certified: the contract checks did not run
    assert code == 1 and all("was not run" in r for r in rep["reasons"]), rep["reasons"]
    assert rep["plugin"]["installed_from"] == str(wheel)
    assert rep["plugin"]["wheel_sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
