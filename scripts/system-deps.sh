#!/usr/bin/env bash
# Install the Debian packages the test suite needs, only when missing:
# chromium (real-browser widget test), postgresql (SQL connector tests),
# libseccomp2 (syscall filter of the sandboxed interpreter).
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || need+=(libseccomp2)
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing Debian packages: ${need[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
