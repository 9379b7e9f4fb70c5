#!/usr/bin/env bash
# Install Debian's chromium for the report's browser test, when it is missing and we can.
# Without it the browser test skips; everything else runs.
set -u
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-chromium: no apt-get here; the browser test will be skipped" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "install-chromium: not root; the browser test will be skipped" >&2
    exit 0
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null 2>&1 || true
$SUDO apt-get install -y -qq chromium >/dev/null 2>&1 \
  || echo "install-chromium: apt-get install chromium failed; the browser test will be skipped" >&2
exit 0
