"""Graph optimizer: provider-independent passes run before partitioning, chosen by level.

Each pass family lives in its own module and rewrites the IR in place. Passes that need to
compute values (constant folding) receive an ``evaluate`` callback from the session, so the
optimizer never reaches into providers itself.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir.graph import Model
from .chains import simplify_chains
from .constant_folding import fold_constants
from .conv_fold import fold_into_conv
from .cse import eliminate_common_subexpressions
from .dead_code import eliminate_dead_code
from .identity import remove_identities

BASIC = 1
EXTENDED = 2  # provider fusions, run as the providers' transforms after partitioning (cpu_fusion.py)


def optimize(model: Model, level: int, evaluate: Callable, keep_qdq: bool = False) -> dict[str, int]:
    """Run the passes enabled at ``level`` (a GraphOptimizationLevel); returns counts per pass.

    ``keep_qdq``: a provider of the session runs quantized (QDQ) groups, so the DequantizeLinear of a
    quantized weight stays a node for it to claim instead of being folded into a float weight.
    """
    stats: dict[str, int] = {}
    if level >= BASIC:
        stats["identity_removal"] = remove_identities(model.graph)
        stats["common_subexpressions"] = eliminate_common_subexpressions(model.graph)
        stats["constant_folding"] = fold_constants(model, evaluate, keep={"DequantizeLinear"} if keep_qdq else ())
        stats["chains"] = simplify_chains(model.graph)
        stats["conv_folding"] = fold_into_conv(model.graph)
        stats["dead_code"] = eliminate_dead_code(model.graph)
    return stats
