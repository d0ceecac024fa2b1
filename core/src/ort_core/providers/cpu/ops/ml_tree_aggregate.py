"""Leaf weights to scores for the tree-ensemble kernels: [samples, trees] leaf ids -> [samples, targets].

The layout is chosen once, from the leaf entries (leaf, target, weight), for SUM and AVERAGE:

- ``tree``: every leaf carries one weight and all leaves of a tree the same target (gradient boosting:
  LightGBM, XGBoost, sklearn's GradientBoosting give tree ``t`` to class ``t % K``). One float gather
  [samples, trees], then a product with the [trees, targets] one-hot matrix (a sum over trees for a
  single target): no [samples, trees, targets] array at all.
- ``dense``: most (leaf, target) cells hold a weight (random forests store every class probability).
  The weights are kept target-major [targets, nodes], so one ``take`` along the node axis gives
  [targets, samples, trees] and the sum over trees runs over contiguous memory.
- ``sparse``: anything else: the entries of the reached leaves are expanded (CSR offsets) and summed
  with one ``bincount`` over sample * targets + target.

MIN and MAX use the dense layout with +-inf where a leaf gives no weight. Sums run in float64. Every
layout also says which targets got a weight from some reached leaf (the regressor adds base values
only there, the classifier picks its label among them).
"""

from __future__ import annotations

import numpy as np

from ....limits import check_tensor_size
from .ml_tree_table import Forest

_DENSE_SHARE = 0.5  # entries / (leaves * targets) from which the dense layout is used


class Aggregator:
    def __init__(self, forest: Forest, n_targets: int):
        nodes, targets, weights = forest.entries
        self.label, self.k, self.t, self.size = forest.label, n_targets, forest.roots.size, forest.size
        # n_targets is an attribute: a hostile model may name 2**40 of them
        check_tensor_size(self.label, (max(self.t, 1), n_targets), np.float64, "leaf value table")
        self.nodes, self.targets, self.weights = nodes, targets, weights
        leaf = np.flatnonzero(forest.base == np.arange(forest.size))
        self._leaf, self._leaf_tree = leaf, forest.tree[leaf]
        counts = np.bincount(nodes, minlength=forest.size)
        self._counts = counts
        self._dense = None
        self._entries: list | None = None  # per node: [(target, weight)], for one_row
        self.layout = "sparse"
        tree_target = np.full(self.t, -1, dtype=np.int64)
        if self.t and n_targets and np.all(counts[leaf] == 1) and np.isfinite(weights).all():
            trees = forest.tree[nodes]
            tree_target[trees] = targets
            if np.all(tree_target[trees] == targets) and np.all(tree_target >= 0):
                self.layout = "tree"
        if self.layout == "tree":
            self.value = np.zeros(forest.size)
            self.value[nodes] = weights
            self.onehot = np.zeros((self.t, n_targets))
            self.onehot[np.arange(self.t), tree_target] = 1.0
            self.tree_has = self.onehot.any(axis=0)
            self.has_one_row = self.tree_has[None, :].copy()
            self.has_one_row.flags.writeable = False  # shared by every batch-1 call: callers copy to change it
        elif nodes.size >= _DENSE_SHARE * max(leaf.size * n_targets, 1):
            self.layout = "dense"
        else:
            order = np.argsort(nodes, kind="stable")
            self.e_target, self.e_weight = targets[order], weights[order]
            self.start = np.searchsorted(nodes[order], np.arange(forest.size))

    def dense(self) -> tuple[np.ndarray, np.ndarray, bool]:
        """Target-major weights [targets, nodes], the mask of given weights, and whether every target
        always gets a weight (some tree weights it at each of its leaves)."""
        if self._dense is None:
            check_tensor_size(self.label, (self.size, self.k), np.float64, "leaf value table")
            cell = self.targets * self.size + self.nodes
            w = np.bincount(cell, weights=self.weights, minlength=self.k * self.size).reshape(self.k, -1)
            h = np.zeros((self.k, self.size), dtype=bool)
            h[self.targets, self.nodes] = True
            # leaves of each tree weighting each target: a tree weighting k at every leaf gives k always
            kk, j = np.nonzero(h[:, self._leaf])
            per_tree = np.bincount(kk * self.t + self._leaf_tree[j], minlength=self.k * self.t).reshape(self.k, -1)
            always = (per_tree == np.bincount(self._leaf_tree, minlength=self.t)).any(axis=1)
            self._dense = (w, h, bool(always.all()))
        return self._dense

    def __call__(self, leaves: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
        """([n, targets] aggregated weights (float64), [n, targets] whether any reached leaf gave one);
        targets no tree reached score 0 under MIN/MAX, as in onnxruntime."""
        n, k, t = leaves.shape[0], self.k, self.t
        if n == 0 or k == 0:
            return np.zeros((n, k)), np.zeros((n, k), dtype=bool)
        flat = leaves.reshape(-1)
        if how in ("SUM", "AVERAGE") and self.layout == "tree":
            vals = np.take(self.value, flat)
            if n == 1 and k == 1:  # batch 1, one target: a sum, and the one-row "has" made once
                out = np.full((1, 1), vals.sum())
            else:
                vals = vals.reshape(n, t)
                out = vals.sum(axis=1, keepdims=True) if k == 1 else vals @ self.onehot
            has = self.has_one_row if n == 1 else np.repeat(self.tree_has[None, :], n, axis=0)
        elif how in ("SUM", "AVERAGE") and self.layout == "sparse":
            out, has = self._sparse(flat, n)
        else:
            w, h, always = self.dense()
            vals = np.take(w, flat, axis=1).reshape(k, n, t)
            if how in ("SUM", "AVERAGE") and always:
                hit, has = None, np.ones((n, k), dtype=bool)
            else:
                hit = np.take(h, flat, axis=1).reshape(k, n, t)
                has = hit.any(axis=2).T
            if how in ("SUM", "AVERAGE"):
                out = vals.sum(axis=2).T
            else:
                fill = np.inf if how == "MIN" else -np.inf
                red = np.min if how == "MIN" else np.max
                out = np.where(has, red(np.where(hit, vals, fill), axis=2).T, 0.0)
        if how == "AVERAGE":
            out = out / max(t, 1)
        return np.ascontiguousarray(out), has

    def entries(self) -> list[list[tuple[int, float]]]:
        """Per node, its (target, weight) entries as Python values (``one_row``'s table), made once."""
        if self._entries is None:
            entries: list[list[tuple[int, float]]] = [[] for _ in range(self.size)]
            for node, target, weight in zip(self.nodes.tolist(), self.targets.tolist(), self.weights.tolist()):
                entries[node].append((target, weight))
            self._entries = entries
        return self._entries

    def one_row(self, leaves: list[int], how: str) -> tuple[np.ndarray, np.ndarray]:
        """``__call__`` for one sample's leaves (a Python list), in plain Python over ``entries``: at batch 1
        on a few trees this costs less than the numpy calls of any layout. Sums run in float64 as there, tree
        by tree."""
        entries = self.entries()
        k = self.k
        if how in ("SUM", "AVERAGE"):
            out, has = [0.0] * k, [False] * k
            for leaf in leaves:
                for target, weight in entries[leaf]:
                    out[target] += weight
                    has[target] = True
            if how == "AVERAGE":
                t = max(self.t, 1)
                out = [v / t for v in out]
        else:
            pick = min if how == "MIN" else max
            got: list = [None] * k
            for leaf in leaves:
                for target, weight in entries[leaf]:
                    got[target] = weight if got[target] is None else pick(got[target], weight)
            out, has = [0.0 if v is None else v for v in got], [v is not None for v in got]
        return np.array([out], dtype=np.float64), np.array([has], dtype=bool)

    def _sparse(self, flat: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        k = self.k
        c = np.take(self._counts, flat)
        total = int(c.sum())
        rows = np.repeat(np.arange(n, dtype=np.intp) * k, self.t)
        if total == c.size and (c == 1).all():  # one entry per reached leaf
            e = np.take(self.start, flat)
        else:
            rows = np.repeat(rows, c)
            e = np.repeat(np.take(self.start, flat) - (np.cumsum(c) - c), c) + np.arange(total)
        slot = rows + np.take(self.e_target, e)
        out = np.bincount(slot, weights=np.take(self.e_weight, e), minlength=n * k).reshape(n, k)
        has = np.bincount(slot, minlength=n * k).reshape(n, k) > 0
        return out, has
