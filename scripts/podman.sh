#!/usr/bin/env bash
# Podman for tests and for running jobs inside their image: `install`, `check`.
#
# `install` puts Debian's podman, runc and busybox-static on the machine when podman is missing,
# and writes /etc/containers/containers.conf (only when there is none) with the two settings this
# kind of machine needs: runc (crun refuses a cgroup v1+v2 hybrid) and ulimits no higher than the
# hard limits a process here may set (podman asks for nofile=1048576 by default, which fails
# without CAP_SYS_RESOURCE). The runner passes its own --runtime/--ulimit flags anyway; the file
# makes a bare `podman run` work too. `check` runs a trivial container from a 2 MB busybox image
# imported on the spot. Both are idempotent.
set -euo pipefail

CONF=/etc/containers/containers.conf

install_podman() {
    if ! command -v podman >/dev/null || ! command -v runc >/dev/null \
        || [[ ! -x /bin/busybox ]]; then
        echo "==> installing Debian's podman, runc and busybox-static" >&2
        if [[ $(id -u) -ne 0 ]]; then
            echo "podman is not installed and this is not root:" \
                "apt-get install podman runc busybox-static" >&2
            exit 1
        fi
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q podman runc busybox-static >&2 \
            || { apt-get update -q >&2 && apt-get install -y -q podman runc busybox-static >&2; }
    fi
    if [[ ! -e $CONF && $(id -u) -eq 0 ]]; then
        local nofile nproc
        nofile=$(ulimit -Hn)
        nproc=$(ulimit -Hu)
        [[ $nofile == unlimited || $nofile -gt 1048576 ]] && nofile=1048576
        [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
        mkdir -p "$(dirname "$CONF")"
        cat >"$CONF" <<CONFEOF
# Written by StarForge's scripts/podman.sh: limits this machine may set, and runc
# (crun refuses a cgroup v1+v2 hybrid).
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
runtime = "runc"
CONFEOF
        echo "==> wrote $CONF" >&2
    fi
}

check_podman() {
    local root image=localhost/starforge-check:1
    if ! podman image exists "$image"; then
        root=$(mktemp -d)
        mkdir -p "$root"/{bin,tmp,etc,proc,sys,dev}
        cp /bin/busybox "$root/bin/" && ln -s busybox "$root/bin/sh" && chmod 1777 "$root/tmp"
        tar -C "$root" -c . | podman import - "$image" >/dev/null
        rm -rf "$root"
    fi
    podman run --rm --runtime runc "$image" /bin/busybox echo "podman works"
}

case "${1:-}" in
install) install_podman ;;
check) check_podman ;;
*)
    echo "usage: scripts/podman.sh install|check" >&2
    exit 2
    ;;
esac
