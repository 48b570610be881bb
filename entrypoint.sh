#!/usr/bin/env bash
# Container entrypoint for Bub (installed as /usr/local/bin/bub-entrypoint; tini is PID 1).
#
# Self-resume protocol:
#   * /workspace/startup.sh exists -> `bub idle` runs in the background (scheduled jobs fire and
#     their answers are delivered) while `bash startup.sh` runs in the workspace. The container
#     lives as long as the script; its exit code is the container's.
#   * otherwise -> `exec bub message "$@"`: the channel daemon, tini's direct child.
#
# Signals (startup mode): tini forwards signals to this script only, so it traps TERM/INT/HUP/QUIT
# and sends SIGTERM to both children (TERM, not INT: bash starts background jobs with SIGINT
# ignored). When the script ends, `bub idle` gets SIGTERM and is waited for (SIGKILL after
# BUB_IDLE_STOP_TIMEOUT seconds); its status never changes the exit code.
#
# Overridable (used by tests): BUB_WORKSPACE_DIR (default /workspace), BUB_BIN (default `bub` on
# PATH), BUB_IDLE_STOP_TIMEOUT (default 10).
set -euo pipefail

workspace="${BUB_WORKSPACE_DIR:-/workspace}"
bub_bin="${BUB_BIN:-bub}"
idle_stop_timeout="${BUB_IDLE_STOP_TIMEOUT:-10}"
startup="$workspace/startup.sh"

log() { echo "bub-entrypoint: $*" >&2; }

if ! command -v "$bub_bin" >/dev/null 2>&1; then
    log "cannot find $bub_bin"
    exit 127
fi

if [[ ! -f "$startup" ]]; then
    log "no $startup: running bub message"
    exec "$bub_bin" message "$@"
fi

log "$startup found: running it, with bub idle in the background"
cd "$workspace"
# A BUB_BIN path named `bub` is also the `bub` the startup script finds.
if [[ "$bub_bin" == */* && "${bub_bin##*/}" == bub ]]; then
    PATH="$(cd "${bub_bin%/*}" && pwd):$PATH"
    export PATH
fi

script_pid=""
idle_pid=""
stopping=0

# shellcheck disable=SC2317 # called by the traps below
forward() {
    # $1: the signal received. Both children get SIGTERM; dead or unstarted ones are skipped.
    log "got SIG$1: stopping the startup script and bub idle"
    stopping=1
    local pid
    for pid in "$script_pid" "$idle_pid"; do
        if [[ -n "$pid" ]]; then
            kill -TERM "$pid" 2>/dev/null || true
        fi
    done
}
# Installed before any child starts, so no signal can leave an orphan behind.
for sig in TERM INT HUP QUIT; do
    # shellcheck disable=SC2064 # expand $sig now
    trap "forward $sig" "$sig"
done

# wait_pid PID: waits for that child; its exit status goes to `status`. A trapped signal
# interrupts `wait` before it reports (`-p` leaves `ended` unset): then it waits again.
ended=""
status=0
wait_pid() {
    while :; do
        ended=""
        status=0
        wait -p ended "$1" 2>/dev/null || status=$?
        if [[ -n "${ended:-}" ]] || ((status == 127)); then # 127 unreported: not our child
            ended=$1
            return 0
        fi
    done
}

# wait_any PID...: waits until one of these children ends; sets `ended` to its pid, `status`
# to its exit status. bash drops finished jobs from its job table, where `wait -n` no longer
# sees them but `wait PID` still does: a child that is already gone is collected that way.
wait_any() {
    local pid
    while :; do
        for pid in "$@"; do
            if ! kill -0 "$pid" 2>/dev/null; then
                wait_pid "$pid"
                return 0
            fi
        done
        ended=""
        status=0
        wait -n -p ended "$@" 2>/dev/null || status=$?
        if [[ -n "${ended:-}" ]]; then
            return 0
        fi
        if ((status == 127)); then # none of them in the job table, yet all alive: be safe
            wait_pid "$1"
            return 0
        fi
        # Interrupted by a trapped signal: look again.
    done
}

"$bub_bin" idle </dev/null &
idle_pid=$!
bash "$startup" "$@" &
script_pid=$!
if ((stopping)); then # a signal came before both pids were known
    kill -TERM "$idle_pid" "$script_pid" 2>/dev/null || true
fi

# Wait for the script; an early end of `bub idle` is reported and the script goes on.
while :; do
    if [[ -z "$idle_pid" ]]; then
        wait_pid "$script_pid"
        break
    fi
    wait_any "$script_pid" "$idle_pid"
    if [[ "$ended" != "$idle_pid" ]]; then
        break
    fi
    idle_pid=""
    if ((!stopping)); then
        log "bub idle exited early (status $status); scheduled jobs will not fire, the startup script goes on"
    fi
done
script_status=$status
script_pid=""
log "startup script exited with status $script_status"

# Stop `bub idle`, bounded: a `sleep` child is the timer.
if [[ -n "$idle_pid" ]]; then
    kill -TERM "$idle_pid" 2>/dev/null || true
    sleep "$idle_stop_timeout" &
    timer_pid=$!
    wait_any "$idle_pid" "$timer_pid"
    if [[ "$ended" == "$timer_pid" ]]; then
        log "bub idle did not stop within ${idle_stop_timeout}s: sending SIGKILL"
        kill -KILL "$idle_pid" 2>/dev/null || true
        wait_pid "$idle_pid"
    else
        kill -TERM "$timer_pid" 2>/dev/null || true
        wait_pid "$timer_pid"
    fi
    idle_pid=""
fi

exit "$script_status"
