#!/usr/bin/env bash
# Everything of ort-ep-cuda that needs a GPU, in one command, on a computer with an NVIDIA GPU whose Python
# environment already has ort-core, ort-conformance and NVIDIA's CUDA 13 wheels (nvidia-cuda-runtime,
# nvidia-cuda-nvrtc, nvidia-cublas, cuda-pathfinder; e.g. brought by torch). Installs this plugin with --no-deps,
# runs its tests (the GPU ones included), the conformance suite and, from a checkout of the repository, the GPU
# bench (bench/bench_gpu.py), and writes REPORT_DIR/gpu_check.md.
# The install needs no network (--no-build-isolation --no-index): setuptools must be in the environment.
#
#   plugins/ort-ep-cuda/scripts/gpu_check.sh [REPORT_DIR]        (default: ./gpu-check-report)
#   PYTHON=/path/to/python plugins/ort-ep-cuda/scripts/gpu_check.sh   to pick the environment
#
# Exit status: 0 when the provider was available, every test passed and nothing was skipped for want of a GPU,
# and conformance certified it; 1 otherwise (the report says which step failed).
set -uo pipefail

plugin=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-gpu-check-report}" && cd "${1:-gpu-check-report}" && pwd)
py=${PYTHON:-python3}
report="$out/gpu_check.md"
status=0

step() { printf '\n## %s\n\n```\n' "$1" >> "$report"; }
endstep() { printf '```\n' >> "$report"; }

{
  echo "# ort-ep-cuda GPU check"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- command: $0 $*"
  echo "- python: $("$py" -c 'import sys; print(sys.version.split()[0], sys.executable)')"
} > "$report"

step "GPU and driver"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv >> "$report" 2>&1 \
  || echo "nvidia-smi failed" >> "$report"
endstep

step "install (pip install --no-deps --no-build-isolation --no-index $plugin)"
# built from a copy, so that the build leaves nothing in the source tree
src=$(mktemp -d)
cp -r "$plugin/pyproject.toml" "$plugin/README.md" "$plugin/src" "$src/"
rm -rf "$src"/src/*.egg-info
if ! "$py" -m pip install --no-deps --no-build-isolation --no-index --quiet "$src" >> "$report" 2>&1; then
  echo "install failed" >> "$report"; endstep; echo "install failed: see $report"; exit 1
fi
"$py" -m pip list 2>/dev/null | grep -i -E '^(ort-|nvidia-|cuda-)' >> "$report"
endstep

step "ort-core providers"
"$py" -c 'import sys; from ort_core.cli import main; sys.argv = ["ort-core", "providers"]; sys.exit(main())' \
  > "$out/providers.txt" 2>&1
grep CUDAExecutionProvider "$out/providers.txt" >> "$report"
endstep
if ! grep -q 'CUDAExecutionProvider *available' "$out/providers.txt"; then
  echo "CUDAExecutionProvider is not available here: nothing below can run" >> "$report"
  echo "CUDAExecutionProvider unavailable: see $report"; exit 1
fi

step "plugin tests (pytest $plugin/tests)"
"$py" -m pytest "$plugin/tests" -q -rs -p no:cacheprovider --junitxml "$out/pytest.xml" > "$out/pytest.txt" 2>&1
rc=$?
tail -n 40 "$out/pytest.txt" >> "$report"
endstep
if [ $rc -ne 0 ]; then status=1; echo "- plugin tests FAILED (exit $rc)" >> "$report"; fi
if grep -q "SKIPPED.*needs a GPU" "$out/pytest.txt"; then status=1; echo "- GPU tests were skipped" >> "$report"; fi

step "ort-conformance --provider CUDAExecutionProvider --report $out"
"$py" -c 'import sys; from ort_conformance.cli import main; sys.exit(main(sys.argv[1:]))' \
  --provider CUDAExecutionProvider --report "$out" > "$out/conformance.txt" 2>&1
rc=$?
tail -n 30 "$out/conformance.txt" >> "$report"
endstep
if [ $rc -ne 0 ]; then status=1; echo "- conformance did not certify (exit $rc)" >> "$report"; fi

bench="$plugin/../../bench/bench_gpu.py"
if [ -f "$bench" ]; then
  step "GPU bench (python bench/bench_gpu.py --markdown $out/bench_gpu.md)"
  "$py" "$bench" --markdown "$out/bench_gpu.md" > "$out/bench_gpu.txt" 2>&1 || echo "- the bench failed" >> "$report"
  cat "$out/bench_gpu.md" >> "$report" 2>/dev/null || tail -n 20 "$out/bench_gpu.txt" >> "$report"
  endstep
fi

printf '\n**Result: %s**\n' "$([ $status -eq 0 ] && echo pass || echo FAIL)" >> "$report"
echo "report: $report"
exit $status
