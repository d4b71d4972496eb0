"""Load typed (pydantic) configs from YAML with errors that name the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from pearl.errors import InputError, from_validation, read_text
from pearl.world.sections import renamed_fields

M = TypeVar("M", bound=BaseModel)


def model_from_dict(cls: type[M], doc: Any, source: str) -> M:
    """Validate `doc` as `cls`; the first problem becomes an `InputError` naming its field."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise InputError(source, "expected a mapping at top level")
    renamed_fields(doc, source)
    try:
        return cls.model_validate(doc)
    except ValidationError as err:
        raise from_validation(err, source) from None


def load_yaml_model(cls: type[M], path: Path | str) -> M:
    """Read a YAML file into `cls` (missing fields take their defaults)."""
    p = Path(path)
    text = read_text(p)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        raise InputError(str(p), "not valid YAML", location=where) from None
    return model_from_dict(cls, doc, str(p))


def dump_yaml_model(model: BaseModel) -> str:
    """YAML text that `load_yaml_model` reads back to an equal model."""
    return yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False)


def with_dotted_updates(model: M, dotted: dict[str, Any]) -> M:
    """A copy of `model` with `section.field=value` updates applied and validated like a
    load. A section that does not exist raises `KeyError` (its name); a bad value or an
    unknown field, `ValidationError`."""
    doc = model.model_dump(mode="json")
    for key, value in dotted.items():
        node = doc
        *parents, leaf = key.split(".")
        walked: list[str] = []
        for part in parents:
            walked.append(part)
            child = node.get(part)
            if not isinstance(child, dict):
                raise KeyError(".".join(walked))
            node = child
        node[leaf] = value
    return type(model).model_validate(doc)
