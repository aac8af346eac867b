#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests and local use.
#
#   scripts/postgres.sh start [DIR]   start a cluster in DIR (default: a new
#                                     mktemp -d) and print its URL
#   scripts/postgres.sh stop DIR      stop the cluster in DIR and remove DIR
#   scripts/postgres.sh url DIR       print the URL of the cluster running in DIR
#
# `start` uses the highest version under /usr/lib/postgresql/*/bin and, when
# there is none, installs Debian's `postgresql` package with apt-get (as
# root). The cluster listens on 127.0.0.1 only, on a free port, with its unix
# socket in its own directory; password (scram-sha-256) authentication; a
# role `verdict` owning a database `verdict`. stdout gets exactly one line,
#
#   postgres://verdict:PASSWORD@127.0.0.1:PORT/verdict?sslmode=disable
#
# and everything else goes to stderr. DIR/url holds that URL and
# DIR/admin_url (mode 600) the superuser's (user and database `postgres`).
# The server also speaks TLS (`ssl = on`) with a certificate for 127.0.0.1
# issued by a throwaway CA whose certificate is DIR/ca.crt, so clients can
# be tested with `?sslmode=require` and that file as their root (when the
# openssl command is there; without it the server is plain only).
# `start` on a DIR whose cluster runs prints its URL again, and concurrent
# starts on one DIR share one cluster (flock on DIR/.lock).
#
# PG_STOP_WHEN_UNUSED=1 (the test support sets it) makes a `start` that
# creates the cluster also start a watchdog: every process that uses the
# cluster holds a shared flock on DIR/users, and once nobody has held one
# for PG_UNUSED_SECONDS (default 5; the first check comes after
# PG_UNUSED_GRACE, default 15 s) the watchdog stops the cluster, so that
# `cargo test` leaves no server running. A later `start` makes it again.
#
# fsync stays on, so that timings compare with SQLite's durable commits;
# PG_FAST=1 turns fsync, synchronous_commit and full_page_writes off for
# test speed (it applies when the cluster is created).
#
# initdb and postgres refuse to run as root: as root, they run as the
# `postgres` system user (created when missing), which then owns DIR. When
# that user cannot reach DIR (a parent directory such as /root is private),
# or DIR is too long for a unix socket path, the data and socket go to a
# private directory under /tmp instead, and DIR/cluster names it.
#
# Exit codes: 0 success (for `stop`, also when no cluster ran); 1 failure,
# with the reason on stderr, and `url` when DIR has no running cluster;
# 2 usage; 3 PostgreSQL is missing and cannot be installed (not root, no
# apt-get, or the install failed).
set -euo pipefail

PROG="postgres.sh"
# initdb, postgres and pg_ctl run as this user when we are root.
SERVICE_USER="postgres"
# Bounds every wait for the server (start, ready, stop).
WAIT_SECONDS=30
# Bounds the wait for another `start` on the same DIR, which may be
# installing the package.
LOCK_SECONDS=600
# The longest DIR/.s.PGSQL.NNNNN that a unix socket address (108 bytes on
# Linux, NUL included) holds, with a margin.
MAX_SOCKET_PATH=100

die() {
    echo "$PROG: $*" >&2
    exit 1
}

usage() {
    echo "usage: $0 start [DIR] | stop DIR | url DIR" >&2
    exit 2
}

log() {
    echo "$PROG: $*" >&2
}

am_root() {
    [ "$(id -u)" -eq 0 ]
}

# The bin directory of the highest installed PostgreSQL, or nothing.
pg_bin_dir() {
    local initdb
    initdb=$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)
    if [ -x "$initdb" ]; then
        dirname "$initdb"
    fi
}

install_postgres() {
    if ! am_root; then
        echo "$PROG: PostgreSQL is missing (no /usr/lib/postgresql/*/bin/initdb), and installing it needs root: apt-get install postgresql" >&2
        exit 3
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$PROG: PostgreSQL is missing (no /usr/lib/postgresql/*/bin/initdb), and there is no apt-get to install Debian's postgresql package" >&2
        exit 3
    fi
    log "installing Debian's postgresql package (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    # Package lists may be missing or stale on a fresh machine: they are
    # refreshed only when the install needs it. The lock timeout waits for
    # another apt-get (a `start` on another DIR) instead of failing. fd 9
    # (our lock) is closed: the package's scripts may start a server, which
    # would hold it.
    local apt=(apt-get -o DPkg::Lock::Timeout=300)
    if ! "${apt[@]}" install -y --no-install-recommends postgresql >&2 9>&-; then
        if ! { "${apt[@]}" update && "${apt[@]}" install -y --no-install-recommends postgresql; } >&2 9>&-; then
            echo "$PROG: apt-get install postgresql failed" >&2
            exit 3
        fi
    fi
}

# Runs a server program: as SERVICE_USER when root, since initdb, postgres
# and pg_ctl refuse root. fd 9 (the lock) is closed so that the server,
# which outlives this script, does not hold the lock. They run from / since
# they look up their own directory and fail in a working directory that
# their user cannot read (/root).
as_service() {
    if am_root; then
        (cd / && runuser -u "$SERVICE_USER" -- "$@" 9>&-)
    else
        (cd / && "$@" 9>&-)
    fi
}

ensure_service_user() {
    am_root || return 0
    if ! getent passwd "$SERVICE_USER" >/dev/null; then
        log "creating the system user $SERVICE_USER"
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin "$SERVICE_USER" >&2 ||
            die "cannot create the system user $SERVICE_USER"
    fi
}

random_hex() {
    od -An -tx1 -N16 /dev/urandom | tr -d ' \n'
}

# A port nothing listens on: the kernel's pick for a bound port 0, or a
# random one that refuses a connection.
free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
        return
    fi
    local port
    while :; do
        port=$((20000 + RANDOM % 40000))
        if ! (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
}

# The directory that holds the data directory and the socket.
cluster_dir() {
    if [ -f "$1/cluster" ]; then
        cat "$1/cluster"
    else
        echo "$1"
    fi
}

url_port() {
    local rest=${1##*@127.0.0.1:}
    echo "${rest%%/*}"
}

# Whether DIR holds a cluster of this script that accepts connections: its
# URL, its server's pid file (unless we may not read the data directory) and
# an answer on its port.
running() {
    local dir=$1 bin=$2 url data
    [ -f "$dir/url" ] || return 1
    url=$(cat "$dir/url")
    data="$(cluster_dir "$dir")/data"
    if [ -r "$data" ] && [ -x "$data" ] && [ ! -f "$data/postmaster.pid" ]; then
        return 1
    fi
    "$bin/pg_isready" -q -h 127.0.0.1 -p "$(url_port "$url")" -t 3
}

# Entries a DIR of this script may hold.
ours() {
    case "$1" in
        .lock | url | admin_url | url.tmp | admin_url.tmp | ca.crt | ca.crt.tmp | cluster | data | log | pwfile | users | .s.PGSQL.*) return 0 ;;
        *) return 1 ;;
    esac
}

# Whether DIR holds nothing but entries of this script.
only_ours() {
    local entry
    for entry in "$1"/* "$1"/.[!.]*; do
        [ -e "$entry" ] || continue
        ours "$(basename "$entry")" || return 1
    done
}

# Whether the server whose pid file is in DATA runs. A killed server's pid
# may linger as a zombie (no init reaps it in a container), which pg_ctl
# would wait for in vain.
server_alive() {
    local pid
    [ -f "$1/postmaster.pid" ] || return 1
    pid=$(head -n 1 "$1/postmaster.pid")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

# Stops a cluster of DIR if its server still runs, and removes what it left
# (its private /tmp directory included); DIR itself and its lock stay.
clear_cluster() {
    local dir=$1 bin=$2 cl
    cl=$(cluster_dir "$dir")
    if [ -n "$bin" ] && server_alive "$cl/data"; then
        as_service "$bin/pg_ctl" stop -D "$cl/data" -m fast -t "$WAIT_SECONDS" >&2 ||
            as_service "$bin/pg_ctl" stop -D "$cl/data" -m immediate -t "$WAIT_SECONDS" >&2 ||
            true
    fi
    case "$cl" in
        /tmp/verdict-pg.*) rm -rf -- "$cl" ;;
    esac
    rm -rf -- "$dir/url" "$dir/admin_url" "$dir/ca.crt" "$dir/ca.crt.tmp" "$dir/url.tmp" "$dir/admin_url.tmp" "$dir/cluster" "$dir/data" "$dir/log" "$dir/pwfile" "$dir/users" "$dir"/.s.PGSQL.*
}

# Takes the lock on DIR/.lock (fd 9). A `stop` may remove DIR while we wait,
# so the lock counts only if it is still the file at DIR/.lock.
lock() {
    local dir=$1 deadline=$((SECONDS + LOCK_SECONDS))
    while :; do
        mkdir -p -- "$dir"
        exec 9>>"$dir/.lock"
        flock -w "$LOCK_SECONDS" 9 || die "$dir/.lock: still locked after ${LOCK_SECONDS}s"
        if [ "$dir/.lock" -ef /dev/fd/9 ]; then
            return
        fi
        exec 9>&-
        [ "$SECONDS" -lt "$deadline" ] || die "$dir: removed again and again while waiting for its lock"
    done
}

write_private() {
    local file=$1 text=$2
    (
        umask 077
        printf '%s\n' "$text" >"$file.tmp"
    )
    mv -f -- "$file.tmp" "$file"
}

cmd_start() {
    local dir=${1:-}
    if [ -z "$dir" ]; then
        dir=$(mktemp -d)
    fi
    dir=$(realpath -m -- "$dir")

    # Checked before the lock too, which would leave DIR/.lock behind.
    if [ -d "$dir" ] && ! only_ours "$dir"; then
        die "$dir holds files of its own; give an empty or new directory"
    fi
    # Under the lock, so that concurrent starts install once.
    lock "$dir"
    local bin
    bin=$(pg_bin_dir)
    if [ -z "$bin" ]; then
        install_postgres
        bin=$(pg_bin_dir)
        [ -n "$bin" ] || {
            echo "$PROG: installed postgresql, but there is still no /usr/lib/postgresql/*/bin/initdb" >&2
            exit 3
        }
    fi
    ensure_service_user

    if running "$dir" "$bin"; then
        log "already running in $dir"
        cat "$dir/url"
        return 0
    fi
    # Something of ours but not running (a reboot, a killed server): start
    # over, it is throwaway. Anything else in DIR is not ours to delete.
    only_ours "$dir" || die "$dir holds files of its own; give an empty or new directory"
    clear_cluster "$dir" "$bin"

    # Where the data and socket go: DIR, unless the server's user cannot
    # reach it or the socket path would be too long.
    local cl=$dir
    local socket_path="$dir/.s.PGSQL.65535"
    if [ "${#socket_path}" -gt "$MAX_SOCKET_PATH" ] ||
        { am_root && ! runuser -u "$SERVICE_USER" -- test -x "$(dirname "$dir")"; }; then
        cl=$(mktemp -d /tmp/verdict-pg.XXXXXX)
        echo "$cl" >"$dir/cluster"
        log "$dir is not usable for the server's files; they go to $cl"
    fi
    chmod 700 "$cl"
    if am_root; then
        chown "$SERVICE_USER:" "$cl"
    fi

    local admin_pw user_pw
    admin_pw=$(random_hex)
    user_pw=$(random_hex)
    (
        umask 077
        printf '%s\n' "$admin_pw" >"$cl/pwfile"
    )
    if am_root; then
        chown "$SERVICE_USER:" "$cl/pwfile"
    fi
    log "initdb $cl/data ($("$bin/postgres" --version))"
    if ! as_service "$bin/initdb" -D "$cl/data" --username=postgres --pwfile="$cl/pwfile" \
        --auth=scram-sha-256 --encoding=UTF8 --no-locale >"$cl/log" 2>&1; then
        cat "$cl/log" >&2
        rm -f -- "$cl/pwfile"
        die "initdb failed"
    fi
    rm -f -- "$cl/pwfile"

    local tls=""
    if command -v openssl >/dev/null 2>&1; then
        # A CA and a server certificate for 127.0.0.1 (webpki refuses a CA
        # certificate as the server's own, so there are two).
        if (
            set -e
            umask 077
            cd "$cl/data"
            openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=verdict test CA" \
                -keyout ca.key -out ca.crt >/dev/null 2>&1
            openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
                -keyout server.key -out server.csr >/dev/null 2>&1
            printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >server.ext
            openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
                -extfile server.ext -out server.crt >/dev/null 2>&1
            rm -f ca.key server.csr server.ext ca.srl
        ); then
            if am_root; then
                chown "$SERVICE_USER:" "$cl/data/server.key" "$cl/data/server.crt" "$cl/data/ca.crt"
            fi
            cp "$cl/data/ca.crt" "$dir/ca.crt.tmp" && mv "$dir/ca.crt.tmp" "$dir/ca.crt"
            chmod 644 "$dir/ca.crt"
            tls=$'ssl = on\n'
        else
            log "openssl failed: the server speaks plain only"
        fi
    fi

    local fast=""
    if [ "${PG_FAST:-}" = 1 ]; then
        fast=$'fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n'
        log "PG_FAST=1: fsync, synchronous_commit and full_page_writes are off"
    fi
    # The port is set per attempt in verdict.conf, included last so that it
    # wins over the defaults initdb wrote.
    echo "include 'verdict.conf'" >>"$cl/data/postgresql.conf"

    local port attempt started=""
    for attempt in 1 2 3 4 5; do
        port=$(free_port)
        printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = '%s'\nmax_connections = 200\n%s%s" \
            "$port" "$cl" "$fast" "$tls" >"$cl/data/verdict.conf"
        if am_root; then
            chown "$SERVICE_USER:" "$cl/data/verdict.conf"
        fi
        : >"$cl/log"
        if am_root; then
            chown "$SERVICE_USER:" "$cl/log"
        fi
        if as_service "$bin/pg_ctl" start -D "$cl/data" -l "$cl/log" -w -t "$WAIT_SECONDS" >&2; then
            started=1
            break
        fi
        # Another process may take the port between free_port and the
        # server's bind; then try another.
        if grep -q 'could not bind\|Address already in use' "$cl/log"; then
            log "port $port was taken (attempt $attempt), trying another"
            as_service "$bin/pg_ctl" stop -D "$cl/data" -m immediate >/dev/null 2>&1 || true
            continue
        fi
        break
    done
    if [ -z "$started" ]; then
        cat "$cl/log" >&2
        die "the server did not start"
    fi

    local deadline=$((SECONDS + WAIT_SECONDS))
    until "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -t 1; do
        [ "$SECONDS" -lt "$deadline" ] || {
            cat "$cl/log" >&2
            die "the server does not accept connections after ${WAIT_SECONDS}s"
        }
        sleep 0.2
    done

    # Plain on loopback: `prefer` would try TLS and refuse the throwaway
    # CA that no client trusts unless told to (`ca_file`, `sslrootcert`).
    local admin_url="postgres://postgres:$admin_pw@127.0.0.1:$port/postgres?sslmode=disable"
    local url="postgres://verdict:$user_pw@127.0.0.1:$port/verdict?sslmode=disable"
    "$bin/psql" -X -q -v ON_ERROR_STOP=1 -d "$admin_url" >&2 <<SQL || die "creating the role and database verdict failed"
CREATE ROLE verdict LOGIN PASSWORD '$user_pw';
CREATE DATABASE verdict OWNER verdict;
SQL
    write_private "$dir/admin_url" "$admin_url"
    write_private "$dir/url" "$url"
    log "running in $dir on 127.0.0.1:$port; stop it with: $0 stop $dir"
    if [ "${PG_STOP_WHEN_UNUSED:-}" = 1 ]; then
        : >>"$dir/users"
        # Detached, and without our lock fd, so that it outlives this call
        # and never blocks another start.
        setsid bash "$0" watch "$dir" </dev/null >/dev/null 2>&1 9>&- &
        log "it stops once no process has used it for ${PG_UNUSED_SECONDS:-5}s"
    fi
    echo "$url"
}

# Stops the cluster in DIR once no process holds a shared lock on
# DIR/users for PG_UNUSED_SECONDS, checked every second after a grace. The
# last check is made under DIR's lock, which every `start` takes, and the
# cluster is stopped under it: no start can hand the cluster out between
# the check and the stop (a process takes its shared lock before it asks
# `start` for the URL of a running cluster, and again after).
cmd_watch() {
    local dir=$1 quiet=${PG_UNUSED_SECONDS:-5} free=0
    sleep "${PG_UNUSED_GRACE:-15}"
    while [ -e "$dir/users" ]; do
        if flock -n -x "$dir/users" true; then
            free=$((free + 1))
        else
            free=0
        fi
        if [ "$free" -ge "$quiet" ]; then
            lock "$dir"
            if [ -e "$dir/users" ] && flock -n -x "$dir/users" true; then
                log "no process has used the cluster in $dir for ${quiet}s; stopping it"
                clear_cluster "$dir" "$(pg_bin_dir)"
                rm -rf -- "$dir"
                return 0
            fi
            exec 9>&-
            free=0
        fi
        sleep 1
    done
}

cmd_stop() {
    local dir
    dir=$(realpath -m -- "$1")
    if [ ! -d "$dir" ]; then
        log "$dir does not exist: nothing to stop"
        return 0
    fi
    only_ours "$dir" || die "$dir holds files of its own: not removing it"
    lock "$dir"
    local bin
    bin=$(pg_bin_dir)
    if server_alive "$(cluster_dir "$dir")/data"; then
        log "stopping the cluster in $dir"
    else
        log "no running cluster in $dir"
    fi
    clear_cluster "$dir" "$bin"
    rm -rf -- "$dir"
}

cmd_url() {
    local dir bin
    dir=$(realpath -m -- "$1")
    bin=$(pg_bin_dir)
    if [ -n "$bin" ] && running "$dir" "$bin"; then
        cat "$dir/url"
    else
        log "no running cluster in $dir"
        exit 1
    fi
}

[ "$#" -ge 1 ] || usage
case "$1" in
    start)
        [ "$#" -le 2 ] || usage
        cmd_start "${2:-}"
        ;;
    stop)
        [ "$#" -eq 2 ] || usage
        cmd_stop "$2"
        ;;
    url)
        [ "$#" -eq 2 ] || usage
        cmd_url "$2"
        ;;
    watch)
        [ "$#" -eq 2 ] || usage
        cmd_watch "$2"
        ;;
    *) usage ;;
esac
