#!/usr/bin/env bash
# LeakSanitizer run of one short training (with a resume, a NaN-skipped step and a validation set)
# and one decode (greedy and beam), on the tiny toy task, with an ASan build of the apps.
#
#   tools/leak_check.sh [BUILD_DIR]     default build-asan (configured with -Db_sanitize=address[,undefined]
#                                        and -Dapps=true, as .ci/run does)
#
# Fails (exit 1) on any leak, ASan or UBSan report, or a non-zero exit of the commands.
set -euo pipefail
cd "$(dirname "$0")/.."
bdir=${1:-build-asan}
tr="$bdir/apps/translate"
trf="$bdir/apps/translate_with_faults"  # translate with a NaN injector (TAPEGRAD_TEST_INJECT_NAN)
ninja -C "$bdir" apps/translate apps/translate_with_faults >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 200 pairs of a reversal task.
awk 'BEGIN { srand(5); split("a b c d e f g h", L, " ");
  for (i = 0; i < 200; i++) { x = L[int(rand() * 8) + 1]; y = L[int(rand() * 8) + 1]; z = L[int(rand() * 8) + 1];
    printf "%s %s %s\t%s %s %s\n", x, y, z, z, y, x } }' >"$tmp/train.tsv"
head -20 "$tmp/train.tsv" >"$tmp/valid.tsv"

export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:exitcode=23
export LSAN_OPTIONS=exitcode=23
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export OMP_NUM_THREADS=2
model="--d-model 16 --heads 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --batch-size 16 --warmup 5"
run() {
  echo "+ $*"
  local rc=0
  "$@" >"$tmp/out.txt" 2>"$tmp/err.txt" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "leak_check.sh: FAILED (exit $rc; 23 = a sanitizer report): $*"
    cat "$tmp/err.txt"
    exit 1
  fi
  if grep -qE "Sanitizer|runtime error:" "$tmp/err.txt"; then
    echo "leak_check.sh: sanitizer report from: $*"
    cat "$tmp/err.txt"
    exit 1
  fi
}
run "$tr" train --data "$tmp/train.tsv" --valid "$tmp/valid.tsv" --out "$tmp/m.safetensors" $model \
  --steps 12 --eval-every 6 --log-every 4
TAPEGRAD_TEST_INJECT_NAN=16 run "$trf" train --data "$tmp/train.tsv" --valid "$tmp/valid.tsv" \
  --out "$tmp/m.safetensors" --steps 20 --resume --on-nan skip
grep -q "1 skipped so far" "$tmp/err.txt" || { echo "leak_check.sh: the injected NaN step was not skipped"; exit 1; }
printf 'a b c\nh g f\n\nd d e\n' >"$tmp/src.txt"
run sh -c "'$tr' decode --model '$tmp/m.safetensors' <'$tmp/src.txt'"
run sh -c "'$tr' decode --model '$tmp/m.safetensors' --beam 3 --json <'$tmp/src.txt'"
run "$tr" eval --model "$tmp/m.safetensors" --data "$tmp/valid.tsv" --bleu
echo "leak_check.sh: no leaks or sanitizer reports (train, resume, decode, eval)"
