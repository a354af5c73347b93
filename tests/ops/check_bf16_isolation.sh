#!/usr/bin/env bash
# Checks that bf16 instructions exist only in the bf16 TUs (ops/arch_*_bf16.cpp) and that those TUs
# share no function with the rest of the build: a CPU without the bf16 extension (an AVX-512
# Skylake-X, an Arm core without FEAT_BF16) must never run one, and the dispatcher only guards the
# entry points, so a weak (ODR-merged) symbol compiled with the bf16 flags could slip one in.
#   check_bf16_isolation.sh OBJDUMP NM AR LIBRARY   (meson passes the ops library, a thin archive)
set -euo pipefail
objdump=$1 nm=$2 ar=$3 lib=$4
mapfile -t objects < <("$ar" t "$lib")
set -- "${objects[@]}"
pattern='\b(vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16|bfmmla|bfdot|bfmlal[bt]|bfcvtn2?|bfcvt|tdpbf16ps|tileloadd|tilestored|tilezero|ldtilecfg)\b'
status=0
seen_bf16_tu=0
for obj in "$@"; do
  name=$(basename "$obj")
  count=$("$objdump" -d --no-show-raw-insn "$obj" | grep -cE "$pattern" || true)
  case "$name" in
    arch_*_bf16.cpp.o)
      seen_bf16_tu=1
      if [ "$count" -eq 0 ]; then echo "FAIL: $name has no bf16 instruction (flags missing?)"; status=1; fi
      # global symbols: only the entry points (names with bf16); no weak ones (W, V, u) but the
      # exception-personality reference every C++ object carries
      bad=$("$nm" -C --defined-only -g "$obj" | grep -vE ' DW\.ref\.__gxx_personality_v0$' |
            awk '$2 ~ /^[WVu]$/ || $0 !~ /bf16|Bf16/' || true)
      if [ -n "$bad" ]; then echo "FAIL: $name exports more than its entry points:"; echo "$bad"; status=1; fi
      echo "ok: $name: $count bf16 instructions, exports only its entry points"
      ;;
    *)
      if [ "$count" -ne 0 ]; then echo "FAIL: $name has $count bf16 instructions"; status=1; fi
      ;;
  esac
done
[ "$seen_bf16_tu" -eq 1 ] || { echo "FAIL: no arch_*_bf16.cpp.o among the objects"; status=1; }
[ "$status" -eq 0 ] && echo "ok: no other object of the $# has a bf16 instruction"
exit "$status"
