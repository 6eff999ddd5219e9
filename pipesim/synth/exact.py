"""The exact synthesis: a mixed-integer program over per-rank orders, solved by HiGHS through `highspy`.

Why HiGHS through `highspy` rather than `scipy.optimize.milp` (HiGHS too): highspy takes a starting solution
(the heuristic's order, so the solver starts from it and only has to improve or prove it), reports the proven
bound when the time limit stops it, and is one small wheel, where SciPy is a large dependency pipesim would use
one function of. Both are HiGHS, a well-kept open-source MIP solver.

The model (a disjunctive job shop with a memory budget):

* `S_i` the start of action i, `C` the step's end; minimise C.
* Producers: `S_c >= S_p + d_p + hop` (hop: the transfer when p is on another rank; the dispatch gap when on
  the same rank, as the simulator prices it: `Instance`).
* One rank runs one action at a time: for every two actions of a rank that the dependencies do not order,
  a binary `y_ab` (a before b) and the two big-M disjunctions with the rank's dispatch gap; pairs the
  dependencies order are fixed.
* Memory: at the start of each forward a of rank r, what every earlier action of r stashed or freed plus a's
  own stash is within r's limit: `delta_a + sum_b delta_b [b before a] <= limit_r`, linear in y (the
  liveness of `pipesim.semantics.lower`, through `Instance.delta`).
* Position rows: an action starts after everything its rank runs before it, and the step ends after
  everything the rank runs after it, linear in y without big-M; they give the relaxation each rank's load.
* Microbatches are interchangeable, so stage 0's forwards are fixed to run in microbatch order (any order can
  be relabelled so; the optimum is unchanged).
* When some action takes no time, y could order a rank cyclically at equal start times; transitivity rows then
  keep y a real order.

Starts are bounded by each action's head and tail (`bounds.heads_and_tails`) within the incumbent's length,
which also gives each disjunction its own, smaller big-M. The order is read back from y and priced by the
simulator, never taken from the solver's objective.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from pipesim.ir import Action, F
from pipesim.synth.bounds import heads_and_tails, topological
from pipesim.synth.problem import Instance

# Free pairs above which the model is not tried (the heuristic's answer stands, with its bound).
MAX_EXACT_PAIRS = 4000


def same_rank_pairs(inst: Instance) -> int:
    """Pairs of actions on one rank: what `free_pairs` would walk (quadratic), counted without walking."""
    return sum(len(ids) * (len(ids) - 1) // 2 for ids in inst.by_rank)


@dataclass(frozen=True)
class ExactResult:
    orders: list[list[int]] | None  # the solver's best order (None: none found in time)
    bound: float  # proven lower bound on the step (from the first action's start)
    proven: bool  # the solver proved `orders` optimal


def _reach(inst: Instance) -> list[int]:
    """Per action, its descendants as a bit set (transitive closure of the dependencies)."""
    reach = [0] * len(inst.actions)
    for i in reversed(topological(inst)):
        bits = 0
        for c in inst.consumers[i]:
            bits |= reach[c] | (1 << c)
        reach[i] = bits
    return reach


def free_pairs(inst: Instance) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Same-rank pairs (a, b), a < b: (those no dependency orders, those ordered a before b or b before a
    given as (first, second))."""
    reach = _reach(inst)
    free, fixed = [], []
    for ids in inst.by_rank:
        for a, b in combinations(sorted(ids), 2):
            if reach[a] >> b & 1:
                fixed.append((a, b))
            elif reach[b] >> a & 1:
                fixed.append((b, a))
            else:
                free.append((a, b))
    return free, fixed


class _Rows:
    """Sparse rows lower <= sum(coef x) <= upper, gathered for one passModel."""

    def __init__(self) -> None:
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.starts: list[int] = [0]
        self.index: list[int] = []
        self.value: list[float] = []

    def add(self, terms: list[tuple[int, float]], lower: float, upper: float) -> None:
        for col, coef in terms:
            self.index.append(col)
            self.value.append(coef)
        self.starts.append(len(self.index))
        self.lower.append(lower)
        self.upper.append(upper)


def solve_exact(inst: Instance, incumbent: list[list[int]], upper: float, time_limit_s: float) -> ExactResult:
    """Solve the model within `time_limit_s`, starting from `incumbent` (its step time `upper`, measured from
    the first start as every step time is)."""
    import highspy  # only the exact synthesis needs it

    started = time.monotonic()
    n = len(inst.actions)
    origin = inst.gap[inst.stage_to_rank[0]]
    horizon = upper + origin  # absolute end of the incumbent
    head, tail = heads_and_tails(inst)
    free, fixed = free_pairs(inst)
    y_col = {pair: n + 1 + k for k, pair in enumerate(free)}
    c_col = n
    ncols = n + 1 + len(free)
    inf = math.inf  # highspy.kHighsInf
    col_lower = np.zeros(ncols)
    col_upper = np.ones(ncols)
    for i in range(n):
        col_lower[i] = head[i]
        col_upper[i] = max(head[i], horizon - tail[i] - inst.duration[i])
    col_lower[c_col], col_upper[c_col] = 0.0, horizon
    rows = _Rows()
    latest_end = [col_upper[i] + inst.duration[i] for i in range(n)]
    for i in range(n):
        rank = inst.rank[i]
        for p in inst.producers[i]:
            lag = inst.gap[rank] if inst.rank[p] == rank else inst.hop[i]
            rows.add([(i, 1.0), (p, -1.0)], inst.duration[p] + lag, inf)
        rows.add([(c_col, 1.0), (i, -1.0)], inst.duration[i], inf)
    for a, b in fixed:
        rows.add([(b, 1.0), (a, -1.0)], inst.duration[a] + inst.gap[inst.rank[a]], inf)
    zero_time = False
    for a, b in free:
        g = inst.gap[inst.rank[a]]
        col = y_col[(a, b)]
        big_ab = latest_end[a] + g - col_lower[b]  # a before b: S_b >= S_a + d_a + g
        big_ba = latest_end[b] + g - col_lower[a]
        rows.add([(b, 1.0), (a, -1.0), (col, -big_ab)], inst.duration[a] + g - big_ab, inf)
        rows.add([(a, 1.0), (b, -1.0), (col, big_ba)], inst.duration[b] + g, inf)
        zero_time |= min(inst.duration[a], inst.duration[b]) + g <= 0
    _memory_rows(inst, rows, free, fixed, y_col)
    _position_rows(inst, rows, free, fixed, y_col, c_col)
    if zero_time:
        _transitivity_rows(inst, rows, free, y_col)
    for k in range(inst.num_microbatches - 1):  # symmetry: stage 0's forwards in microbatch order
        a, b = inst.index[Action(0, F, k)], inst.index[Action(0, F, k + 1)]
        if (a, b) in y_col:
            col_lower[y_col[(a, b)]] = 1.0
        elif (b, a) in y_col:
            col_upper[y_col[(b, a)]] = 0.0
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = ncols, len(rows.lower)
    cost = np.zeros(ncols)
    cost[c_col] = 1.0
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, col_lower, col_upper
    lp.row_lower_, lp.row_upper_ = np.array(rows.lower), np.array(rows.upper)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array(rows.starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(rows.index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(rows.value)
    lp.integrality_ = [highspy.HighsVarType.kContinuous] * (n + 1) + [highspy.HighsVarType.kInteger] * len(free)
    solver = highspy.Highs()
    solver.setOptionValue("output_flag", False)
    solver.setOptionValue("threads", 1)
    solver.setOptionValue("mip_rel_gap", 0.0)
    solver.setOptionValue("mip_abs_gap", 1e-9 * max(1.0, horizon))
    solver.setOptionValue("random_seed", 0)
    solver.passModel(lp)
    solver.setSolution(_start(inst, incumbent, free, y_col, ncols, c_col, horizon))
    solver.setOptionValue("time_limit", max(0.01, time_limit_s - (time.monotonic() - started)))
    solver.run()
    status = solver.getModelStatus()
    info = solver.getInfo()
    bound = info.mip_dual_bound - origin if math.isfinite(info.mip_dual_bound) else 0.0
    solution = solver.getSolution()
    if not solution.value_valid:
        return ExactResult(None, max(0.0, bound), False)
    values = list(solution.col_value)
    orders = _orders_from(inst, values, free, fixed, y_col)
    proven = status == highspy.HighsModelStatus.kOptimal
    return ExactResult(orders, max(0.0, bound), proven)


def _memory_rows(inst: Instance, rows: _Rows, free: list, fixed: list, y_col: dict) -> None:
    """Each forward's stash level at its start within its rank's limit."""
    before_fixed: dict[int, float] = {}  # forward id -> delta of actions fixed before it
    for first, second in fixed:
        before_fixed[second] = before_fixed.get(second, 0.0) + inst.delta[first]
    pairs_of: dict[int, list[tuple[int, int]]] = {}
    for a, b in free:
        pairs_of.setdefault(a, []).append((a, b))
        pairs_of.setdefault(b, []).append((a, b))
    for i, action in enumerate(inst.actions):
        if action.kind is not F:
            continue
        constant = inst.delta[i] + before_fixed.get(i, 0.0)
        terms = []
        for a, b in pairs_of.get(i, ()):
            col = y_col[(a, b)]
            if b == i:  # other = a before i when y_ab = 1
                terms.append((col, inst.delta[a]))
            else:  # other = b before i when y_ab = 0: delta_b (1 - y)
                constant += inst.delta[b]
                terms.append((col, -inst.delta[b]))
        terms = [(col, coef) for col, coef in terms if coef != 0.0]
        rows.add(terms, -math.inf, inst.limit[inst.rank[i]] * (1 + 1e-9) - constant)


def _position_rows(inst: Instance, rows: _Rows, free: list, fixed: list, y_col: dict, c_col: int) -> None:
    """What runs before an action on its rank delays its start; what runs after it delays the end. Valid for
    every order, and without big-M: they give the relaxation each rank's load, which the disjunctions lose."""
    before: dict[int, list[tuple[int, float]]] = {i: [] for i in range(len(inst.actions))}
    after: dict[int, list[tuple[int, float]]] = {i: [] for i in range(len(inst.actions))}
    start_const = [inst.gap[inst.rank[i]] for i in range(len(inst.actions))]
    end_const = [inst.duration[i] for i in range(len(inst.actions))]
    for first, second in fixed:
        g = inst.gap[inst.rank[first]]
        start_const[second] += inst.duration[first] + g
        end_const[first] += inst.duration[second] + g
    for a, b in free:
        g = inst.gap[inst.rank[a]]
        col = y_col[(a, b)]
        before[b].append((col, inst.duration[a] + g))  # a before b (y = 1) delays b's start
        after[a].append((col, inst.duration[b] + g))  # ... and follows a
        before[a].append((col, -(inst.duration[b] + g)))  # b before a (y = 0): (1 - y)
        start_const[a] += inst.duration[b] + g
        after[b].append((col, -(inst.duration[a] + g)))
        end_const[b] += inst.duration[a] + g
    for i in range(len(inst.actions)):
        # S_i >= start_const + sum(coef y)   and   C >= S_i + end_const + sum(coef y)
        rows.add([(i, 1.0)] + [(col, -coef) for col, coef in before[i]], start_const[i], math.inf)
        rows.add([(c_col, 1.0), (i, -1.0)] + [(col, -coef) for col, coef in after[i]], end_const[i], math.inf)


def _transitivity_rows(inst: Instance, rows: _Rows, free: list, y_col: dict) -> None:
    """y a total order on each rank: a<b and b<c imply a<c (needed only when actions can take no time)."""
    ordered = set(free)

    def before(a: int, b: int) -> tuple[int, float, float]:
        """(column, coefficient, constant) of [a before b]."""
        return (y_col[(a, b)], 1.0, 0.0) if (a, b) in ordered else (y_col[(b, a)], -1.0, 1.0)

    for ids in inst.by_rank:
        for a, b, c in combinations(sorted(ids), 3):
            if not ((a, b) in ordered and (b, c) in ordered and (a, c) in ordered):
                continue
            for x, y, z in ((a, b, c), (c, b, a)):
                (c1, k1, o1), (c2, k2, o2), (c3, k3, o3) = before(x, y), before(y, z), before(x, z)
                # [x<y] + [y<z] - [x<z] <= 1
                rows.add([(c1, k1), (c2, k2), (c3, -k3)], -math.inf, 1 - o1 - o2 + o3)


def _start(inst: Instance, orders: list[list[int]], free: list, y_col: dict, ncols: int, c_col: int, horizon: float):
    """The incumbent as a starting solution: its simulated starts, its pairwise order."""
    import highspy

    _, flat, starts, ends, stuck = inst.timed(orders)
    assert not stuck, "the incumbent order deadlocks"
    values = [0.0] * ncols
    position = {}
    for k, i in enumerate(flat):
        values[i] = starts[k]
        position[i] = k
    values[c_col] = min(horizon, max(ends))
    for (a, b), col in y_col.items():
        values[col] = 1.0 if position[a] < position[b] else 0.0
    solution = highspy.HighsSolution()
    solution.col_value = values
    solution.value_valid = True
    return solution


def _orders_from(inst: Instance, values: list[float], free: list, fixed: list, y_col: dict) -> list[list[int]]:
    """Per rank, its actions sorted by how many of them the solution puts before each."""
    earlier = [0] * len(inst.actions)
    for _, second in fixed:
        earlier[second] += 1
    for a, b in free:
        if values[y_col[(a, b)]] > 0.5:
            earlier[b] += 1
        else:
            earlier[a] += 1
    return [sorted(ids, key=lambda i: (earlier[i], values[i])) for ids in inst.by_rank]
