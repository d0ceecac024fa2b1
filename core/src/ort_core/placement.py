"""Placement made visible: which provider runs which nodes, who declined what and why, and the
copies inserted between devices. Text for ``ort-core explain`` and ``InferenceSession.explain()``.

Reads a built session; decides nothing.
"""

from __future__ import annotations


def explain(session) -> str:
    part, graph = session._partition, session._model.graph
    providers = session.get_providers()
    lines = [f"model: {session._model.source} ({len(graph.nodes)} nodes after optimization)",
             f"providers (priority order): {', '.join(providers)}",
             "assignment:", *["  " + line for line in part.summary(graph, providers)],
             "", "subgraphs, in execution order:"]
    k = 0
    subgraphs = part.subgraphs
    i = 0
    while i < len(subgraphs):
        provider, sub = subgraphs[i]
        nodes = list(sub.nodes)
        j = i + 1
        # a provider compiling node by node (CPU) shows its consecutive nodes as one block
        while len(sub.nodes) == 1 and j < len(subgraphs) and subgraphs[j][0] == provider \
                and len(subgraphs[j][1].nodes) == 1 and not part.fused.get(provider, True):
            nodes += subgraphs[j][1].nodes
            j += 1
        k += 1
        plural = "" if len(nodes) == 1 else "s"
        kind = "fused subgraph of" if part.fused.get(provider, True) else "node by node,"
        lines.append(f"  [{k}] {provider}: {kind} {len(nodes)} node{plural}")
        lines += [f"        {_name(n)}" for n in nodes]
        i = j
    declined = [(p, r) for p, r in part.declined.items() if r and p in providers]
    if declined:
        lines += ["", "declined, with each provider's reason:"]
        for p, reasons in declined:
            lines.append(f"  {p}:")
            for nid, why in sorted(reasons.items()):
                lines.append(f"    {_name(part.node(nid))}: {why}")
    bodies = session._bodies.placements
    if bodies:
        lines += ["", "graph bodies (If/Loop/Scan/SequenceMap/FlexAttention), placed like the main graph:"]
        for label, groups in bodies:
            lines.append(f"  {label}:")
            lines += [f"    {provider}: {', '.join(names)}" for provider, names in groups]
    copies = [s.label for s in session._plan.steps if s.copy]
    lines += ["", f"copies between devices per run: {len(copies)}"]
    lines += [f"  {c[len('copy of '):]}" for c in copies]
    return "\n".join(lines)


def _name(node) -> str:
    return f"{node.name or '#' + str(node.id)} ({node.op_type})"
