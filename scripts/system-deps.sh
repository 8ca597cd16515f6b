#!/usr/bin/env bash
# Install the Debian packages the test suite needs, only when missing:
# chromium (real-browser widget test), postgresql (SQL connector tests),
# libseccomp2 (syscall filter of the sandboxed interpreter), a Java 17+ runtime (Spark connector tests),
# a C/C++ compiler (the real-model test builds llama-cpp-python once: scripts/local-model.sh).
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
ldconfig -p 2>/dev/null | grep 'libseccomp\.so\.2' >/dev/null || need+=(libseccomp2)  # not grep -q: its early exit fails the pipe (pipefail)
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1 || true)
[ "${java_major:-0}" -ge 17 ] 2>/dev/null || need+=(openjdk-17-jre-headless)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing Debian packages: ${need[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
