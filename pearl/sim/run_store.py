"""Finished simulations kept on disk, so an interrupted experiment loses nothing already done.

`pearl experiment NAME --out DIR` keeps every finished `run_simulation` result (one setting:
its policies and its bound) in `DIR/runs/`, and smaller parts a setting or a grid is made of
(`put_part`): the rate of every static run behind a bound (`pearl.sim.bound.static_rate`),
each grid point's makespans and the learned profile of `pearl.sim.validate` (so `ratio`
and `pearl validate --out DIR` keep theirs too). `pearl simulate --seeds ... --out DIR`
keeps each seed's result the same way. Run the same command again and what is already
there is read back instead of simulated; only the rest runs.

A result is found again only under the same key: the whole config and the contents of
the files it names (a model or trace file; `config_identity`), whether the bound was asked
for, the package's version and a fingerprint of its source (but for the command line).
Changing any of them (another seed, a `--set`, an edited model file, an edited module of
the simulator or the controller) simulates afresh, so a stored result never stands for
code, settings or files it was not made with. An unreadable entry (damaged after it was written: entries
are written whole or not at all) is reported on stderr, simulated again and overwritten.

What is kept is what an experiment reads back: each run's summary, decisions, state
history and step times, and the bound; not its per-turn and per-step telemetry (about 80%
of a run's size, and what `pearl simulate --out` writes into run directories), so a stored
result cannot write run directories (`SimulationResult.write` refuses). Each entry is a
zlib-compressed pickle, written whole or not at all.

The store in use is a context variable (`use(store)`), set by the command line around the
experiment; with none set, `run_simulation` simulates every time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import pickle
import sys
import zlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pearl import __version__
from pearl.sim.config import SimConfig, config_identity

if TYPE_CHECKING:
    from pearl.sim.compare import SimulationResult

T = TypeVar("T")

_FORMAT = 1  # bump when what is stored changes shape
TELEMETRY_DROPPED = "telemetry_dropped"  # `SimulationResult.extra` key of a stored result


_PRESENTATION = ("cli",)  # only shows results (the reports are in: runs hold their docs)


@cache
def code_fingerprint() -> str:
    """A hash of the `pearl` package's Python source (each file's path and content), but
    for the command line, which cannot change a simulation's result."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] in _PRESENTATION:
            continue
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


class RunStore:
    """Results of `run_simulation` (one file a setting) and parts of settings or grids
    (`<kind>-*` files, `put_part`), under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.num_read = 0  # settings
        self.num_written = 0  # settings and parts: simulations finished in this process

    @staticmethod
    def _hash(*parts: str) -> str:
        h = hashlib.sha256()
        for part in (str(_FORMAT), __version__, code_fingerprint(), *parts):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:32]

    def key(self, cfg: SimConfig, *, with_bound: bool) -> str:
        return self._hash(config_identity(cfg), str(with_bound))

    def path(self, key: str) -> Path:
        return self.root / f"{key}.pkl"

    def __len__(self) -> int:
        """Entries kept, settings and parts (of any config or code)."""
        if not self.root.is_dir():
            return 0
        return sum(1 for _ in self.root.glob("*.pkl"))

    def get(self, cfg: SimConfig, *, with_bound: bool) -> SimulationResult | None:
        result: SimulationResult | None = _read(self.path(self.key(cfg, with_bound=with_bound)))
        if result is not None:
            self.num_read += 1
        return result

    def put(self, result: SimulationResult, *, with_bound: bool) -> None:
        lean = dataclasses.replace(
            result,
            runs=[
                dataclasses.replace(r.slim(), turns=[], worker_steps=[], request_events=[])
                for r in result.runs
            ],
            extra={**result.extra, TELEMETRY_DROPPED: True},
        )
        _write(self.path(self.key(result.cfg, with_bound=with_bound)), lean)
        self.num_written += 1

    def _part_path(self, kind: str, key: str) -> Path:
        if not kind.isalpha():
            raise ValueError(f"a part's kind is a word, not {kind!r}")
        return self.root / f"{kind}-{self._hash(kind, key)}.pkl"

    def get_part(self, kind: str, key: str) -> Any:
        """What `put_part` kept under (`kind`, `key`), or None. `key` must say everything
        the part depends on but the code (a config's `config_identity`, a grid point, ...);
        `kind` names what it is (`rate`, `makespans`, `profile`)."""
        return _read(self._part_path(kind, key))

    def put_part(self, kind: str, key: str, obj: object) -> None:
        _write(self._part_path(kind, key), obj)
        self.num_written += 1


def _read(path: Path) -> Any:
    """What `_write` kept at `path`; None if nothing is there, or if it cannot be read
    (reported on stderr: the caller simulates it again)."""
    if not path.is_file():
        return None
    try:
        return pickle.loads(zlib.decompress(path.read_bytes()))
    except Exception as err:  # damaged after it was written, or another version's
        print(
            f"warning: {path}: unreadable stored simulation ({type(err).__name__}); "
            "simulating it again",
            file=sys.stderr,
        )
        return None


def _write(path: Path, obj: object) -> None:
    """Pickle `obj`, compressed, to `path`: whole or absent, never half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), 1))
    os.replace(tmp, path)


_ACTIVE: ContextVar[RunStore | None] = ContextVar("pearl_run_store", default=None)


def active() -> RunStore | None:
    """The store `run_simulation` reads and writes now, if any."""
    return _ACTIVE.get()


@contextlib.contextmanager
def use(store: RunStore | None) -> Iterator[RunStore | None]:
    """Make `store` the active one inside the block (None: none)."""
    token = _ACTIVE.set(store)
    try:
        yield store
    finally:
        _ACTIVE.reset(token)


def kept_or_made(kind: str, key: str, make: Callable[[], T]) -> T:
    """The part (`kind`, `key`) from the active store if it holds it; else `make()`, kept
    there (with no store active, just `make()`)."""
    store = active()
    if store is None:
        return make()
    found: T | None = store.get_part(kind, key)
    if found is not None:
        return found
    made = make()
    store.put_part(kind, key, made)
    return made
