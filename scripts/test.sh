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
# - Downloads redis-py 5.0.8's source distribution (pinned by SHA-256) for its own test suite,
#   which tests/redis_py_suite.rs runs through the proxy, into .redis-py-suite, and installs that
#   release and pytest (tests/python/redis_py_suite_requirements.txt) into .venv-redis-py-suite.
# - Raises the open files limit to its hard limit (a fleet test holds 5,000 connections and the
#   proxy as many), then runs `cargo test --all-targets` (extra arguments are passed on to it).
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

# tests/redis_py_suite.rs runs redis-py's own test suite, release 5.0.8: the tests/ directory of
# its source distribution, checked against the SHA-256 below and unpacked into .redis-py-suite.
# Its virtualenv .venv-redis-py-suite holds that release (the client tests' one holds another)
# and pytest. Nothing is downloaded or installed again once both are in place.
redis_py_suite=.redis-py-suite/redis-5.0.8
redis_py_suite_sdist=.redis-py-suite/redis-5.0.8.tar.gz
redis_py_suite_sha256=0c5b10d387568dfe0698c6fad6615750c24170e548ca2deac10c649d463e9870
if [ ! -x .venv-redis-py-suite/bin/python ] \
  || ! .venv-redis-py-suite/bin/python -m pip --version >/dev/null 2>&1; then
  rm -rf .venv-redis-py-suite
  python3 -m venv .venv-redis-py-suite
fi
if [ ! -f "$redis_py_suite/tests/conftest.py" ]; then
  rm -rf .redis-py-suite
  .venv-redis-py-suite/bin/python -m pip download -q --disable-pip-version-check --no-deps \
    --no-binary :all: -d .redis-py-suite redis==5.0.8
  echo "$redis_py_suite_sha256  $redis_py_suite_sdist" | sha256sum -c --quiet -
  tar xzf "$redis_py_suite_sdist" -C .redis-py-suite
fi
if ! .venv-redis-py-suite/bin/python -c 'import importlib.metadata as m, sys
sys.exit(m.version("redis") != "5.0.8" or m.version("pytest") != "8.3.5")' >/dev/null 2>&1; then
  echo "$redis_py_suite_sha256  $redis_py_suite_sdist" | sha256sum -c --quiet -
  .venv-redis-py-suite/bin/python -m pip install -q --disable-pip-version-check --no-deps \
    "$redis_py_suite_sdist"
  .venv-redis-py-suite/bin/python -m pip install -q --disable-pip-version-check \
    -r tests/python/redis_py_suite_requirements.txt
fi
(cd "$redis_py_suite" && ../../.venv-redis-py-suite/bin/python -c \
  'import redis, pytest; print("redis-py suite", redis.__version__, "pytest", pytest.__version__)')

# A fresh checkout gains nothing from incremental state but its disk (gigabytes over 63 test
# binaries); a developer who reruns this can set CARGO_INCREMENTAL=1.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
cargo test --all-targets "$@"
