#!/usr/bin/env bash
# A throwaway PostgreSQL for tests and for trying StarForge on it:
#   start     start it (made on first use) and print its URL
#   stop      stop it; its data and port are kept for the next start
#   restart   stop, then start on the same port with the same data
#   url       print its URL (exit 1 when it is not running)
#   destroy   stop it and delete the cluster, data and all
#
# Debian's `postgresql` package (installed with apt-get when missing); the cluster lives outside
# the repository in ${STARFORGE_PG_DIR:-/var/tmp/starforge-pg}, listens on 127.0.0.1 only, on the
# port it was first given (a free one; a new one only if another program took it meanwhile), and
# trusts loopback connections (it holds test data only). PostgreSQL refuses to run as root, so as
# root the server runs as the `postgres` system user. Every command is idempotent: `start` on a
# running cluster only prints its URL, `stop` on a stopped one does nothing.
set -euo pipefail

PG_DIR="${STARFORGE_PG_DIR:-/var/tmp/starforge-pg}"
DATA="$PG_DIR/data"
PORT_FILE="$PG_DIR/port"
DB_NAME="${STARFORGE_PG_DB:-starforge}"

pg_bin() {
    local dir
    for dir in /usr/lib/postgresql/*/bin; do
        [[ -x "$dir/initdb" ]] && echo "$dir" && return 0
    done
    return 1
}

install_postgres() {
    if pg_bin >/dev/null; then return 0; fi
    echo "==> installing Debian's postgresql" >&2
    if [[ $(id -u) -ne 0 ]]; then
        echo "postgresql is not installed and this is not root: apt-get install postgresql" >&2
        exit 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2
}

# Run a command as the cluster's owner: ourselves, or `postgres` when we are root.
as_owner() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The port of an earlier start when nothing else holds it now, else a free one.
port_to_use() {
    local saved=""
    [[ -f "$PORT_FILE" ]] && saved=$(cat "$PORT_FILE")
    # SO_REUSEADDR, as PostgreSQL binds: the connections a stop cut leave the port in TIME_WAIT,
    # which would refuse a plain bind although PostgreSQL can listen there again.
    if [[ -n "$saved" ]] && python3 -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$saved" 2>/dev/null; then
        echo "$saved"
        return 0
    fi
    [[ -n "$saved" ]] && echo "port $saved is taken now: the cluster moves to another" >&2
    free_port
}

running() {
    [[ -f "$PORT_FILE" ]] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

url() {
    echo "postgresql+psycopg://postgres@127.0.0.1:$(cat "$PORT_FILE")/$DB_NAME"
}

start() {
    install_postgres
    BIN=$(pg_bin)
    if running; then url; return 0; fi
    mkdir -p "$PG_DIR"
    if [[ $(id -u) -eq 0 ]]; then chown postgres: "$PG_DIR"; fi
    if [[ ! -f "$DATA/PG_VERSION" ]]; then
        as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
            >"$PG_DIR/initdb.log" 2>&1 || { cat "$PG_DIR/initdb.log" >&2; exit 1; }
    fi
    local port
    port=$(port_to_use)
    # The socket directory is the cluster's own: /var/run/postgresql may not exist or be ours.
    as_owner "$BIN/pg_ctl" -D "$DATA" -l "$PG_DIR/server.log" -w -t 60 start \
        -o "-h 127.0.0.1 -p $port -k $PG_DIR -c max_connections=400 -c fsync=off \
            -c synchronous_commit=off -c full_page_writes=off" >/dev/null \
        || { tail -20 "$PG_DIR/server.log" >&2; exit 1; }
    echo "$port" >"$PORT_FILE"
    if ! as_owner "$BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'" postgres | grep -q 1; then
        as_owner "$BIN/createdb" -h 127.0.0.1 -p "$port" -U postgres "$DB_NAME"
    fi
    url
}

stop() {
    BIN=$(pg_bin) || return 0
    if [[ -f "$DATA/PG_VERSION" ]]; then
        as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
    fi
}

destroy() {
    stop
    rm -rf "$PG_DIR"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    restart)
        stop
        start
        ;;
    destroy) destroy ;;
    url)
        BIN=$(pg_bin) || { echo "postgresql is not installed" >&2; exit 1; }
        running || { echo "the throwaway PostgreSQL is not running: $0 start" >&2; exit 1; }
        url
        ;;
    *)
        echo "usage: $0 start|stop|restart|url|destroy" >&2
        exit 2
        ;;
esac
