"""Resolve a model-given path inside a sandbox directory, or refuse it with a clear reason."""

from __future__ import annotations

import os
from pathlib import Path


class SandboxPathError(ValueError):
    """A path the model gave points outside its sandbox (or is malformed)."""


def resolve_in_sandbox(root: Path, user_path: str) -> Path:
    """The real path of `user_path` inside `root`; raise `SandboxPathError` otherwise.

    Refused: empty paths, NUL bytes, absolute paths, `~`, any `..` component, and paths
    whose real location (after following every symlink) is not `root` or below it. The
    check is on the fully resolved path, so a symlink planted inside the sandbox that
    points outside is refused too.
    """
    if not user_path or not user_path.strip():
        raise SandboxPathError("empty path")
    if "\x00" in user_path:
        raise SandboxPathError("path contains a NUL byte")
    if user_path.startswith(("/", "~")) or os.path.isabs(user_path):
        raise SandboxPathError(
            f"absolute path '{user_path}' refused: use a path relative to the project"
        )
    if ".." in Path(user_path).parts:
        raise SandboxPathError(f"path '{user_path}' refused: '..' is not allowed")
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, user_path))
    if real != real_root and not real.startswith(real_root + os.sep):
        raise SandboxPathError(f"path '{user_path}' refused: it resolves outside the sandbox")
    return Path(real)


def relative_to_root(root: Path, path: Path) -> str:
    """`path` relative to the sandbox root, with forward slashes ('.' for the root)."""
    rel = os.path.relpath(path, os.path.realpath(root))
    return rel.replace(os.sep, "/")
