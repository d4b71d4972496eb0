"""The controller's invariants, checked after every `handle` (or every n-th, see
`Controller.check_every`); a violation is a bug and raises `ControllerError`.

The cluster state's own invariants hold by construction (`pearl.control.state`); here:
no group half-admitted, no initialising worker outside a group, the book consistent
(every trajectory once, in one state, within the staleness bound), no trajectory in
flight on a missing worker, no GPU both held and offered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pearl.control.context import ControlContext
from pearl.control.elastic import ControllerError, Group
from pearl.control.state import Status


def check_invariants(
    ctx: ControlContext, groups: Mapping[str, Group], traj_ids: Iterable[str] | None = None
) -> None:
    """Raise `ControllerError` if an invariant is broken; with `traj_ids` the book checks
    only those trajectories (the cheap check after a trajectory event)."""
    s = ctx.state
    try:
        ctx.book.check(traj_ids)
    except ValueError as err:
        raise ControllerError(str(err)) from err
    in_groups: set[str] = set()
    for g in groups.values():
        for wid in g.worker_ids:
            if not s.has_worker(wid) or s.worker(wid).status != Status.INITIALIZING:
                raise ControllerError(f"group {g.group_id} is half-admitted ({wid})")
            in_groups.add(wid)
    for w in s.workers_with(statuses=(Status.INITIALIZING,)):
        if w.worker_id not in in_groups:
            raise ControllerError(f"initialising worker {w.worker_id} has no group")
    for wid in ctx.book.loads():
        if not s.has_worker(wid):
            raise ControllerError(f"a trajectory is in flight on missing worker {wid}")
    for gid in ctx.offered:
        if s.has_gpu(gid):
            raise ControllerError(f"GPU {gid} both held and offered")
