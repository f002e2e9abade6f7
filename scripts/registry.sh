#!/usr/bin/env bash
# A local OCI registry for tests and for trying images: `start`, `stop`, `url`, `status`.
#
# Debian's `docker-registry` package (distribution 2.8; installed with apt-get when missing),
# listening on 127.0.0.1 only, on a free port, without auth (it holds test images only). Its state
# (config, blobs, pid, port) lives outside the repository in
# ${STARFORGE_REGISTRY_DIR:-/var/tmp/starforge-registry}. `url` prints `127.0.0.1:PORT` (the form
# image references use; speak plain HTTP to it). Every command is idempotent: `start` on a running
# registry only prints its address, `stop` on a stopped one does nothing.
set -euo pipefail

REG_DIR="${STARFORGE_REGISTRY_DIR:-/var/tmp/starforge-registry}"
PORT_FILE="$REG_DIR/port"
PID_FILE="$REG_DIR/pid"

install_registry() {
    if command -v docker-registry >/dev/null; then return 0; fi
    echo "==> installing Debian's docker-registry" >&2
    if [[ $(id -u) -ne 0 ]]; then
        echo "docker-registry is not installed and this is not root: apt-get install docker-registry" >&2
        exit 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-registry >&2
    # The package starts a system registry on [::]:5000 with htpasswd auth: not ours, stop it.
    if command -v systemctl >/dev/null && systemctl is-active --quiet docker-registry 2>/dev/null; then
        systemctl stop docker-registry || true
    fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

running() {
    [[ -f "$PID_FILE" && -f "$PORT_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null
}

url() {
    running || { echo "the registry is not running (scripts/registry.sh start)" >&2; exit 1; }
    echo "127.0.0.1:$(cat "$PORT_FILE")"
}

start() {
    install_registry
    if running; then url; return 0; fi
    mkdir -p "$REG_DIR/data"
    local port
    port=$(free_port)
    cat >"$REG_DIR/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $REG_DIR/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
YAML
    nohup docker-registry serve "$REG_DIR/config.yml" >"$REG_DIR/registry.log" 2>&1 &
    echo $! >"$PID_FILE"
    echo "$port" >"$PORT_FILE"
    # Ready when /v2/ answers (a registry that fails to start leaves its reason in the log).
    for _ in $(seq 1 100); do
        if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/v2/', timeout=1)" \
            2>/dev/null; then
            url
            return 0
        fi
        if ! running; then break; fi
        sleep 0.1
    done
    echo "the registry did not start; its log:" >&2
    cat "$REG_DIR/registry.log" >&2
    stop
    exit 1
}

stop() {
    if [[ -f "$PID_FILE" ]]; then
        kill "$(cat "$PID_FILE")" 2>/dev/null || true
        rm -f "$PID_FILE" "$PORT_FILE"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    url) url ;;
    status) url >/dev/null ;;
    *) echo "usage: $0 start|stop|url|status" >&2; exit 2 ;;
esac
