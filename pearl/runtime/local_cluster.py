"""A Ray cluster of zone-labelled nodes on this machine, and joining one at an address.

`LocalCluster` wraps `ray.cluster_utils.Cluster` for tests, benchmarks and the trace
player: zone-labelled nodes (named as `pearl.runtime.topology` names them) that can be
added, drained and removed (a removed node is a real preemption: the processes of its
actors are killed). It keeps Ray's address file in its own temporary directory, so a plain
`ray.init()` elsewhere on the machine never attaches to it by accident. `connect()` joins
a cluster at an address, one that does not answer being an `InputError` that names it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from typing import Any

from pearl.control.state import Zone
from pearl.errors import InputError
from pearl.runtime.topology import node_labels, node_resources


class LocalCluster:
    """A multi-node Ray cluster on this machine with zone-labelled nodes (tests, trace player).

    The head node has `head_cpus` CPUs; the driver, registry and router live there and it is
    never preempted. It holds no device slots unless `head_gpu_ids` are given (dedicated
    zone; saves starting one more node in tests). `connect()` attaches this process to it.
    """

    def __init__(
        self,
        *,
        head_cpus: int = 1,
        head_gpu_ids: Iterable[str] = (),
        object_store_bytes: int = 200 * 1024**2,
    ) -> None:
        from ray.cluster_utils import Cluster

        self._tmp = tempfile.mkdtemp(prefix="pearl-ray-")
        _ensure_default_ray_dir()
        self._store_bytes = object_store_bytes
        head_args = {
            "num_cpus": head_cpus,
            "include_dashboard": False,
            "temp_dir": self._tmp,
            "object_store_memory": object_store_bytes,
            "labels": node_labels(Zone.DEDICATED, "head"),
            "resources": node_resources(Zone.DEDICATED, tuple(head_gpu_ids)),
        }
        # Ray gives a starting node 30 s to register; on an overloaded machine the head can
        # miss that. One more try is safe for the head (a half-started one is a separate
        # cluster, killed at exit); a worker node is never retried (it could register late
        # and duplicate its device slots).
        for attempt in range(2):
            try:
                self._cluster = Cluster(initialize_head=True, head_node_args=head_args)
                break
            except Exception:
                if attempt == 1:
                    raise
        self._nodes: dict[str, Any] = {}

    @property
    def address(self) -> str:
        return self._cluster.address

    def connect(self, namespace: str = "pearl") -> None:
        connect(self.address, namespace)

    def add_node(
        self, name: str, zone: Zone | str, gpu_ids: Iterable[str], *, num_cpus: int = 1
    ) -> str:
        """Start a node named `name` holding `gpu_ids`; returns its Ray node id."""
        if name in self._nodes:
            raise ValueError(f"node '{name}' already exists")
        ids = tuple(gpu_ids)
        node = self._cluster.add_node(
            num_cpus=num_cpus,
            resources=node_resources(zone, ids),
            labels=node_labels(zone, name),
            object_store_memory=self._store_bytes,
        )
        self._nodes[name] = node
        return node.node_id

    def node_id(self, name: str) -> str:
        return self._nodes[name].node_id

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(self._nodes)

    def drain_node(self, name: str, deadline_in_s: float, *, message: str = "preemption") -> bool:
        """Mark node `name` as draining for preemption with a deadline (Ray's control store).

        Returns whether Ray accepted the drain. Ray does not kill the node at the deadline:
        the caller removes it (as a cloud provider would).
        """
        import ray
        from ray.core.generated import autoscaler_pb2

        # Ray's drain API lives in its compiled modules, which carry no type information
        gcs = ray._raylet.GcsClient(address=self.address)  # type: ignore[attr-defined]
        deadline_ms = int((time.time() + deadline_in_s) * 1000)
        reason = autoscaler_pb2.DrainNodeReason.Value(  # type: ignore[attr-defined]
            "DRAIN_NODE_REASON_PREEMPTION"
        )
        accepted, _ = gcs.drain_node(self.node_id(name), reason, message, deadline_ms)
        return bool(accepted)

    def remove_node(self, name: str, *, graceful: bool = True) -> None:
        """Take node `name` away: its raylet and every worker process on it are killed.

        `graceful`: SIGTERM first (as a cloud preemption does; Ray then learns of the death
        at once), else SIGKILL (Ray notices through its health checks, seconds later).
        """
        node = self._nodes.pop(name)
        self._cluster.remove_node(node, allow_graceful=graceful)

    def shutdown(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        self._cluster.shutdown()
        shutil.rmtree(self._tmp, ignore_errors=True)
        # workers killed with the cluster leave shared-memory KV segments behind
        from pearl.runtime.transport.shm import sweep_orphaned_segments

        sweep_orphaned_segments(wait_s=2.0)


def _ensure_default_ray_dir() -> None:
    """Ray's cluster helper records the head's address in Ray's *default* temp dir even
    when the nodes get their own, and fails where that dir was never made (a fresh
    machine whose first Ray start is ours)."""
    try:
        from ray._common.utils import get_default_ray_temp_dir

        os.makedirs(get_default_ray_temp_dir(), exist_ok=True)
    except (ImportError, OSError):  # another Ray layout, or no permission: Ray will say
        pass


def connect(address: str, namespace: str = "pearl") -> None:
    """Join the Ray cluster at `address`; one that does not answer is an `InputError`
    naming it (the run config's `cluster.address`, `pearl run --address`)."""
    import ray

    try:
        ray.init(address=address, namespace=namespace, log_to_driver=False)
    except ConnectionError as err:
        raise InputError(
            "<argument>",
            f"no Ray cluster answers at {address} ({err})",
            field="cluster.address (--address)",
        ) from None
