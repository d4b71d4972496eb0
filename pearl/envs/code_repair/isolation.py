"""Which OS isolation layers this machine gives the sandbox, and the per-run uid plumbing.

Levels, strongest first: ``full`` (root: network, PID and mount namespaces, private tmpfs,
an unprivileged uid of the run's own), ``userns`` (an unprivileged user with user
namespaces: the same namespaces, no uid of its own), ``none`` (rlimits, audit hook and
watchdog only). `isolation()` probes once per process and picks an interpreter that the
sandbox can run at that level; ``PEARL_SANDBOX_ISOLATION`` caps the level.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
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


@functools.cache
def isolation() -> Isolation:
    """Probe (once per process) the strongest isolation this machine supports."""
    cap = os.environ.get("PEARL_SANDBOX_ISOLATION", "full")
    allowed = LEVELS[LEVELS.index(cap) :] if cap in LEVELS else LEVELS
    for level in allowed:
        iso = probe_level(level)
        if iso is not None:
            return iso
    return Isolation(level="none", python=sys.executable, prefix=())


def probe_level(level: str) -> Isolation | None:
    """The isolation of `level` with the first interpreter that works there, or None."""
    unshare = shutil.which("unshare")
    ns_flags = ("--net", "--pid", "--fork", "--kill-child", "--mount-proc")
    if level == "full":
        if not unshare or os.geteuid() != 0:
            return None
        prefix: tuple[str, ...] = (unshare, *ns_flags, "--")
    elif level == "userns":
        if not unshare:
            return None
        prefix = (unshare, "--user", "--map-root-user", *ns_flags, "--")
    elif level == "none":
        prefix = ()
    else:
        raise ValueError(f"unknown isolation level '{level}' (use {', '.join(LEVELS)})")
    for python in _interpreters():
        iso = Isolation(level=level, python=python, prefix=prefix)
        if _probe(iso):
            return iso
    return None


def _interpreters() -> list[str]:
    found: list[str] = []
    for cand in (getattr(sys, "_base_executable", None), sys.executable, "/usr/bin/python3"):
        if cand and os.path.exists(cand):
            real = os.path.realpath(cand)
            if real not in found:
                found.append(real)
    return found


def _probe(iso: Isolation) -> bool:
    with tempfile.TemporaryDirectory(prefix="pearl-probe-") as tmp:
        from pearl.envs.code_repair.sandbox import Limits, _run, prepare_root

        root = Path(tmp)
        prepare_root(root)

        try:
            res = _run(root.resolve(), Limits(wall_timeout_s=10), iso, mode="probe", script=None)
        except OSError:
            return False
        return res.all_passed


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
