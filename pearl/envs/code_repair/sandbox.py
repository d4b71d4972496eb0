"""Run model-modified Python code in a sandbox process with limits, no network, no escape.

Layers, strongest first (each one works without the others):

1. **Namespaces** (``unshare``): a fresh network namespace (only a downed loopback: no
   network at all) and a fresh PID namespace (the sandbox sees only its own processes, and
   when its first process dies the kernel kills every other one: no orphan survives).
2. **Unprivileged uid**: when the parent is root, the runner drops to a uid of its own
   (one per sandbox) that owns only the sandbox directory, so the OS refuses writes
   elsewhere and RLIMIT_NPROC applies (root is exempt from RLIMIT_NPROC).
3. **rlimits** set by the runner before any model code: CPU seconds, address space, file
   size, processes, no core files.
4. **Audit hook** in the runner (see runner.py): refuses sockets, new processes, ctypes and
   file access outside the sandbox with a ``PermissionError("sandbox: ... refused")`` that
   the model sees in the test output.
5. **Parent watchdog**: a wall-clock timeout and an output cap; either kills the whole
   process group (and, through the PID namespace, every descendant).

`isolation()` (below) probes once per process which OS layers work here (root: namespaces + uid;
an unprivileged user: a user namespace; otherwise rlimits only) and says so; the
environment variable ``PEARL_SANDBOX_ISOLATION`` (``full``, ``userns``, ``none``) caps
the level, which tests use to exercise the fall-backs.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pearl.envs.code_repair.isolation import (
    LEVELS,
    Isolation,
    chown_tree,
    next_uid,
    nproc_limit,
    wait_gone,
)

_RUNNER_SOURCE = (Path(__file__).with_name("runner.py")).read_text()


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of one sandboxed run."""

    wall_timeout_s: float = 10.0
    cpu_time_s: int = 5
    memory_bytes: int = 512 * 2**20
    max_file_bytes: int = 4 * 2**20
    max_processes: int = 16
    max_output_bytes: int = 8192  # kept for the observation (head and tail)
    kill_output_bytes: int = 2**20  # a run that prints more than this is killed
    allow_subprocess: bool = False  # audit-hook policy; OS limits apply either way
    nice: int = 10  # scheduling niceness added to the sandbox's processes

    def __post_init__(self) -> None:
        if self.wall_timeout_s <= 0 or self.cpu_time_s < 1 or self.max_processes < 1:
            raise ValueError("limits must be positive")
        if self.kill_output_bytes < self.max_output_bytes:
            raise ValueError("kill_output_bytes must be >= max_output_bytes")


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one sandboxed run did. `output` is stdout+stderr, capped, result line removed."""

    exit_code: int | None
    output: str
    output_bytes: int
    truncated: bool
    killed_reason: str | None  # "timeout", "output limit", "cpu limit", "signal N" or None
    num_passed: int
    num_failed: int
    verified: bool  # the runner's result line with our nonce was seen
    wall_s: float
    isolation: str

    @property
    def all_passed(self) -> bool:
        return (
            self.verified and self.exit_code == 0 and self.num_failed == 0 and self.num_passed > 0
        )


def run_in_sandbox(
    root: Path,
    limits: Limits,
    *,
    mode: str = "tests",
    script: str | None = None,
    iso: Isolation | None = None,
) -> RunResult:
    """Run the runner over sandbox directory `root`: its tests, a script, or a probe.

    `root` must be a directory this process created for the sandbox: with a uid drop it is
    handed to that uid (chown) for the run and back afterwards. `iso` defaults to the
    probed `isolation()`. Never raises on anything the sandboxed code does.
    """
    iso = iso or isolation()
    return _run(root.resolve(), limits, iso, mode=mode, script=script)


def prepare_root(root: Path) -> None:
    """Make a fresh sandbox directory private (0700) before files are written into it.

    With a uid drop, every ancestor of `root` must be searchable by others (o+x), as the
    system temp directory is: `new_root()` makes such a directory.
    """
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)


def new_root(prefix: str = "pearl-sbx-", parent: str | None = None) -> Path:
    """A fresh private sandbox directory (in the system temp dir unless `parent` is given)."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent)).resolve()
    prepare_root(root)
    return root


def _check_searchable(root: Path) -> None:
    for parent in root.parents:
        if not os.stat(parent).st_mode & 0o001:
            raise ValueError(
                f"sandbox root {root} is under {parent}, which other users cannot search; "
                "the sandbox uid could not reach it (use new_root())"
            )


def _run(root: Path, limits: Limits, iso: Isolation, *, mode: str, script: str | None) -> RunResult:
    uid = next_uid() if iso.drops_uid else None
    if uid is not None:
        _check_searchable(root)
        chown_tree(root, uid)
    cfg = {
        "root": str(root),
        "uid": uid,
        "mode": mode,
        "script": script,
        "allow_subprocess": limits.allow_subprocess,
        "private_tmp": iso.level in ("full", "userns"),  # only inside our mount namespace
        "limits": {
            "cpu_time_s": limits.cpu_time_s,
            "memory_bytes": limits.memory_bytes,
            "max_file_bytes": limits.max_file_bytes,
            "nproc": nproc_limit(limits.max_processes, iso),
            "nice": limits.nice,
        },
    }
    argv = [*iso.prefix, iso.python, "-I", "-S", "-B", "-c", _RUNNER_SOURCE, json.dumps(cfg)]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    nonce = secrets.token_hex(16)
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=root,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
    )
    reader = _Reader(proc, limits)
    try:
        assert proc.stdin is not None
        proc.stdin.write((nonce + "\n").encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    reason: str | None = None
    try:
        proc.wait(timeout=limits.wall_timeout_s)
    except subprocess.TimeoutExpired:
        reason = "timeout"
    if reader.over_limit.is_set() and reason is None:
        reason = "output limit"
    _kill_group(proc)
    proc.wait()
    reader.join()
    if uid is not None:
        wait_gone(uid, timeout_s=2.0)  # the PID namespace is torn down asynchronously
        chown_tree(root, os.getuid())
    wall_s = time.monotonic() - start
    reason = reason or _signal_reason(proc.returncode, limits)
    return _result(proc.returncode, reader, nonce, reason, wall_s, iso)


class _Reader(threading.Thread):
    """Drain the pipe; keep the head and a rolling tail; kill a run past the kill limit."""

    def __init__(self, proc: subprocess.Popen[bytes], limits: Limits) -> None:
        super().__init__(daemon=True)
        self.proc, self.limits = proc, limits
        self.head_cap = limits.max_output_bytes + 256  # 256: room for the result line
        self.tail_cap = limits.max_output_bytes // 2 + 256
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.over_limit = threading.Event()
        self.start()

    def run(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, 65536):
            self.total += len(chunk)
            if len(self.head) < self.head_cap:
                self.head += chunk[: self.head_cap - len(self.head)]
            self.tail = (self.tail + chunk)[-self.tail_cap :]
            if self.total > self.limits.kill_output_bytes and not self.over_limit.is_set():
                self.over_limit.set()
                _kill_group(self.proc)


def _result(
    code: int | None,
    reader: _Reader,
    nonce: str,
    reason: str | None,
    wall_s: float,
    iso: Isolation,
) -> RunResult:
    marker = f"PEARL-RESULT {nonce} "
    complete = reader.total <= len(reader.head)
    last = bytes(reader.head if complete else reader.tail).decode("utf-8", "replace")
    passed = failed = 0
    verified = False
    lines = last.splitlines(keepends=True)
    if lines and lines[-1].startswith(marker):
        parts = lines.pop().split()
        if len(parts) == 4 and parts[2].isdigit() and parts[3].isdigit():
            passed, failed, verified = int(parts[2]), int(parts[3]), True
    body = "".join(lines)
    size = len(body.encode())
    limit = reader.limits.max_output_bytes
    truncated = size > limit if complete else True
    if truncated:
        half = limit // 2
        head = bytes(reader.head[:half]).decode("utf-8", "replace")
        tail = body.encode()[-half:].decode("utf-8", "replace")
        shown = len(head.encode()) + len(tail.encode())
        dropped = (size if complete else reader.total) - shown
        body = f"{head}\n[... {dropped} bytes of output dropped ...]\n{tail}"
    return RunResult(
        exit_code=code,
        output=body,
        output_bytes=reader.total,
        truncated=truncated,
        killed_reason=reason,
        num_passed=passed,
        num_failed=failed,
        verified=verified and reason is None,
        wall_s=wall_s,
        isolation=iso.level,
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the run's process group (the PID namespace takes every descendant with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_reason(code: int | None, limits: Limits) -> str | None:
    if code is None or code >= 0:
        # unshare reports a child killed by signal N as exit status 128 + N
        if code is not None and code > 128 and code - 128 in (signal.SIGXCPU, signal.SIGKILL):
            return "cpu limit" if code - 128 == signal.SIGXCPU else "killed"
        return None
    if -code == signal.SIGXCPU:
        return "cpu limit"
    if -code == signal.SIGXFSZ:
        return "file size limit"
    return f"signal {-code}"


# -- the isolation probe: the sandbox runs itself at each level, strongest first ---------------
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
        root = Path(tmp)
        prepare_root(root)

        try:
            res = _run(root.resolve(), Limits(wall_timeout_s=10), iso, mode="probe", script=None)
        except OSError:
            return False
        return res.all_passed
