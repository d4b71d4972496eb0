"""The router: which worker runs a trajectory's next turn (paper §4.1.1, §4.4.1).

Pure function of the cluster state, the book's loads and the trajectory. Only `active`
workers are candidates (never initialising, draining or inactive ones), and only those whose
weight version keeps the trajectory within its staleness bound.

* Sticky first: the worker that holds the trajectory's prefix, if it can still prefill
  (a colocated or prefill worker) and has room; with `sticky_max_imbalance` = k, only while
  its load exceeds the least-loaded candidate's by at most k requests (cache affinity
  bounded by load balance, as cache-aware routers do): a worker that just joined (a
  borrowed or preemptible one) then takes turns of busy workers' trajectories too, at the
  price of a full prefill of each.
* Otherwise the worker with the fewest live trajectories at home (`TrajectoryBook.homes`:
  trajectories stay on their worker, so a new or displaced one goes where fewest live,
  as agentic RL frameworks bind each environment to an engine round-robin), then the
  least-loaded: among colocated workers (prefill and decode on one worker) and prefill
  workers (then paired with the least-loaded decode worker). Ties break by worker id, so
  equal inputs give equal routes.
* A route goes with `full_prefill=True` when the chosen prefill worker does not hold the
  prefix: an interrupted trajectory (its KV is gone) or a move to another worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pearl.control.book import Trajectory, TrajectoryBook, TrajState
from pearl.control.commands import Route
from pearl.control.state import ClusterState, Role, Worker


def _seq(worker_id: str) -> tuple[int, str]:
    return (int(worker_id[1:]) if worker_id[1:].isdigit() else 1 << 60, worker_id)


_LAST: list[tuple[ClusterState, list[Worker]]] = []  # one-entry cache (states are immutable)


def _routable_in_order(state: ClusterState) -> list[Worker]:
    if _LAST and _LAST[0][0] is state:
        return _LAST[0][1]
    ws = sorted(state.routable(), key=lambda w: _seq(w.worker_id))
    _LAST[:] = [(state, ws)]
    return ws


_LAST_ALLOWED: list[tuple[ClusterState, frozenset[str], list[Worker]]] = []  # one entry


def _candidates(state: ClusterState, allowed: frozenset[str] | None) -> list[Worker]:
    """Routable workers (active, allowed), in a stable order (age, then id). The list is
    shared (memoised for the last state and `allowed` set): do not change it."""
    ws = _routable_in_order(state)
    if allowed is None:
        return ws
    if _LAST_ALLOWED and _LAST_ALLOWED[0][0] is state and _LAST_ALLOWED[0][1] is allowed:
        return _LAST_ALLOWED[0][2]
    out = [w for w in ws if w.worker_id in allowed]
    _LAST_ALLOWED[:] = [(state, allowed, out)]
    return out


def _by_role(ws: list[Worker]) -> tuple[list[Worker], list[Worker], list[Worker]]:
    """(colocated, decode, not decode) workers of `ws`, each in `ws`'s order."""
    colocated: list[Worker] = []
    decode: list[Worker] = []
    nondecode: list[Worker] = []
    for w in ws:
        if w.role == Role.DECODE:
            decode.append(w)
        else:
            nondecode.append(w)
            if w.role == Role.COLOCATED:
                colocated.append(w)
    return colocated, decode, nondecode


@dataclass(frozen=True, slots=True)
class _Split:
    """A candidate list's oldest weight version and `_by_role` split (computed once per
    `route_queued` call; the candidates do not change while it routes)."""

    min_version: int
    by_role: tuple[list[Worker], list[Worker], list[Worker]]

    @classmethod
    def of(cls, ws: list[Worker]) -> _Split:
        """The split of `ws` (memoised for the last list seen: `_candidates` hands out the
        same, never-changed list for a state while no `allowed` filter applies)."""
        if _LAST_SPLIT and _LAST_SPLIT[0][0] is ws:
            return _LAST_SPLIT[0][1]
        split = cls(min(w.weight_version for w in ws), _by_role(ws))
        _LAST_SPLIT[:] = [(ws, split)]
        return split


_LAST_SPLIT: list[tuple[list[Worker], _Split]] = []  # one-entry cache, holds its list alive


def route_one(
    traj: Trajectory,
    state: ClusterState,
    loads: Mapping[str, int],
    book: TrajectoryBook,
    *,
    max_inflight_per_worker: int | None = None,
    allowed: frozenset[str] | None = None,
    candidates: list[Worker] | None = None,
    _split_pool: _Split | None = None,
    sticky_max_imbalance: int | None = None,
) -> Route | None:
    """The route of `traj`'s next turn, or None if no worker can take it now.

    `allowed` (if given) restricts candidates to those worker ids (e.g. a policy that stops
    sending new work to borrowed workers whose budget is spent). `candidates` may pass the
    routable workers precomputed (`_candidates`), for routing many trajectories at once;
    `_split_pool` (route_queued's) is `_split(candidates)`.
    """
    cap = max_inflight_per_worker
    pool = candidates if candidates is not None else _candidates(state, allowed)
    # `book.can_use_version(traj, v)` is `traj.step - v <= max_staleness`, i.e. v >= min_v
    min_v = traj.step - book.max_staleness
    if cap is None and _split_pool is not None and _split_pool.min_version >= min_v:
        active = pool  # every candidate qualifies: its split is the precomputed one
        colocated, decode, nondecode = _split_pool.by_role
    else:
        if cap is None:
            active = [w for w in pool if w.weight_version >= min_v]
        else:
            active = [
                w for w in pool if w.weight_version >= min_v and loads.get(w.worker_id, 0) < cap
            ]
        colocated, decode, nondecode = _by_role(active)

    def least(ws: list[Worker]) -> Worker:  # ties: the oldest worker (ws is in age order)
        return min(ws, key=lambda w: loads.get(w.worker_id, 0))

    homes = book.homes()

    def fewest(ws: list[Worker]) -> Worker:  # a new home: fewest residents, then load
        return min(ws, key=lambda w: (homes.get(w.worker_id, 0), loads.get(w.worker_id, 0)))

    def make(p: Worker) -> Route | None:
        full = traj.state == TrajState.INTERRUPTED or traj.prefix_worker != p.worker_id
        if p.role == Role.COLOCATED:
            return Route(traj.traj_id, p.worker_id, None, full_prefill=full)
        if not decode:
            return None
        return Route(traj.traj_id, p.worker_id, least(decode).worker_id, full_prefill=full)

    choices = nondecode if decode else colocated
    if traj.prefix_worker is not None and traj.state != TrajState.INTERRUPTED:
        sticky = next(
            (w for w in active if w.worker_id == traj.prefix_worker and w.role != Role.DECODE),
            None,
        )
        if sticky is not None and sticky_max_imbalance is not None and choices:
            excess = loads.get(sticky.worker_id, 0) - loads.get(least(choices).worker_id, 0)
            if excess > sticky_max_imbalance:
                sticky = None
        if sticky is not None:
            r = make(sticky)
            if r is not None:
                return r
    if not choices:
        return None
    return make(fewest(choices))


def version_of(state: ClusterState, worker_id: str) -> int:
    return state.worker(worker_id).weight_version


def route_queued(
    book: TrajectoryBook,
    state: ClusterState,
    *,
    max_inflight_per_worker: int | None = None,
    allowed: frozenset[str] | None = None,
    time_s: float = float("-inf"),
    sticky_max_imbalance: int | None = None,
) -> list[Route]:
    """Route every queued trajectory that can go now, updating the book as it goes.

    The segment's weight version is the older of the prefill and decode workers' versions
    (a conservative staleness). Returns the routes in the order they must be executed.
    """
    routes: list[Route] = []
    queued = book.queued()
    if not queued:
        return routes
    loads = book.loads()
    candidates = _candidates(state, allowed)
    if not candidates:
        return routes
    split = _Split.of(candidates)
    for traj in queued:
        r = route_one(
            traj,
            state,
            loads,
            book,
            max_inflight_per_worker=max_inflight_per_worker,
            candidates=candidates,
            _split_pool=split,
            sticky_max_imbalance=sticky_max_imbalance,
        )
        if r is None:
            continue
        version = version_of(state, r.prefill_worker_id)
        if r.decode_worker_id is not None:
            version = min(version, version_of(state, r.decode_worker_id))
        book.mark_routed(traj.traj_id, r.prefill_worker_id, r.decode_worker_id, version, time_s)
        for w in {r.prefill_worker_id, r.decode_worker_id or r.prefill_worker_id}:
            loads[w] = loads.get(w, 0) + 1
        routes.append(r)
    return routes
