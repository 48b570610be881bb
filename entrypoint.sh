#!/usr/bin/env bash
# Container entrypoint for Bub (installed as /usr/local/bin/bub-entrypoint; tini is PID 1).
#
# Privileges: started as root (the image's default) it runs Bub as the `bub` account with the
# uid/gid PUID/PGID (default 1000, the usual first user of a host), so that what the agent writes
# into ./workspace and ./data belongs to the host user: it gives the account those ids (usermod),
# gives BUB_HOME's files that are not theirs to them (a root-run container's data, a directory
# Docker created), and the workspace directory too when it is empty (Docker creates a missing one
# as root), then runs itself again as that user with setpriv, HOME=/home/bub. PUID=0 keeps root.
# Started as another user (`docker run --user`), it runs as that user and changes nothing.
#
# Modes (as that user):
#   * /workspace/startup.sh exists -> `bub idle` runs in the background (scheduled jobs fire and
#     their answers are delivered) while `bash startup.sh` runs in the workspace. The container
#     lives as long as the script; its exit code is the container's.
#   * otherwise -> `bub message "$@"`: the channel daemon, as a child; its exit code is the
#     container's, except for a configuration error (exit 2: no channel, a missing key): then the
#     entrypoint says what to fix once and waits until it is stopped (and exits 2), so that
#     `restart: unless-stopped` does not start it again and again.
#   * `bub-entrypoint --healthcheck` (the image's HEALTHCHECK): exits 0 while `bub message`
#     answers `bub status`, or while the startup script runs; 1 otherwise, with the reason. It
#     reads the mode the running entrypoint wrote to $TMPDIR/bub-entrypoint.state.
#
# Signals: tini forwards signals to this script only, so it traps TERM/INT/HUP/QUIT and sends
# SIGTERM to its children (TERM, not INT: bash starts background jobs with SIGINT ignored). In
# startup mode, when the script ends, `bub idle` gets SIGTERM and is waited for (SIGKILL after
# BUB_IDLE_STOP_TIMEOUT seconds); its status never changes the exit code.
#
# Overridable (used by tests): BUB_WORKSPACE_DIR (default /workspace), BUB_BIN (default `bub` on
# PATH), BUB_IDLE_STOP_TIMEOUT (default 10); id, usermod, groupmod, chown and setpriv are looked
# up on PATH.
set -euo pipefail

workspace="${BUB_WORKSPACE_DIR:-/workspace}"
bub_bin="${BUB_BIN:-bub}"
idle_stop_timeout="${BUB_IDLE_STOP_TIMEOUT:-10}"
startup="$workspace/startup.sh"
state_file="${TMPDIR:-/tmp}/bub-entrypoint.state"
# The account Bub runs as when the container starts as root (created by the Dockerfile).
user=bub
user_home=/home/bub
puid="${PUID:-1000}"
pgid="${PGID:-1000}"

log() { echo "bub-entrypoint: $*" >&2; }

message_pid=""
script_pid=""
idle_pid=""
sleeper_pid=""
stopping=0

# shellcheck disable=SC2317 # called by the traps below
forward() {
    # $1: the signal received. Every child gets SIGTERM; dead or unstarted ones are skipped.
    log "got SIG$1: stopping"
    stopping=1
    local pid
    for pid in "$message_pid" "$script_pid" "$idle_pid" "$sleeper_pid"; do
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

# hold REASON...: after a configuration error, says what is wrong and what to do once, then
# waits until stopped and exits 2. Exiting at once would make Docker restart the container in a
# loop that repeats the same error.
hold() {
    log "$*"
    log "fix it, then restart: a setting in .env (read by compose) needs \`docker compose up -d\`;" \
        "one in the workspace's .env or BUB_HOME/config.toml, \`docker compose restart bub\`." \
        "Waiting until stopped, so that Docker does not restart Bub in a loop."
    write_state config-error
    sleep infinity &
    sleeper_pid=$!
    if ((stopping)); then # a signal came before the pid was known
        kill -TERM "$sleeper_pid" 2>/dev/null || true
    fi
    wait_pid "$sleeper_pid"
    exit 2
}

# write_state MODE [PID]: what --healthcheck reads. A failure to write only costs the health.
write_state() {
    echo "$*" 2>/dev/null >"$state_file" || log "cannot write $state_file: the healthcheck will fail"
}

# health_url: /healthz at BUB_HTTP_LISTEN (a PORT or HOST:PORT), as reached from inside.
health_url() {
    local listen="$BUB_HTTP_LISTEN" host="" port
    port="${listen##*:}"
    [[ "$listen" != "$port" ]] && host="${listen%:*}"
    case "$host" in
    "" | 0.0.0.0 | localhost) host=127.0.0.1 ;;
    "[::]") host="[::1]" ;;
    esac
    echo "http://$host:$port/healthz"
}

# healthcheck: the running entrypoint's mode, checked (bub message: its /healthz when
# BUB_HTTP_LISTEN is set, else `bub status`).
healthcheck() {
    local mode="" pid=""
    read -r mode pid 2>/dev/null <"$state_file" || true
    case "$mode" in
    message)
        if [[ -n "${BUB_HTTP_LISTEN:-}" ]]; then
            curl -fsS --max-time 5 -o /dev/null "$(health_url)" || return 1
        else
            "$bub_bin" status --json >/dev/null || return 1
        fi
        ;;
    startup)
        if [[ -n "$pid" && -d "/proc/$pid" ]]; then
            return 0
        fi
        echo "the startup script (pid $pid) has ended"
        return 1
        ;;
    config-error)
        echo "bub message stopped on a configuration error: see \`docker compose logs bub\`"
        return 1
        ;;
    *)
        echo "the entrypoint has not started Bub yet"
        return 1
        ;;
    esac
}

# run_as_user ARGS...: runs this script again with ARGS as PUID:PGID, with the account's HOME.
run_as_user() {
    export HOME="$user_home" USER="$user" LOGNAME="$user"
    exec setpriv --reuid="$puid" --regid="$pgid" --clear-groups -- "$BASH" "$0" "$@"
}

# prepare_user: the account and the directories Bub writes, for PUID:PGID (only what differs).
prepare_user() {
    local uid gid
    if ! uid="$(id -u "$user" 2>/dev/null)" || ! gid="$(id -g "$user" 2>/dev/null)"; then
        hold "there is no account \`$user\` to run Bub as: set PUID=0 to run it as root."
    fi
    if [[ "$uid" != "$puid" || "$gid" != "$pgid" ]]; then
        log "running Bub as uid $puid, gid $pgid (PUID, PGID)"
        groupmod -o -g "$pgid" "$user"
        usermod -o -u "$puid" -g "$pgid" "$user"
    fi
    local home="${BUB_HOME:-/data}"
    local theirs=(\( ! -user "$puid" -o ! -group "$pgid" \))
    if [[ -d "$home" && -n "$(find "$home" "${theirs[@]}" -print -quit)" ]]; then
        log "giving the files of $home to $puid:$pgid"
        find "$home" "${theirs[@]}" -exec chown -h "$puid:$pgid" {} +
    fi
    if [[ -n "$(find "$workspace" -maxdepth 0 -empty "${theirs[@]}" 2>/dev/null)" ]]; then
        log "giving the empty $workspace to $puid:$pgid"
        chown "$puid:$pgid" "$workspace"
    fi
}

if [[ "$(id -u)" == 0 && "$puid" != 0 ]]; then
    if [[ ! "$puid" =~ ^[0-9]+$ || ! "$pgid" =~ ^[0-9]+$ ]]; then
        if [[ "${1:-}" == --healthcheck ]]; then
            echo "PUID/PGID are not numbers"
            exit 1
        fi
        hold "PUID=$puid, PGID=$pgid: both must be numeric ids (\`id -u\`, \`id -g\` on the host)."
    fi
    if [[ "${1:-}" != --healthcheck ]]; then
        prepare_user
    fi
    run_as_user "$@"
fi

if [[ "${1:-}" == --healthcheck ]]; then
    healthcheck || exit 1
    exit 0
fi

if ! command -v "$bub_bin" >/dev/null 2>&1; then
    log "cannot find $bub_bin"
    exit 127
fi

if [[ ! -f "$startup" ]]; then
    log "no $startup: running bub message"
    write_state message
    "$bub_bin" message "$@" &
    message_pid=$!
    if ((stopping)); then # a signal came before the pid was known
        kill -TERM "$message_pid" 2>/dev/null || true
    fi
    wait_pid "$message_pid"
    message_pid=""
    if ((status == 2 && !stopping)); then
        hold "bub message exited 2: a configuration error (its message is above)."
    fi
    exit "$status"
fi

log "$startup found: running it, with bub idle in the background"
cd "$workspace"
# A BUB_BIN path named `bub` is also the `bub` the startup script finds.
if [[ "$bub_bin" == */* && "${bub_bin##*/}" == bub ]]; then
    PATH="$(cd "${bub_bin%/*}" && pwd):$PATH"
    export PATH
fi

"$bub_bin" idle </dev/null &
idle_pid=$!
bash "$startup" "$@" &
script_pid=$!
write_state startup "$script_pid"
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
