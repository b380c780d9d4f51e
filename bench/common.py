"""Pieces shared by the GPU scripts in bench/."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable


def run_sections(sections: list[tuple[str, Callable[[], object]]], res: dict, write: Callable[[dict], None],
                 on_start: Callable[[str], None] | None = None) -> None:
    """Run each (name, fn) in turn, storing fn()'s result (or the traceback of a failure) under res[name].

    One failing section never stops the others; the report is rewritten after every section, so whatever ran
    survives a later time-out. Section wall times go to res["section_seconds"].
    """
    for name, fn in sections:
        t = time.time()
        if on_start is not None:
            on_start(name)
        print(f"[{name}]", flush=True)
        try:
            res[name] = fn()
        except Exception:  # noqa: BLE001  keep going: report what ran
            res[name] = "FAILED:\n" + traceback.format_exc()[-3000:]
            print(res[name], flush=True)
        res.setdefault("section_seconds", {})[name] = round(time.time() - t, 1)
        write(res)
