#!/usr/bin/env bash
# Installs Debian's chromium for the console's browser test (Playwright only ships the driver;
# the test drives /usr/bin/chromium). Idempotent: with chromium there, it only checks. Without a
# way to install it, it stops with what to do rather than let the browser test be skipped.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
[[ -x "$CHROMIUM" ]] && exit 0

if [[ $(id -u) -eq 0 ]]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    as_root=(missing)
fi
if [[ ${as_root[0]:-} == missing ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "error: the console's browser test needs $CHROMIUM (Debian's chromium package)" >&2
    echo "hint: install it (sudo apt-get install chromium), then rerun" >&2
    exit 1
fi
echo "==> installing chromium (Debian package) for the console's browser test"
"${as_root[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq chromium >/dev/null
