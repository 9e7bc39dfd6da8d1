#!/usr/bin/env bash
# A command (default: make test) with other CPU-bound jobs beside it, as on a shared machine.
#
#   scripts/under_load.sh                 # make test beside two jobs of four busy processes
#   JOBS=2 PER_JOB=4 scripts/under_load.sh make test-fast
#
# Each job runs in its own session (setsid), as another user's job, terminal or CI job does, so
# the kernel's scheduler treats it as a group of its own; each of its PER_JOB processes spins
# on one core (python3 -c 'while True: pass'). The 1-minute load average is written every
# minute to $LOG (default under-load.log) beside the command's start and end; the jobs are
# stopped when the command ends, however it ends. Exits with the command's status.
set -uo pipefail
JOBS=${JOBS:-2}
PER_JOB=${PER_JOB:-4}
LOG=${LOG:-under-load.log}
[ $# -gt 0 ] || set -- make test

spinners=()
stop() {
    [ ${#spinners[@]} -gt 0 ] && kill -- "${spinners[@]/#/-}" 2>/dev/null
    [ -n "${monitor:-}" ] && kill "$monitor" 2>/dev/null
}
trap stop EXIT INT TERM

for _ in $(seq "$JOBS"); do
    # a new session whose leader is the job's shell: kill -PGID stops the job and its processes
    setsid bash -c "for _ in \$(seq $PER_JOB); do python3 -c 'while True: pass' & done; wait" &
    spinners+=($!)
done
{
    echo "start $(date -u +%FT%TZ): $* beside $JOBS jobs x $PER_JOB busy processes"
    while sleep 60; do echo "$(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"; done
} > "$LOG" &
monitor=$!

start=$(date +%s)
"$@"
status=$?
echo "end $(date -u +%FT%TZ): exit $status after $(( $(date +%s) - start )) s" >> "$LOG"
exit $status
