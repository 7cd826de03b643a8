# shellcheck shell=bash
# Helpers shared by the server control scripts (kafka-ctl, redis-ctl, pg-ctl), with-servers
# and server-watchdog. Sourced, never run. Bash 5, Linux (/proc).
#
# A server is identified by "PID STARTTIME" (STARTTIME: field 22 of /proc/PID/stat, in clock
# ticks since boot), stored in a pid file. A pid alone can be reused by an unrelated process
# after the server died; with the start time we never signal anything we did not start.

# hc_die MESSAGE...: print "NAME: MESSAGE" to stderr and exit 1.
hc_die() {
    printf '%s: %s\n' "${HC_PROG:-harness}" "$*" >&2
    exit 1
}

# hc_say MESSAGE...: progress line on stderr (stdout is kept for values such as `env`).
hc_say() {
    [ -n "${HC_HARNESS_QUIET:-}" ] || printf '%s: %s\n' "${HC_PROG:-harness}" "$*" >&2
}

# hc_now_ms: milliseconds since the epoch.
hc_now_ms() {
    local t
    t=$(date +%s%N)
    printf '%s\n' "$((t / 1000000))"
}

# hc_proc_stat_field PID N: prints field N (N >= 3) of /proc/PID/stat; fails if there is no
# such process. Field 3 is the state, 5 the process group, 22 the start time.
hc_proc_stat_field() {
    local stat rest fields i
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    # Field 2 (comm) may hold spaces and parentheses: split after the last ") ".
    rest=${stat##*) }
    read -r -a fields <<<"$rest"
    i=$(($2 - 3))
    [ "$i" -ge 0 ] && [ "$i" -lt "${#fields[@]}" ] || return 1
    printf '%s\n' "${fields[$i]}"
}

# hc_proc_starttime PID: prints the start time of PID, fails if there is no such process.
hc_proc_starttime() {
    hc_proc_stat_field "$1" 22
}

# hc_proc_is_zombie PID: true when PID has exited but not been reaped yet.
hc_proc_is_zombie() {
    [ "$(hc_proc_stat_field "$1" 3)" = Z ]
}

# hc_pid_alive PID STARTTIME: true while that very process runs (not a zombie, not a
# different process that reuses the pid).
hc_pid_alive() {
    local st
    [ -n "$1" ] && [ -n "$2" ] || return 1
    st=$(hc_proc_starttime "$1") || return 1
    [ "$st" = "$2" ] || return 1
    ! hc_proc_is_zombie "$1"
}

# hc_pidfile_write FILE PID: records PID with its start time.
hc_pidfile_write() {
    local st
    st=$(hc_proc_starttime "$2") || st=gone
    printf '%s %s\n' "$2" "$st" >"$1.tmp"
    mv -f "$1.tmp" "$1"
}

# hc_pidfile_read FILE: sets HC_PID and HC_PID_START from FILE; fails when there is none.
hc_pidfile_read() {
    HC_PID='' HC_PID_START=''
    [ -s "$1" ] || return 1
    read -r HC_PID HC_PID_START <"$1" || true
    [ -n "$HC_PID" ]
}

# hc_pidfile_alive FILE: true while the process recorded in FILE runs.
hc_pidfile_alive() {
    hc_pidfile_read "$1" && hc_pid_alive "$HC_PID" "$HC_PID_START"
}

# hc_wait_gone PID STARTTIME SECONDS: waits until the process is gone; fails on timeout.
hc_wait_gone() {
    local deadline
    deadline=$(($(hc_now_ms) + $3 * 1000))
    while hc_pid_alive "$1" "$2"; do
        [ "$(hc_now_ms)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

# hc_wait_reaped PID STARTTIME SECONDS: waits until the process has left the process table.
# A killed daemon whose parent exited stays a zombie until PID 1 reaps it (here about 1.5 s
# later), and kill(pid, 0) still succeeds on a zombie: PostgreSQL then takes its stale
# postmaster.pid for a live server. Fails on timeout.
hc_wait_reaped() {
    local deadline
    deadline=$(($(hc_now_ms) + $3 * 1000))
    while [ "$(hc_proc_starttime "$1" 2>/dev/null)" = "$2" ]; do
        [ "$(hc_now_ms)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

# hc_signal_group_or_pid SIGNAL PID: signals PID's whole process group when PID leads it
# (our servers run under setsid, and PostgreSQL's backends share the postmaster's group),
# otherwise PID alone.
hc_signal_group_or_pid() {
    local pgid
    pgid=$(hc_proc_stat_field "$2" 5) || pgid=''
    if [ "$pgid" = "$2" ]; then
        kill "-$1" -- "-$2" 2>/dev/null || true
    else
        kill "-$1" "$2" 2>/dev/null || true
    fi
}

# hc_stop_pidfile FILE GRACE_SECONDS: SIGTERM the recorded process, wait up to GRACE_SECONDS,
# then SIGKILL its group. Removes FILE. Succeeds when nothing of it runs any more; sets
# HC_STOP_FORCED=1 when it had to SIGKILL, else empty.
hc_stop_pidfile() {
    # shellcheck disable=SC2034 # read by the callers
    HC_STOP_FORCED=''
    if ! hc_pidfile_alive "$1"; then
        rm -f "$1"
        return 0
    fi
    local pid=$HC_PID start=$HC_PID_START
    kill -TERM "$pid" 2>/dev/null || true
    # A paused server (SIGSTOP) only acts on SIGTERM once it runs again.
    kill -CONT "$pid" 2>/dev/null || true
    if ! hc_wait_gone "$pid" "$start" "$2"; then
        hc_say "pid $pid still running after ${2}s: SIGKILL"
        # shellcheck disable=SC2034
        HC_STOP_FORCED=1
        hc_signal_group_or_pid KILL "$pid"
        hc_wait_gone "$pid" "$start" 10 || return 1
    fi
    rm -f "$1"
}

# hc_signal_pidfile SIGNAL FILE: sends SIGNAL to the recorded process if it runs.
hc_signal_pidfile() {
    hc_pidfile_alive "$2" || return 1
    kill "-$1" "$HC_PID"
}

# hc_kill_pidfile FILE: SIGKILL the recorded process (and its process group if it leads
# one), as a crash would; waits until it is gone. Removes FILE.
hc_kill_pidfile() {
    if ! hc_pidfile_alive "$1"; then
        rm -f "$1"
        return 0
    fi
    local pid=$HC_PID start=$HC_PID_START
    hc_signal_group_or_pid KILL "$pid"
    hc_wait_gone "$pid" "$start" 10 || return 1
    rm -f "$1"
}

# hc_port_in_use PORT: true if any TCP socket (IPv4 or IPv6, any state, TIME_WAIT too) has
# PORT as its local port.
hc_port_in_use() {
    local hex
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" 'FNR > 1 { if (substr($2, length($2) - 4) == p) { found = 1; exit } }
                      END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# hc_port_listening PORT: true if a TCP socket listens on PORT. After a crash the old
# connections of a server's port linger (TIME_WAIT); a restart only needs no listener.
hc_port_listening() {
    local hex
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" 'FNR > 1 { if ($4 == "0A" && substr($2, length($2) - 4) == p) { found = 1; exit } }
                      END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# hc_free_port: prints a TCP port that nothing uses now and that no harness on this machine has
# handed out in the last 3 hours. Chosen at random below the kernel's ephemeral range (so
# outgoing connections never take it between runs and restarts). A server restarted on its own
# port (redis-ctl, pg-ctl, kafka-ctl, a fault script's private store) leaves the port free for
# a moment, and a test running beside it once picked it then (CI verification of 2026-12-05
# 13:20 UTC: faults_forgetting_store's redis found its port taken): so every port handed out is
# recorded in HC_PORT_REGISTRY (default /tmp/hc-ports; a directory per port, made by mkdir, which
# is atomic, so two pickers at once never get the same port), and a record younger than 3 hours
# (longer than any test run) keeps it from every other picker. Older records are removed.
hc_free_port() {
    local lo=20000 hi=32767 eph_lo _eph_hi p i reg=${HC_PORT_REGISTRY:-/tmp/hc-ports}
    if read -r eph_lo _eph_hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null; then
        if [ "$eph_lo" -gt 12000 ] && [ "$eph_lo" -le 32768 ]; then
            hi=$((eph_lo - 1))
            lo=$((hi - 12000))
        fi
    fi
    mkdir -p "$reg" 2>/dev/null || hc_die "cannot make the port registry $reg"
    # now and then (one call in 50), forget the records of finished runs
    [ $((RANDOM % 50)) -ne 0 ] ||
        find "$reg" -mindepth 1 -maxdepth 1 -mmin +180 -exec rm -rf {} + 2>/dev/null || true
    for ((i = 0; i < 200; i++)); do
        p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
        if ! hc_port_in_use "$p" && mkdir "$reg/$p" 2>/dev/null; then
            printf '%s\n' "$p"
            return 0
        fi
    done
    hc_die "no free TCP port found in $lo-$hi (records in $reg)"
}

# hc_tail_logs FILE...: prints the last lines of each existing FILE to stderr.
hc_tail_logs() {
    local f
    for f in "$@"; do
        [ -s "$f" ] || continue
        printf -- '----- last lines of %s -----\n' "$f" >&2
        tail -n "${HC_LOG_TAIL_LINES:-40}" "$f" >&2
    done
}

# hc_abs PATH: absolute path of PATH (which must exist).
hc_abs() {
    (cd "$1" && pwd -P)
}
