#!/usr/bin/env bash
# Waits (up to $1 s) for call2.sh's /tmp/k/DONE, then tars /tmp/k into $OUT (partial results if it is not done).
for _ in $(seq 1 "$1"); do [ -e /tmp/k/DONE ] && break; sleep 1; done
cat /tmp/k/progress; grep -v "^WARNING" /tmp/k/bitwise.log 2>/dev/null | tail -8; tail -6 /tmp/k/sweep.log 2>/dev/null
tail -4 /tmp/k/checks.log 2>/dev/null; cat /tmp/k/ncu_summary.md 2>/dev/null | head -30
tar czf $OUT/k.tgz -C /tmp k; ls -l $OUT
