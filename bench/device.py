"""A benchmark job that outlives the command that started it, for lent machines whose commands are time-limited.

    python -m bench.device start DIR -- learning run --root /tmp/learning ... --budget-s 1500
    python -m bench.device wait DIR --limit 570      # in a later command: until the job ends or 570 s pass

``start`` runs ``python -m bench <job> ...`` in a new session (it survives the end of the command that started it
while the machine stays up), its output in ``DIR/job.log`` and its process id in ``DIR/job.pid``, and returns at
once. ``wait`` polls until the job has ended (exit status 0 and the log's tail printed, its exit status in
``DIR/job.rc``) or ``--limit`` seconds have passed (exit status 3: still running; call ``wait`` again). Budgets inside
the jobs (``--budget-s``: checkpoint and stop in time) are what make a run resumable by the next ``start``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from bench.common import REPO, child_env

STILL_RUNNING = 3


def start(folder: str, job: list[str]) -> int:
    if not job:
        raise SystemExit("start: expected the job after --, e.g. `-- learning run --root ...`")
    os.makedirs(folder, exist_ok=True)
    rc_path = os.path.join(folder, "job.rc")
    if os.path.exists(rc_path):
        os.remove(rc_path)
    cmd = f"{sys.executable} -m bench {' '.join(job)}; echo $? > {rc_path}"
    with open(os.path.join(folder, "job.log"), "ab") as log:
        proc = subprocess.Popen(["bash", "-c", cmd], stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                env=child_env(), start_new_session=True)
    with open(os.path.join(folder, "job.pid"), "w") as f:
        f.write(str(proc.pid))
    print(f"started python -m bench {' '.join(job)} (pid {proc.pid}); log {os.path.join(folder, 'job.log')}")
    return 0


def wait(folder: str, limit: float, poll: float = 2.0) -> int:
    rc_path = os.path.join(folder, "job.rc")
    if not os.path.isfile(os.path.join(folder, "job.pid")):
        raise SystemExit(f"wait: {folder} holds no job.pid; start a job there first (python -m bench.device start)")
    t0 = time.monotonic()
    while not os.path.isfile(rc_path) and time.monotonic() - t0 < limit:
        time.sleep(poll)
    with open(os.path.join(folder, "job.log"), errors="replace") as f:
        print(f.read()[-3000:])
    if not os.path.isfile(rc_path):
        print(f"still running after {limit:.0f} s: call wait again")
        return STILL_RUNNING
    code = open(rc_path).read().strip()
    print(f"job ended with exit status {code}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    job = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="python -m bench.device", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("start", "wait"))
    ap.add_argument("folder")
    ap.add_argument("--limit", type=float, default=570.0, help="wait: seconds before returning while it runs")
    a = ap.parse_args(argv)
    return start(a.folder, job) if a.action == "start" else wait(a.folder, a.limit)


if __name__ == "__main__":
    sys.exit(main())
