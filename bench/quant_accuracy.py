"""int8 accuracy on models with trained weights, measured by their task: PaddleOCR v4's text recognizer and text
detector (from the real-model set, ``nox -s models``), quantized static QDQ per channel by ort_core.quantization
and by onnxruntime.quantization on the same calibration images, each run on ort-core and on onnxruntime.

- Recognizer: text lines rendered with Pillow (DejaVu Sans when installed, else Pillow's own font), greedy CTC
  decoding (best class per step, repeats merged, blanks dropped). Metric: the share of held-out lines whose
  int8 decoding equals the float32 one (the same strings: the class ids are compared, so no dictionary is
  needed), and the share of characters that agree.
- Detector: pages with a few rendered lines. Metric: IoU of the text masks (probability > 0.3) of int8 and
  float32, over all held-out pages.

  python bench/quant_accuracy.py [--lines N] [--pages N] [--markdown PATH]   (default: bench/results_quant.md's
  "accuracy" section)
"""

from __future__ import annotations

# isort: off
import ort_core  # before numpy, as the other benches import it
# isort: on
import argparse
import os
import string
import sys
import tempfile
import time
import warnings

import measure
import numpy as np
from bench_quant import _Reader
from real_models_lib import cache_dir

SECTION = "accuracy"
HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = cache_dir()
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


def _font(size: int):
    from PIL import ImageFont

    return ImageFont.truetype(FONT, size) if os.path.exists(FONT) else ImageFont.load_default(size)


def _words(rng, count: int) -> str:
    alphabet = string.ascii_letters + string.digits
    return " ".join("".join(rng.choice(list(alphabet), rng.integers(2, 8))) for _ in range(count))


def text_lines(n: int, seed: int) -> list[np.ndarray]:
    """``n`` lines of random words as the recognizer takes them: (1, 3, 48, 320) float32 in [-1, 1]."""
    from PIL import Image, ImageDraw

    rng, font, out = np.random.default_rng(seed), _font(30), []
    for _ in range(n):
        img = Image.new("RGB", (320, 48), "white")
        ImageDraw.Draw(img).text((4, 6), _words(rng, 3), fill="black", font=font)
        a = np.asarray(img, np.float32) / 255.0
        out.append(((a - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32))
    return out


def pages(n: int, seed: int) -> list[np.ndarray]:
    """``n`` 320 x 320 pages with four lines each, as the detector takes them (ImageNet-normalized)."""
    from PIL import Image, ImageDraw

    rng, font, out = np.random.default_rng(seed), _font(22), []
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    for _ in range(n):
        img = Image.new("RGB", (320, 320), "white")
        draw = ImageDraw.Draw(img)
        for k in range(4):
            draw.text((int(rng.integers(4, 60)), 20 + 70 * k), _words(rng, 2), fill="black", font=font)
        a = (np.asarray(img, np.float32) / 255.0 - mean) / std
        out.append(a.transpose(2, 0, 1)[None].astype(np.float32))
    return out


def ctc_decode(probs: np.ndarray) -> tuple[int, ...]:
    best = probs[0].argmax(-1)
    keep = np.ones(len(best), bool)
    keep[1:] = best[1:] != best[:-1]
    return tuple(int(c) for c in best[keep] if c != 0)


def quantized(path: str, images: list[np.ndarray], folder: str) -> dict[str, str]:
    """The model quantized static QDQ per channel by each quantizer, on the same calibration images."""
    import onnxruntime.quantization as ortq

    from ort_core import quantization as coreq

    stem = os.path.basename(path).removesuffix(".onnx")
    out = {}
    for label, module in (("ort_core.quantization", coreq), ("onnxruntime.quantization", ortq)):
        target = os.path.join(folder, f"{stem}.{label.split('.')[0]}.qdq.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module.quantize_static(path, target, _Reader([{"x": x} for x in images]),
                                   quant_format=module.QuantFormat.QDQ, per_channel=True)
        out[label] = target
    return out


def runners(path: str) -> dict[str, object]:
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"ort-core": ort_core.InferenceSession(path, providers=["CPUExecutionProvider"]),
                "onnxruntime": onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])}


def recognizer_rows(args, folder: str) -> list[str]:
    path = os.path.join(MODELS, "ppocrv4_rec.onnx")
    calib, held = text_lines(args.calibration, seed=1), text_lines(args.lines, seed=2)
    float_session = runners(path)["ort-core"]
    ref = [ctc_decode(float_session.run(None, {"x": x})[0]) for x in held]
    rows = []
    for quantizer, qpath in quantized(path, calib, folder).items():
        for runtime, sess in runners(qpath).items():
            got = [ctc_decode(sess.run(None, {"x": x})[0]) for x in held]
            same = np.mean([g == r for g, r in zip(got, ref)])
            chars = sum(sum(a == b for a, b in zip(g, r)) for g, r in zip(got, ref)) / max(sum(len(r) for r in ref), 1)
            rows.append(f"| PP-OCRv4 recognizer | {quantizer} | {runtime} | {same:.3f} of {len(held)} lines | "
                        f"{chars:.3f} of characters |")
            print(rows[-1], flush=True)
    return rows


def detector_rows(args, folder: str) -> list[str]:
    path = os.path.join(MODELS, "ppocrv4_det.onnx")
    calib, held = pages(args.calibration // 2, seed=3), pages(args.pages, seed=4)
    float_session = runners(path)["ort-core"]
    ref = [float_session.run(None, {"x": x})[0] > 0.3 for x in held]
    rows = []
    for quantizer, qpath in quantized(path, calib, folder).items():
        for runtime, sess in runners(qpath).items():
            got = [sess.run(None, {"x": x})[0] > 0.3 for x in held]
            inter = sum(int(np.sum(g & r)) for g, r in zip(got, ref))
            union = sum(int(np.sum(g | r)) for g, r in zip(got, ref))
            rows.append(f"| PP-OCRv4 detector | {quantizer} | {runtime} | mask IoU {inter / max(union, 1):.4f} over "
                        f"{len(held)} pages | |")
            print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=40, help="held-out text lines for the recognizer")
    ap.add_argument("--pages", type=int, default=8, help="held-out pages for the detector")
    ap.add_argument("--calibration", type=int, default=16, help="calibration images (the detector gets half)")
    ap.add_argument("--markdown", default=os.path.join(HERE, "results_quant.md"))
    args = ap.parse_args(argv)
    missing = [m for m in ("ppocrv4_rec.onnx", "ppocrv4_det.onnx") if not os.path.exists(os.path.join(MODELS, m))]
    if missing:
        print(f"{', '.join(missing)} not in {MODELS}: run `nox -s models` first")
        return 1
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        rows = recognizer_rows(args, folder) + detector_rows(args, folder)
    text = "\n".join([
        "## int8 accuracy by task (trained models)", "",
        "`python bench/quant_accuracy.py`: PaddleOCR v4's recognizer and detector quantized static QDQ per channel "
        f"by both quantizers on the same {args.calibration} calibration images, compared with the float32 "
        "model's results on ort-core. Recognizer: held-out rendered text lines whose int8 decoding equals the "
        "float32 one. Detector: IoU of the text masks (probability > 0.3).", "",
        "| model | quantized by | run on | same result as float32 | |", "|---|---|---|---|---|", *rows]) + "\n"
    measure.publish_section(text, args.markdown, SECTION, time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
