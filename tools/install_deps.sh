#!/usr/bin/env bash
# Installs the Debian packages tapegrad needs, only those missing. Idempotent; run as root (or with sudo).
#   tools/install_deps.sh            build + test dependencies (+ python3-torch for the PyTorch parity tests,
#                                    python3-sentencepiece for the SentencePiece id parity test,
#                                    graphviz for attention_walkthrough's drawn tape, librsvg2-bin: the
#                                    render tests look at every SVG the programs draw with rsvg-convert)
#   tools/install_deps.sh --ci       also the aarch64 cross compiler + qemu (NEON tests), clang (fuzzers),
#                                    OpenBLAS, Open MPI, python3-venv (tools/setup_hf.sh: the Hugging
#                                    Face venv of the GPT-2 tokenizer parity tests) and chromium (the
#                                    render test of the walkthrough page: a headless screenshot; the
#                                    largest package here)
#   tools/install_deps.sh --bench    also OpenBLAS (kernel benchmark reference), python3-venv
#                                    (tools/setup_torch2.sh: the PyTorch 2.x venv for the bf16 comparison)
#                                    and simdjson (the JSON comparison of bench_load --compare-json)
#   tools/install_deps.sh --mpi      also Open MPI (data-parallel training: mpirun; meson finds it and
#                                    builds with MPI, or reconfigure with -Dmpi=enabled)
set -euo pipefail

pkgs=(g++ meson ninja-build pkg-config cmake libxsimd-dev doctest-dev libfmt-dev libcli11-dev nlohmann-json3-dev
      libsentencepiece-dev libpcre2-dev python3-numpy python3-torch python3-sentencepiece graphviz librsvg2-bin)
for arg in "$@"; do
  case "$arg" in
    --ci) pkgs+=(g++-aarch64-linux-gnu qemu-user clang-14 libclang-rt-14-dev libopenblas-dev
          openmpi-bin libopenmpi-dev python3-venv chromium) ;;
    --bench) pkgs+=(libopenblas-dev python3-venv libsimdjson-dev) ;;
    --mpi) pkgs+=(openmpi-bin libopenmpi-dev) ;;
    *) echo "install_deps.sh: unknown option $arg (expected --ci, --bench or --mpi)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
