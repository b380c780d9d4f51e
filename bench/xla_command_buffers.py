"""What XLA's command buffers (CUDA graphs) do per execution, from XLA's own log of a GPU run.

    TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=command_buffer_thunk=3 python -m bench.loop_breakdown ... 2> run.log
    python -m bench.xla_command_buffers --log run.log --out $OUT/cmdbuf

XLA records a program's kernels into command buffers and, before each execution, compares the device addresses of
the buffer allocations the recorded commands use with the addresses of this execution. If any differs it re-records
("updates") the commands that use them before it submits the graph, which costs host time on every such execution.
``command_buffer_thunk`` logs each execution, each update (with the number of allocations that changed and, in a
second line, its duration) and each initialisation at verbosity 3. This module counts them per command buffer size
(``num_commands``, which tells the command buffers of a program apart) so that one run says whether a training
loop's per-step dispatch re-records its graphs, how often and at what cost.

Reported: the executions in all, with a histogram of their command buffer's executions since its last update (all
1: every execution re-recorded first); per ``num_commands`` the updates, their time (median, mean, sum in µs), the
initialisations and a histogram of the changed-allocation counts; also the first matching lines as they were logged
(the log's wording can change between XLA versions: a report with no executions says the format was not
recognised).
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import Counter, defaultdict
from typing import Any

from bench.common import fmt, json_block, write_results

# "Execute command buffer on device #0; ..." or (jaxlib 0.11.2) "[0] Execute command buffer; ..."
_EXECUTE = re.compile(r"Execute command buffer(?: on device #\d+)?; num_executions=(\d+)")
# "Update command buffer on device #0 by recoding ..." or (jaxlib 0.11.2) "[0] Create/Update command buffer by ..."
_UPDATE = re.compile(r"Update command buffer (?:on device #\d+ )?by recoding.*?after (\d+) executions.*?"
                     r"num_commands=(\d+)(?:; updated_allocs=(\d+))?")
_UPDATED = re.compile(r"Updated command buffer in (\d+) \S+; num_commands=(\d+)")
_INITIALIZED = re.compile(r"Initialized command buffer on device #\d+ in (\d+) \S+; num_commands=(\d+)")
_WARMUP = re.compile(r"Executing warm up iteration of command buffer thunk")


def summarize(lines: list[str], samples: int = 12) -> dict[str, Any]:
    """Counts a log's command-buffer events (see the module doc).

    An ``Execute`` line carries no command count but its command buffer's executions since its last update
    (``num_executions``): 1 on every line means every execution re-recorded its graph first.
    """
    executions = 0
    since_update: Counter[int] = Counter()
    updates: Counter[str] = Counter()
    update_us: dict[str, list[float]] = defaultdict(list)
    init_us: dict[str, list[float]] = defaultdict(list)
    changed: dict[str, Counter[int]] = defaultdict(Counter)
    first: list[str] = []
    warmups = 0
    for line in lines:
        if "command buffer" not in line:
            continue
        if len(first) < samples:
            first.append(line.rstrip()[-300:])
        if m := _UPDATE.search(line):
            updates[m.group(2)] += 1
            if m.group(3) is not None:
                changed[m.group(2)][int(m.group(3))] += 1
        elif m := _UPDATED.search(line):
            update_us[m.group(2)].append(float(m.group(1)))
        elif m := _INITIALIZED.search(line):
            init_us[m.group(2)].append(float(m.group(1)))
        elif m := _EXECUTE.search(line):
            executions += 1
            since_update[min(int(m.group(1)), 10)] += 1
        elif _WARMUP.search(line):
            warmups += 1
    per_size = {}
    for size in sorted(set(updates) | set(update_us) | set(init_us), key=int):
        us = update_us.get(size, [])
        per_size[size] = {
            "updates": updates.get(size, 0),
            "update_us_median": statistics.median(us) if us else None,
            "update_us_mean": statistics.fmean(us) if us else None,
            "update_us_sum": sum(us),
            "initializations": len(init_us.get(size, [])),
            "changed_allocations": dict(sorted(changed.get(size, Counter()).items())),
        }
    return {"executions": executions, "updates": sum(updates.values()), "warmup_iterations": warmups,
            "update_us_sum": sum(sum(v) for v in update_us.values()),
            "executions_since_update": {("10+" if k == 10 else str(k)): v for k, v in sorted(since_update.items())},
            "per_num_commands": per_size, "first_lines": first}


def _markdown(name: str, res: dict[str, Any]) -> str:
    lines = [f"# XLA command buffers: {name}", "",
             f"- executions: {res['executions']}, updates: {res['updates']}, warm-up iterations: "
             f"{res['warmup_iterations']}, update time in all: {fmt(res['update_us_sum'] / 1e3)} ms", "",
             "- executions by their command buffer's executions since its last update (1: it was re-recorded "
             "just before): " + (", ".join(f"{k}: {v}" for k, v in res["executions_since_update"].items()) or "-"),
             "", "| num_commands | updates | update µs median | mean | changed allocations: count |",
             "|---|---|---|---|---|"]
    for size, row in res["per_num_commands"].items():
        hist = ", ".join(f"{k}: {v}" for k, v in row["changed_allocations"].items()) or "-"
        lines.append(f"| {size} | {row['updates']} | "
                     f"{fmt(row['update_us_median'])} | {fmt(row['update_us_mean'])} | {hist} |")
    lines += ["", "First matching lines:", "", "```", *res["first_lines"], "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="the stderr of a run with TF_CPP_VMODULE=command_buffer_thunk=3")
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", default=None, help="the run's name in the report (default: the log's path)")
    args = parser.parse_args(argv)
    with open(args.log, encoding="utf-8", errors="replace") as f:
        res = summarize(f.readlines())
    res["log"] = args.log
    markdown = _markdown(args.name or args.log, res)
    print(write_results(args.out, res, markdown + "\n".join(json_block("results", res))))
    return 0 if res["executions"] or res["updates"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
