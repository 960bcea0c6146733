#!/usr/bin/env bash
# The test command (README, and CI through .ci/run): prepares a fresh Debian/Ubuntu machine
# that has Rust, then runs every test.
#
# - Installs what the integration tests start for real: redis-server and redis-cli (packages
#   redis-server and redis-tools), with apt-get, when redis-server or redis-cli is missing.
#   `apt-get update` runs at most once. Root or passwordless sudo is needed only to install.
# - Installs openssl (package openssl) when missing: the TLS tests make their certificates
#   with it.
# - Installs Prometheus (package prometheus, which ships prometheus and promtool) when either is
#   missing: tests/observability.rs runs the shipped dashboard queries and alerting rules on a
#   real Prometheus (a local process on a loopback port; the package's service is not used).
# - Installs Node.js and npm (packages nodejs and npm) when missing, then the node-redis and
#   ioredis clients the node tests run, exactly as locked in tests/node/package-lock.json (npm ci).
# - Installs python3 (with pip and venv) the same way when missing, and the Python client
#   tests' packages (tests/python/requirements.txt) into the virtualenv .venv-tests, among them
#   kubernetes-validate, the schema validator tests/deploy_kubernetes.rs runs on deploy/kubernetes.
# - Then runs `cargo test --all-targets` (extra arguments are passed on to it).
#
# The tests start their own servers on free loopback ports and kill them when they finish;
# nothing listens on the default Redis port, and no system service is used.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

apt_updated=no

# apt_install PACKAGE...: installs packages non-interactively, updating the index first (once).
apt_install() {
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
  fi
  if [ "$apt_updated" = no ]; then
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    apt_updated=yes
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  apt_install redis-server redis-tools
fi

redis-server --version

# tests/tls.rs makes a throwaway CA and certificates with the openssl CLI, which slim Debian
# images do not carry.
if ! command -v openssl >/dev/null 2>&1; then
  apt_install openssl
fi
openssl version

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  apt_install prometheus
fi
promtool --version 2>&1 | sed -n 1p

# The node tests run node-redis and ioredis (tests/node): Node.js, npm and its locked packages.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_install nodejs npm
fi
node --version
npm ci --prefix tests/node --no-audit --no-fund
# tests/python_clients.rs runs redis-py (tests/python) through the proxy. Debian's system Python
# refuses `pip install` (PEP 668), so the packages go into a git-ignored virtualenv, and the test
# uses its interpreter through SLOTBRIDGE_PYTHON. Without python3-venv, `python3 -m venv` fails.
if ! command -v python3 >/dev/null 2>&1 || ! python3 -m venv --help >/dev/null 2>&1 \
  || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  apt_install python3 python3-pip python3-venv
fi
if [ ! -x .venv-tests/bin/python ] || ! .venv-tests/bin/python -m pip --version >/dev/null 2>&1; then
  rm -rf .venv-tests
  python3 -m venv .venv-tests
fi
.venv-tests/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt
export SLOTBRIDGE_PYTHON="$PWD/.venv-tests/bin/python"
"$SLOTBRIDGE_PYTHON" -c 'import redis, pytest; print("redis-py", redis.__version__, "pytest", pytest.__version__)'
"$SLOTBRIDGE_PYTHON" -m kubernetes_validate --version

cargo test --all-targets "$@"
