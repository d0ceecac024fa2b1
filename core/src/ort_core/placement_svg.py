"""Placement drawn: the optimized graph as an SVG picture, each node coloured by the provider running it,
each fused subgraph of a provider framed as one cluster, nodes that a provider declined marked (their
reasons in the node's tooltip), and the values crossing between providers drawn as copies.

Plain SVG written here (no drawing library, nothing to install): nodes are laid out in layers by their
longest path from the graph's inputs, ordered within a layer by the mean position of their producers, so that
edges mostly run straight down. Reads a built session; decides nothing. ``ort-core explain MODEL --svg FILE``.
"""

from __future__ import annotations

from html import escape

PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#B279A2", "#E45756", "#72B7B2", "#EECA3B", "#9D755D"]
CPU_COLOUR = "#BAB0AC"
NODE_W, NODE_H, GAP_X, GAP_Y, MARGIN = 128, 34, 22, 46, 24


def placement_svg(session) -> str:
    """The SVG document of ``session``'s placement (see the module's docstring)."""
    part, graph = session._partition, session._model.graph
    providers = session.get_providers()
    colour = {p: (CPU_COLOUR if p == "CPUExecutionProvider" else PALETTE[k % len(PALETTE)])
              for k, p in enumerate(providers)}
    nodes = graph.topological_order()
    owner = part.assignment
    producers = graph.producers()
    layers = _layers(nodes, producers)
    pos = _positions(layers, producers)
    width = max((len(row) for row in layers), default=1) * (NODE_W + GAP_X) + 2 * MARGIN + 300
    height = len(layers) * (NODE_H + GAP_Y) + 2 * MARGIN + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<title>{escape(str(session._model.source))}: placement</title>',
           '<rect width="100%" height="100%" fill="white"/>']
    out += _clusters(part, pos, colour)
    out += _edges(nodes, producers, pos, owner)
    declined = _declined(part, providers)
    for node in nodes:
        out.append(_node(node, pos[node.id], colour.get(owner.get(node.id, ""), "#dddddd"),
                         owner.get(node.id, "unplaced"), declined.get(node.id, [])))
    out += _legend(part, providers, colour, width - 290)
    out.append("</svg>")
    return "\n".join(out)


def _layers(nodes, producers) -> list[list]:
    """Nodes by their longest path from the graph's inputs (a producer's layer is above its readers')."""
    level: dict[int, int] = {}
    for node in nodes:
        up = [level[producers[n].id] for n in node.inputs if n in producers and producers[n].id in level]
        level[node.id] = 1 + max(up) if up else 0
    layers: list[list] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for node in nodes:
        layers[level[node.id]].append(node)
    return layers


def _positions(layers: list[list], producers) -> dict[int, tuple[float, float]]:
    """Top-left corner of each node: rows by layer, each row ordered by its producers' mean column."""
    pos: dict[int, tuple[float, float]] = {}
    column: dict[int, float] = {}
    for r, row in enumerate(layers):
        def key(node, r=r):
            cols = [column[producers[n].id] for n in node.inputs if n in producers and producers[n].id in column]
            return sum(cols) / len(cols) if cols else 0.0

        row.sort(key=key)
        for c, node in enumerate(row):
            column[node.id] = c
            pos[node.id] = (MARGIN + c * (NODE_W + GAP_X), MARGIN + 30 + r * (NODE_H + GAP_Y))
    return pos


def _clusters(part, pos, colour) -> list[str]:
    """A frame around every subgraph of a provider that fuses (one compile call each), single nodes included."""
    out = []
    for k, (provider, sub) in enumerate(part.subgraphs, 1):
        if not part.fused.get(provider, True):
            continue
        xs = [pos[n.id][0] for n in sub.nodes if n.id in pos]
        ys = [pos[n.id][1] for n in sub.nodes if n.id in pos]
        if not xs:
            continue
        x0, y0 = min(xs) - 8, min(ys) - 18
        x1, y1 = max(xs) + NODE_W + 8, max(ys) + NODE_H + 8
        out.append(f'<g><title>[{k}] {escape(provider)}: fused subgraph of {len(sub.nodes)} nodes</title>'
                   f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" rx="10" fill="{colour[provider]}" '
                   f'fill-opacity="0.12" stroke="{colour[provider]}" stroke-dasharray="4 3"/>'
                   f'<text x="{x0 + 6}" y="{y0 + 12}" fill="{colour[provider]}">[{k}] {escape(_short(provider))}'
                   f'</text></g>')
    return out


def _edges(nodes, producers, pos, owner) -> list[str]:
    """One curve per (producer, reader) pair; red and thicker where the value crosses providers (a copy when
    their devices differ)."""
    out = []
    for node in nodes:
        for name in dict.fromkeys(n for n in node.inputs if n):
            src = producers.get(name)
            if src is None or src.id not in pos or src is node:
                continue
            (x0, y0), (x1, y1) = pos[src.id], pos[node.id]
            x0, y0, x1 = x0 + NODE_W / 2, y0 + NODE_H, x1 + NODE_W / 2
            cross = owner.get(src.id) != owner.get(node.id)
            style = 'stroke="#d62728" stroke-width="2"' if cross else 'stroke="#999" stroke-width="1"'
            mid = (y0 + y1) / 2
            out.append(f'<path d="M{x0},{y0} C{x0},{mid} {x1},{mid} {x1},{y1}" fill="none" {style}>'
                       f'<title>{escape(name)}</title></path>')
    return out


def _declined(part, providers) -> dict[int, list[str]]:
    """Node id -> "provider: reason" for every provider (but the last, the fallback) that declined it."""
    found: dict[int, list[str]] = {}
    for provider in providers[:-1]:
        for nid, why in part.declined.get(provider, {}).items():
            found.setdefault(nid, []).append(f"{provider}: {why}")
    return found


def _node(node, xy, fill, provider, declined: list[str]) -> str:
    x, y = xy
    tip = "\n".join([f"{node.name or '#' + str(node.id)} ({node.op_type}) on {provider}", *declined])
    border = 'stroke="#d62728" stroke-width="2" stroke-dasharray="3 2"' if declined else 'stroke="#333"'
    mark = f'<text x="{x + NODE_W - 12}" y="{y + 12}" fill="#d62728" font-weight="bold">!</text>' if declined else ""
    label = escape(node.op_type if len(node.op_type) <= 18 else node.op_type[:17] + "…")
    return (f'<g><title>{escape(tip)}</title><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="5" '
            f'fill="{fill}" {border}/><text x="{x + NODE_W / 2}" y="{y + NODE_H / 2 + 4}" text-anchor="middle" '
            f'fill="{_ink(fill)}">{label}</text>{mark}</g>')


def _ink(fill: str) -> str:
    """Black or white text, whichever reads better on ``fill`` ("#rrggbb")."""
    r, g, b = (int(fill[k:k + 2], 16) for k in (1, 3, 5))
    return "#111111" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


def _legend(part, providers, colour, x) -> list[str]:
    counts = {p: 0 for p in providers}
    for p in part.assignment.values():
        counts[p] = counts.get(p, 0) + 1
    out = [f'<text x="{x}" y="{MARGIN + 10}" font-weight="bold">providers (nodes)</text>']
    for k, p in enumerate(providers):
        y = MARGIN + 22 + 18 * k
        out.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{colour[p]}" stroke="#333"/>'
                   f'<text x="{x + 18}" y="{y + 10}">{escape(_short(p))} ({counts.get(p, 0)})</text>')
    y = MARGIN + 30 + 18 * len(providers)
    out.append(f'<path d="M{x},{y} h22" stroke="#d62728" stroke-width="2"/>'
               f'<text x="{x + 28}" y="{y + 4}">value crossing providers</text>')
    out.append(f'<rect x="{x}" y="{y + 12}" width="12" height="12" fill="white" stroke="#d62728" '
               f'stroke-dasharray="3 2"/><text x="{x + 18}" y="{y + 22}">declined by a provider (hover: why)</text>')
    return out


def _short(provider: str) -> str:
    return provider.removesuffix("ExecutionProvider") or provider
