#!/usr/bin/env bash
# Prepare this machine for `make test` and `make demo`: Debian packages, the .venv with the
# pinned Python tools, and the offline pip bootstrap ansible-test expects. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the rollout page's browser test; openjdk-17-jre-headless: ansible-rulebook's rules
# engine (Drools) runs on Java 17; prometheus (promtool) and prometheus-alertmanager: the alert rules'
# tests and the alert path's (their services are not started: the tests run their own, on loopback)
DEBIAN_PACKAGES=(debootstrap systemd-container zstd openssh-client iproute2 curl rsync shellcheck chromium openjdk-17-jre-headless
  prometheus prometheus-alertmanager)
VENV=.venv
STAMP="$VENV/.requirements.sha256"

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages (${missing[*]}); run as root or install them" >&2
    exit 1
  fi
  echo "setup: installing Debian packages: ${missing[*]}"
  apt-get update -q
  # --no-install-recommends keeps libnss-mymachines (and its nsswitch.conf edit) off the machine
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Every test host's systemd takes about ten inotify instances; the fleets that `make test` runs side
# by side need more than the kernel's default of 128 per user.
INOTIFY_INSTANCES=/proc/sys/fs/inotify/max_user_instances
if [ "$(id -u)" -eq 0 ] && [ -w "$INOTIFY_INSTANCES" ] && [ "$(cat "$INOTIFY_INSTANCES")" -lt 1024 ]; then
  echo "setup: fs.inotify.max_user_instances $(cat "$INOTIFY_INSTANCES") -> 1024 (test fleets side by side)"
  echo 1024 > "$INOTIFY_INSTANCES"
fi

want=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating $VENV with the pinned tools"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r requirements-dev.txt
  echo "$want" > "$STAMP"
fi

# ansible-test downloads a pip bootstrap script; offline, a stand-in that uses ensurepip works.
GET_PIP="$HOME/.ansible/test/cache/get_pip_24_2.py"
if [ ! -f "$GET_PIP" ]; then
  mkdir -p "$(dirname "$GET_PIP")"
  cat > "$GET_PIP" <<'PY'
"""Offline stand-in for get-pip.py: ensurepip, then pip install with the given arguments."""
import subprocess
import sys

subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade"], check=True)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
if args:
    subprocess.run([sys.executable, "-m", "pip", "install", *args], check=True)
PY
fi
