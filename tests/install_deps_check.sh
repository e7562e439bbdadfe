#!/usr/bin/env bash
# CTest install_deps: scripts/install-deps.sh with a planted dpkg-query (every package missing)
# and a planted apt-get that prints apt's progress and records what it was asked for. The first
# command of the README (scripts/run-example.sh, through `install-deps.sh --build`) must install
# only what building needs, not the test suite's servers and MPI; any install says in one line
# what it installs and why, with apt's own output in a log file; a failing apt prints the end of
# that log; nothing is installed when nothing is missing.
#   tests/install_deps_check.sh SOURCE_DIR
set -euo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work/bin"
# Every package missing unless MISSING_NONE is set.
cat >"$work/bin/dpkg-query" <<'SH'
#!/bin/sh
[ -n "${MISSING_NONE:-}" ] && { printf 'install ok installed'; exit 0; }
exit 1
SH
cat >"$work/bin/apt-get" <<SH
#!/bin/sh
echo "\$*" >>"$work/apt.calls"
for p in 5 10 15 20; do echo "(Reading database ... \$p%"; done
[ -n "\${APT_FAILS:-}" ] && [ "\$1" = install ] && { echo "E: Unable to locate package libdnnl-dev"; exit 100; }
exit 0
SH
cat >"$work/bin/sudo" <<'SH'
#!/bin/sh
exec "$@"
SH
chmod +x "$work/bin/"*
run() {  # run ARGS... : install-deps.sh's output (stdout and stderr) in $work/out, its status
  rm -f "$work/apt.calls"
  PATH="$work/bin:$PATH" TMPDIR="$work" bash "$source_dir/scripts/install-deps.sh" "$@" \
    >"$work/out" 2>&1
}

# The build's packages only, in one line, with apt's progress in the log.
run --build || { cat "$work/out"; fail "install-deps.sh --build failed"; }
[ "$(wc -l <"$work/out")" -eq 1 ] || { cat "$work/out"; fail "--build printed more than one line"; }
grep -q '^mantissa: installing [0-9]* Debian packages for building mantissa (apt.s output: ' "$work/out" ||
  { cat "$work/out"; fail "--build did not say what it installs and why"; }
installed=$(grep '^install ' "$work/apt.calls")
for p in build-essential cmake ninja-build libspdlog-dev libopenblas-dev libdnnl-dev \
         libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libprotobuf-dev protobuf-compiler; do
  grep -qw -- "$p" <<<"$installed" || fail "--build did not install $p"
done
for p in redis-server openmpi-bin libopenmpi-dev libgtest-dev libbenchmark-dev libgloo-dev \
         libhiredis-dev clang-19; do
  grep -qw -- "$p" <<<"$installed" && fail "--build installed $p, which building does not need"
done
grep -q 'Reading database' "$work"/mantissa-apt-*.log || fail "apt's output is not in the log"

# The test suite's packages as well, by default; clang 19 with --sanitize.
run || { cat "$work/out"; fail "install-deps.sh failed"; }
grep -q 'for the test suite' "$work/out" || { cat "$work/out"; fail "no reason given"; }
for p in redis-server openmpi-bin libgtest-dev libgloo-dev; do
  grep -qw -- "$p" "$work/apt.calls" || fail "the default set lacks $p"
done
run --sanitize || { cat "$work/out"; fail "install-deps.sh --sanitize failed"; }
grep -qw clang-19 "$work/apt.calls" || fail "--sanitize did not install clang-19"

# A failing apt: the end of its log, and a non-zero status.
if APT_FAILS=1 run --build; then fail "a failing apt-get was not reported"; fi
grep -q 'installing packages failed; the end of' "$work/out" && grep -q 'E: Unable to locate' "$work/out" ||
  { cat "$work/out"; fail "a failing apt-get's message was not shown"; }

# Nothing missing: nothing printed, apt not called.
MISSING_NONE=1 run --build || fail "install-deps.sh --build failed with nothing missing"
[ ! -s "$work/out" ] && [ ! -e "$work/apt.calls" ] || fail "something was installed with nothing missing"

# Usage errors exit 2.
set +e
bash "$source_dir/scripts/install-deps.sh" --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown option did not exit 2"
set -e
grep -q 'install-deps.sh" --build' "$source_dir/scripts/run-example.sh" ||
  fail "scripts/run-example.sh does not install the build's packages only"
echo "install-deps: the build's packages only for the first run, one line, apt's output logged"
