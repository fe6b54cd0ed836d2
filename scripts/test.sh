#!/usr/bin/env bash
# Installs bkeeper with its test extras into the active Python environment, then runs every
# check and test: ruff (lint + format), mypy --strict, import-linter contracts, pytest.
# This is the README's test command; .ci/run calls it inside a fresh virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e '.[test]'
# The dashboard's browser test (tests/dashboard/test_browser.py) drives headless Chromium.
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null; then
    echo "== installing chromium (apt-get)"
    sudo_cmd=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq chromium
fi
# Java BookKeeper's TLS (tests/interop/test_tls_java.py) loads BouncyCastle's provider, which
# ../shared/javabk does not ship (with its PKIX half, for PEM keys). Only where that Java build
# is (the interop tests run); a failed install is not fatal here, but under CI those tests then
# fail saying what is missing (they may not be skipped there).
javabk="${BKEEPER_JAVABK:-../shared/javabk}"
if [ -d "$javabk" ] && [ ! -f /usr/share/java/bcprov.jar ] && command -v apt-get >/dev/null; then
    echo "== installing libbcprov-java libbcpkix-java (apt-get)"
    sudo_cmd=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo_cmd="sudo"
    { $sudo_cmd apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends libbcprov-java libbcpkix-java; } \
      || echo "libbcprov-java not installed: the Java TLS interop tests will fail saying so"
fi
# Bytecode caches: with PYTHONDONTWRITEBYTECODE set (this machine sets it) and no caches
# written, every bookie, CLI and Spark worker process compiled bkeeper from source: 0.3 CPU-s
# of its ~0.6 s start, and pytest re-wrote each test module in every worker. Compiled once
# here, the processes the tests start read the caches (docs/benchmarks.md, "Bookie start-up").
unset PYTHONDONTWRITEBYTECODE
python -m compileall -q -j 0 src tests examples  # silent unless a file does not compile
echo "== ruff (at ${SECONDS} s)"; ruff check src tests examples; ruff format --check src tests examples
echo "== mypy (at ${SECONDS} s)"; mypy
echo "== import-linter (at ${SECONDS} s)"; lint-imports
# Two tiers (tests/tiers.py): the in-process tests first, stopping at the first failure, then
# the integration tests (real ZooKeeper, bookie processes, Spark, Java BookKeeper, Chromium).
# - In-process: four processes stealing tests from each other (`--dist worksteal`). The tier
#   waits more than it computes (threads handing off, journal groups, sleeps of its windows):
#   ~100 CPU-s in 82 s of wall time with two processes taking whole files, 60 s with four
#   (docs/benchmarks.md, "Test tiers").
# - Integration: two processes taking whole test files (module fixtures: a Spark session, a
#   cluster), the slowest files first (tests/suite_order.py, by tests/durations.json, which
#   `bash scripts/test.sh --update-durations` rewrites). It is CPU-bound: four took as long.
# `-n 0` runs each in one. A tier that selects no test (arguments naming files of the other
# tier only) is not a failure.
tier() {
    local code=0
    python -m pytest "$@" || code=$?
    if [ "$code" -eq 5 ]; then code=0; fi  # pytest's "no tests collected"
    return "$code"
}
echo "== pytest: in-process tier (at ${SECONDS} s)"
tier -n 4 --dist worksteal -m "not integration" -x "$@"
echo "== pytest: integration tier (at ${SECONDS} s)"
tier -n 2 --dist loadfile -m integration "$@"
