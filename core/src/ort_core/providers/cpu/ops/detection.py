"""CPU kernel for NonMaxSuppression: greedy per-(batch, class) box selection by score with
IoU suppression. Box decoding, RoI ops and anchor generation are not here.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register


def _optional_scalar(node: Node, value, what: str):
    """The single value of an optional scalar input, or None when omitted or empty."""
    if value is None or value.size == 0:
        return None
    if value.size != 1:
        raise KernelError(f"{node.label}: {what} must be a scalar, got shape {value.shape}")
    return value.reshape(-1)[0]


def _corners(boxes: np.ndarray, center_point_box: bool):
    """(y_min, x_min, y_max, x_max) arrays of shape (batch, boxes), whatever the corner order."""
    if center_point_box:  # [x_center, y_center, width, height]
        xc, yc, w, h = (boxes[..., i] for i in range(4))
        half_w, half_h = w / 2, h / 2
        return yc - half_h, xc - half_w, yc + half_h, xc + half_w
    y1, x1, y2, x2 = (boxes[..., i] for i in range(4))
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def _select(order: np.ndarray, corners, areas, iou_threshold, limit: int) -> list[int]:
    """Greedy NMS over candidates ``order`` (best first) of one batch.

    Inherently sequential: each round keeps the best surviving box and suppresses, in one
    vectorized step, every remaining box overlapping it by IoU > threshold; at most ``limit``
    rounds.
    """
    y0, x0, y1, x1 = corners
    kept: list[int] = []
    rest = order
    while rest.size and len(kept) < limit:
        best, rest = rest[0], rest[1:]
        kept.append(int(best))
        if not rest.size:
            break
        ih = np.minimum(y1[best], y1[rest]) - np.maximum(y0[best], y0[rest])
        iw = np.minimum(x1[best], x1[rest]) - np.maximum(x0[best], x0[rest])
        overlap = (ih > 0) & (iw > 0)  # boxes that only touch (or are empty) never suppress
        inter = np.where(overlap, ih * iw, 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            iou = inter / (areas[best] + areas[rest] - inter)
        rest = rest[~(overlap & (iou > iou_threshold))]
    return kept


@register("NonMaxSuppression", since=10)
def _nms(node: Node, opset: int):
    center_point_box = int(node.attr("center_point_box", 0))
    if center_point_box not in (0, 1):
        raise KernelError(f"{node.label}: center_point_box must be 0 or 1, got {center_point_box}")

    def kernel(boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
               score_threshold=None):
        if boxes.ndim != 3 or boxes.shape[2] != 4:
            raise KernelError(f"{node.label}: boxes must have shape (batches, boxes, 4), got "
                              f"{boxes.shape}")
        if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise KernelError(f"{node.label}: scores shape {scores.shape} does not match boxes "
                              f"{boxes.shape} (expected (batches, classes, boxes))")
        limit = _optional_scalar(node, max_output_boxes_per_class, "max_output_boxes_per_class")
        limit = 0 if limit is None else max(int(limit), 0)
        iou_t = _optional_scalar(node, iou_threshold, "iou_threshold")
        iou_t = boxes.dtype.type(0) if iou_t is None else iou_t
        score_t = _optional_scalar(node, score_threshold, "score_threshold")
        y0, x0, y1, x1 = _corners(boxes, bool(center_point_box))
        areas = (y1 - y0) * (x1 - x0)
        picked = []
        if limit:
            for b in range(scores.shape[0]):
                corners = (y0[b], x0[b], y1[b], x1[b])
                for c in range(scores.shape[1]):
                    s = scores[b, c]
                    cand = np.arange(s.size) if score_t is None else np.flatnonzero(s > score_t)
                    # best score first; equal scores keep the lower box index first
                    order = cand[np.argsort(-s[cand], kind="stable")]
                    kept = _select(order, corners, areas[b], iou_t, limit)
                    if kept:
                        rows = np.empty((len(kept), 3), dtype=np.int64)
                        rows[:, 0], rows[:, 1], rows[:, 2] = b, c, kept
                        picked.append(rows)
        if not picked:
            return (np.zeros((0, 3), dtype=np.int64),)
        return (np.concatenate(picked),)
    return kernel
