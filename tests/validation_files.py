"""Validation files of the tests' own (the format `shared_spec.dispatch` reads): one entry per kernel backend."""

from __future__ import annotations

import json
from pathlib import Path

from shared_spec.dispatch import VALIDATION_FORMAT


def validation_entry(passed: bool = True, gpu: str = "NVIDIA H200") -> dict:
    return {"gpu": gpu, "date": "2026-12-03", "versions": {}, "result": "92/92", "passed": passed}


def write_validation(path: Path, entries: dict) -> Path:
    """Write a validation file with these `framework/backend` entries at `path` (its folder made) and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": VALIDATION_FORMAT, "backends": entries}))
    return path
