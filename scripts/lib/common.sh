# Shared helpers for the sagaflow scripts. Sourced, never executed.
# Every wait here is bounded; every failure prints one line with the cause and the fix.

# sf_close_inherited_fds: closes every descriptor above 2. A server or watchdog started from a CTest
# fixture would otherwise keep CTest's output pipe open, and CTest waits for that pipe to close.
sf_close_inherited_fds() {
    local fd
    for fd in $(ls /proc/$BASHPID/fd 2>/dev/null); do
        if ((fd > 2)); then
            eval "exec ${fd}>&-" 2>/dev/null || true
        fi
    done
}

sf_root() { cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd; }

sf_log() { printf '[sagaflow] %s\n' "$*" >&2; }

# sf_die CAUSE FIX: one line an operator can act on, then exit 1.
sf_die() {
    printf '[sagaflow] error: %s\n[sagaflow] fix: %s\n' "$1" "$2" >&2
    exit 1
}

# The cache for things resolved from registries (Maven's repository, the Kafka jars). Outside the
# source tree so that a fresh clone reuses it.
sf_cache_dir() { printf '%s\n' "${SAGAFLOW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sagaflow}"; }

# sf_port_in_use PORT: true when something listens on 127.0.0.1:PORT (or any address).
sf_port_in_use() {
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

# sf_free_port: a TCP port nobody listens on, from a range that avoids the ephemeral range.
sf_free_port() {
    local port tries=0
    while ((tries < 200)); do
        port=$((20000 + RANDOM % 12000))
        if ! sf_port_in_use "$port"; then
            printf '%s\n' "$port"
            return 0
        fi
        tries=$((tries + 1))
    done
    sf_die "no free TCP port found in 20000-32000 after 200 tries" "stop some local servers and run again"
}

# sf_wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s until it succeeds.
sf_wait_for() {
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    while ((SECONDS < deadline)); do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.2
    done
    sf_log "timed out after ${seconds}s waiting for ${what}"
    return 1
}

# sf_pid_alive PID [PATTERN]: true when PID runs and (if given) its command line matches PATTERN,
# so that a recycled pid never gets killed by mistake.
sf_pid_alive() {
    local pid=$1 pattern=${2:-}
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ -z "$pattern" ]] && return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$pattern"
}

# sf_kill_tree PID PATTERN: TERM, a bounded wait, then KILL.
sf_kill_tree() {
    local pid=$1 pattern=$2 i
    sf_pid_alive "$pid" "$pattern" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
        sf_pid_alive "$pid" "$pattern" || return 0
        sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# sf_watch_owner OWNER_PID STOP_COMMAND...: a small watchdog that runs STOP_COMMAND when OWNER_PID
# dies (a CTest run killed with SIGKILL), so no server outlives the run that started it.
sf_watch_owner() {
    local owner=$1
    shift
    (
        sf_close_inherited_fds   # bash keeps a saved copy of a redirected stdout at fd 10
        trap '' HUP INT
        while kill -0 "$owner" 2>/dev/null; do sleep 1; done
        "$@" >/dev/null 2>&1
    ) </dev/null >/dev/null 2>&1 &
    printf '%s\n' "$!"
}
