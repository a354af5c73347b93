# Sourced by the benchmark scripts (tools/bench_train.sh, tools/bench_lm.sh): bench_run and bench_setup.
#
# bench_run NAME OUT CMD...: runs CMD, showing its output as it comes, and appends its last JSON line
# to OUT. No JSON line is a failure (NAME: FAILED, exit 1); a non-zero exit with one is not
# (bench_train's time-to-accuracy exits 1 when 99% is not reached: still a result).
bench_run() {
  local name=$1 out=$2 tmp status
  shift 2
  echo "+ $*" >&2
  tmp=$(mktemp)
  set +e
  "$@" | tee "$tmp" | grep --line-buffered -v '^{' >&2
  status=${PIPESTATUS[0]}
  set -e
  if ! grep -q '^{' "$tmp"; then
    rm -f "$tmp"
    echo "$name: FAILED (exit $status, no result): $*" >&2
    exit 1
  fi
  grep '^{' "$tmp" | tail -n 1 >> "$out"
  rm -f "$tmp"
}

# bench_setup NAME TARGET: configures $BUILD (release) if it is not yet, builds TARGET (e.g.
# bench/bench_lm) and starts NAME's results file: out=$BUILD/NAME.jsonl, emptied. Then
# run CMD... is bench_run NAME.sh "$out" CMD...
bench_setup() {
  bench_name=$1
  [ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release
  ninja -C "$BUILD" "$2" >&2
  out="$BUILD/$bench_name.jsonl"
  : > "$out"
}
run() { bench_run "$bench_name.sh" "$out" "$@"; }
