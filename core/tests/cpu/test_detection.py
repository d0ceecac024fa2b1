"""NonMaxSuppression against onnx's reference evaluator and hand-worked cases."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(23)


def _random_boxes(batches, n):
    corners = rng.uniform(0, 10, (batches, n, 2))
    sizes = rng.uniform(0.5, 4, (batches, n, 2))
    return np.concatenate([corners, corners + sizes], axis=-1).astype(np.float32)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("iou", [0.0, 0.3, 0.7])
@pytest.mark.parametrize("score_threshold", [None, 0.4])
def test_nms_matches_reference(center, iou, score_threshold):
    boxes = _random_boxes(2, 30)
    scores = rng.random((2, 3, 30)).astype(np.float32)
    scores[0, 0, :5] = 0.5  # ties keep the lower index first
    inputs = [boxes, scores, np.array([7], np.int64), np.array([iou], np.float32)]
    if score_threshold is not None:
        inputs.append(np.array([score_threshold], np.float32))
    check("NonMaxSuppression", inputs, {"center_point_box": center}, opset=11)


def test_nms_hand_case():
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 10, 1, 11], [1, 1, 0, 0]]], np.float32)
    scores = np.array([[[0.9, 0.95, 0.5, 0.3]]], np.float32)
    (sel,) = run_ours("NonMaxSuppression", [boxes, scores, np.array([10]), np.array([0.5], np.float32)],
                      opset=11)
    # box 1 wins, box 0 overlaps it (IoU 0.82), box 3 is box 0 with flipped corners
    np.testing.assert_array_equal(sel, [[0, 0, 1], [0, 0, 2]])
    assert sel.dtype == np.int64


def test_nms_defaults_select_nothing():
    boxes = _random_boxes(1, 4)
    (sel,) = run_ours("NonMaxSuppression", [boxes, rng.random((1, 1, 4)).astype(np.float32)], opset=10)
    assert sel.shape == (0, 3) and sel.dtype == np.int64


def test_nms_errors():
    with pytest.raises(KernelError, match="boxes"):
        run_ours("NonMaxSuppression", [np.zeros((1, 4, 3), np.float32), np.zeros((1, 1, 4), np.float32)])
    with pytest.raises(KernelError, match="scores shape"):
        run_ours("NonMaxSuppression", [np.zeros((1, 4, 4), np.float32), np.zeros((1, 1, 5), np.float32)])
    with pytest.raises(KernelError, match="center_point_box"):
        run_ours("NonMaxSuppression", [np.zeros((1, 4, 4), np.float32), np.zeros((1, 1, 4), np.float32)],
                 {"center_point_box": 2})
