"""The dependency graph as a figure: ranks as lanes, data and order edges, critical path and deadlock cycles."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from pipesim.charts.lanes import CRITICAL_COLOR, CYCLE_COLOR, KIND_COLORS, KIND_NAMES
from pipesim.ir import Action
from pipesim.semantics.dag import DagPositions
from pipesim.units import format_ms

if TYPE_CHECKING:
    import networkx as nx

MAX_DAG_ACTIONS = 1500  # beyond this a node-link drawing is unreadable; the Gantt chart scales instead


def _edge_trace(
    pairs: Iterable[tuple[Action, Action]],
    pos: dict[Action, tuple[float, float]],
    name: str,
    color: str,
    width: float,
    dash: str = "solid",
    arrows: bool = True,
) -> go.Scatter:
    """All edges of one kind in one trace, segments separated by None.

    The arrowhead sits at each edge's midpoint (the ends are hidden under the nodes).
    """
    xs, ys, sizes = [], [], []
    for u, v in pairs:
        (x0, y0), (x1, y1) = pos[u], pos[v]
        xs += [x0, (x0 + x1) / 2, x1, None]
        ys += [y0, (y0 + y1) / 2, y1, None]
        sizes += [0, 10 if arrows else 0, 0, 0]
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines+markers",
        name=name,
        hoverinfo="skip",
        line={"color": color, "width": width, "dash": dash},
        marker={"symbol": "arrow", "angleref": "previous", "size": sizes, "color": color},
    )


LABEL_WIDTH = 0.04  # of the x range: a node's label ("3B0" at 9 pt) on a chart of the page's width


def label_positions(pos: dict) -> dict:
    """Each node's label above it, or below it where the node before it on its lane (same y) is too close for
    both labels to sit side by side above (1F1B's last rank runs F and B 1 ms apart: "3F0" over "3B0")."""
    xs = [x for x, _ in pos.values()]
    crowded = LABEL_WIDTH * (max(xs) - min(xs)) if xs else 0.0
    placed: dict = {}
    lanes: dict = {}
    for action, (x, y) in pos.items():
        lanes.setdefault(y, []).append((x, action))
    for lane in lanes.values():
        lane.sort(key=lambda item: item[0])
        previous_x, previous_top = None, False
        for x, action in lane:
            top = not (previous_top and previous_x is not None and x - previous_x < crowded)
            placed[action] = "top center" if top else "bottom center"
            previous_x, previous_top = x, top
    return placed


def _node_trace(
    kind: str, nodes: list[Action], graph: nx.DiGraph, pos, show_text: bool, labels: dict | None = None
) -> go.Scatter:
    durations = [graph.nodes[a].get("duration") for a in nodes]
    return go.Scatter(
        x=[pos[a][0] for a in nodes],
        y=[pos[a][1] for a in nodes],
        mode="markers+text" if show_text else "markers",
        name=KIND_NAMES[kind],
        text=[str(a) for a in nodes],
        textposition=[labels.get(a, "top center") for a in nodes] if labels else "top center",
        # a halo in the page's contrasting colour: an edge that passes a label is masked around its letters, so no
        # edge runs through a label on a light page or a dark one ("auto": plotly picks the colour)
        textfont={"size": 9, "shadow": "auto"},
        marker={"size": 14, "color": KIND_COLORS[kind], "line": {"width": 1, "color": "white"}},
        customdata=[
            [str(a), graph.nodes[a]["rank"], a.stage, a.microbatch, format_ms(d)]
            for a, d in zip(nodes, durations, strict=True)
        ],
        hovertemplate="<b>%{customdata[0]}</b><br>rank %{customdata[1]}, stage %{customdata[2]}, "
        "microbatch %{customdata[3]}<br>duration %{customdata[4]}<extra></extra>",
    )


MOVE_COLOR = "#8c564b"  # the Gantt's copy-engine colour


def _copy_trace(nodes: list, graph: nx.DiGraph, pos, show_text: bool) -> go.Scatter:
    """OFFLOAD and RELOAD nodes: small squares on the copy engine's sub-lane."""
    return go.Scatter(
        x=[pos[a][0] for a in nodes],
        y=[pos[a][1] for a in nodes],
        mode="markers+text" if show_text else "markers",
        name="offload / reload",
        text=[str(a) for a in nodes],
        textposition="bottom center",
        textfont={"size": 8},
        marker={"size": 9, "symbol": "square", "color": MOVE_COLOR, "line": {"width": 1, "color": "white"}},
        customdata=[[str(a), graph.nodes[a]["rank"], format_ms(graph.nodes[a].get("duration"))] for a in nodes],
        hovertemplate="<b>%{customdata[0]}</b><br>rank %{customdata[1]}, copy engine<br>"
        "duration %{customdata[2]}<extra></extra>",
    )


def _path_pairs(path: Sequence[Action], closed: bool) -> list[tuple[Action, Action]]:
    pairs = list(zip(path, path[1:], strict=False))
    if closed and len(path) > 1:
        pairs.append((path[-1], path[0]))
    return pairs


def _highlight_nodes(nodes: Sequence[Action], pos, name: str, color: str) -> go.Scatter:
    return go.Scatter(
        x=[pos[a][0] for a in nodes],
        y=[pos[a][1] for a in nodes],
        mode="markers",
        name=name,
        marker={"size": 20, "color": "rgba(0,0,0,0)", "line": {"width": 3, "color": color}},
        text=[str(a) for a in nodes],
        hovertemplate="%{text}<extra>" + name + "</extra>",
    )


def dag_figure(
    graph: nx.DiGraph,
    positions: DagPositions,
    *,
    title: str = "",
    critical_path: Sequence[Action] | None = None,
    cycle: list[Action] | None = None,
) -> go.Figure:
    """The dependency graph with ranks as lanes: data edges solid, rank-order edges dashed grey.

    `graph` is `pipesim.semantics.dag.build_dag`'s, `positions` `pipesim.semantics.dag.dag_positions`'s.
    `critical_path` is drawn thick and dark; `cycle` (a deadlock, as returned by
    `pipesim.sim.simulate.find_deadlock`) in red, closing back to its first action.
    """
    if graph.number_of_nodes() > MAX_DAG_ACTIONS:
        raise ValueError(
            f"the graph has {graph.number_of_nodes()} actions; the DAG figure draws at most "
            f"{MAX_DAG_ACTIONS} to stay readable: use fewer ranks or microbatches, or the Gantt chart"
        )
    pos = positions.xy
    fig = go.Figure()
    edges = list(graph.edges(data="kind"))
    fig.add_trace(
        _edge_trace(
            ((u, v) for u, v, k in edges if k == "order"),
            pos,
            "order (same rank)",
            "#B0B0B0",
            1,
            dash="dash",
            arrows=False,
        )
    )
    fig.add_trace(_edge_trace(((u, v) for u, v, k in edges if k == "data"), pos, "data dependency", "#555555", 1.2))
    moves = [(u, v) for u, v, k in edges if k == "memory"]
    if moves:  # activations to host memory and back (OFFLOAD, RELOAD)
        fig.add_trace(_edge_trace(moves, pos, "memory move", MOVE_COLOR, 1.2, dash="dot"))
    if critical_path:
        fig.add_trace(_edge_trace(_path_pairs(critical_path, False), pos, "critical path", CRITICAL_COLOR, 4))
    if cycle:
        fig.add_trace(_edge_trace(_path_pairs(cycle, True), pos, "deadlock cycle", CYCLE_COLOR, 4))
    show_text = graph.number_of_nodes() <= 200
    nodes_by_kind: dict[str, list[Action]] = {kind: [] for kind in KIND_NAMES}
    copies = []
    for action in graph.nodes:
        if action.kind.value in nodes_by_kind:
            nodes_by_kind[action.kind.value].append(action)
        else:
            copies.append(action)
    labels = label_positions(pos) if show_text else None
    for kind, nodes in nodes_by_kind.items():
        if nodes:
            fig.add_trace(_node_trace(kind, nodes, graph, pos, show_text, labels))
    if copies:
        fig.add_trace(_copy_trace(copies, graph, pos, show_text))
    if critical_path:
        fig.add_trace(_highlight_nodes(critical_path, pos, "on critical path", CRITICAL_COLOR))
    if cycle:
        fig.add_trace(_highlight_nodes(cycle, pos, "in deadlock cycle", CYCLE_COLOR))
    title = title or f"{graph.graph.get('name') or 'schedule'}: dependency graph"
    if cycle:
        title += "<br><sup>deadlock: " + " → ".join(map(str, [*cycle, cycle[0]])) + "</sup>"
    num_ranks = positions.num_ranks
    xaxis = {"title": positions.x_title, "showgrid": False, "zeroline": False}
    xs = [x for x, _ in pos.values()]
    if xs and all(float(x).is_integer() for x in xs):  # depth or position: whole steps, never "0.5"
        xaxis.update(tickmode="linear", tick0=0, dtick=max(1, math.ceil((max(xs) - min(xs)) / 12)), tickformat="d")
    fig.update_layout(
        title=title,
        plot_bgcolor="white",
        height=max(300, 90 * num_ranks + 140),
        xaxis=xaxis,
        yaxis={
            "tickvals": list(range(num_ranks)),
            "ticktext": [f"rank {r}" for r in range(num_ranks)],
            "autorange": "reversed",
            "showgrid": False,
            "zeroline": False,
        },
        # On the right, as the Gantt's: above the plot it sat on the title's second line.
        legend={"orientation": "v", "yanchor": "top", "y": 1, "xanchor": "left", "x": 1.01},
    )
    return fig
