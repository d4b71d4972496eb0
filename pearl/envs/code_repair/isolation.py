"""Which OS isolation layers this machine gives the sandbox, and the per-run uid plumbing.

Levels, strongest first: ``full`` (root: network, PID and mount namespaces, private tmpfs,
an unprivileged uid of the run's own), ``userns`` (an unprivileged user with user
namespaces: the same namespaces, no uid of its own), ``none`` (rlimits, audit hook and
watchdog only). The sandbox (`pearl.envs.code_repair.sandbox.isolation`) probes once per
process which level works here by running itself at it; ``PEARL_SANDBOX_ISOLATION`` caps
the level. This module holds what the probe and the runs share: the `Isolation` found and
the per-run uid plumbing.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

LEVELS = ("full", "userns", "none")
UID_BASE = 200_000  # sandbox uids are UID_BASE .. UID_BASE + UID_SPAN - 1
UID_SPAN = 100_000
_uid_lock = threading.Lock()
_uid_counter = [0]


@dataclass(frozen=True, slots=True)
class Isolation:
    """Which OS layers this machine gives the sandbox (probed once per process)."""

    level: str  # "full" (netns+pidns+uid), "userns" (user+net+pid namespaces), "none"
    python: str  # interpreter run inside the sandbox
    prefix: tuple[str, ...]  # argv prefix that enters the namespaces

    @property
    def drops_uid(self) -> bool:
        return self.level == "full"


def next_uid() -> int:
    with _uid_lock:
        _uid_counter[0] += 1
        return UID_BASE + (os.getpid() * 7919 + _uid_counter[0]) % UID_SPAN


def chown_tree(root: Path, uid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), uid, uid)
    os.lchown(root, uid, uid)


def wait_gone(uid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while count_tasks_of(uid) and time.monotonic() < deadline:
        time.sleep(0.01)


def nproc_limit(max_processes: int, iso: Isolation) -> int:
    """RLIMIT_NPROC counts every task of the real uid: a fresh uid starts at zero."""
    if iso.drops_uid:
        return max_processes
    return count_tasks_of(os.getuid()) + max_processes


def count_tasks_of(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid:
                count += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            continue
    return count
