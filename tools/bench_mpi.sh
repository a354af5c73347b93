#!/usr/bin/env bash
# Data-parallel scaling on this machine, and a projection to a 10 GbE cluster.
# bench/bench_mpi (config M by default) as: 1 rank x 1 thread, 2 ranks x 1 thread, 2 ranks over
# TCP loopback instead of shared memory (the network stack's cost per allreduce), and with
# --with-threads 1 rank x 2 threads (the same two cores used by kernel threads instead of ranks;
# slow to measure on a busy machine, where spinning OpenMP threads suffer); and a control: two
# independent 1-rank runs at once, one per core, no MPI: their summed tokens/s is the ceiling any
# 2-rank run can reach on this machine as loaded right now;
# each setting --repeats times (default 3), medians of the runs' medians, then a markdown table
# with the allreduce time and bytes per step, and the projection.
#
#   tools/bench_mpi.sh                    # config M, 3 repeats: ~5-10 min on an idle 2-core machine
#   tools/bench_mpi.sh --quick            # config S, 1 repeat, few steps: a smoke test
#   tools/bench_mpi.sh --config M --repeats 5 --steps 7 --with-threads
#   BUILD=build tools/bench_mpi.sh        # build directory (default: build, configured with MPI)
#
# Projection (printed, per-node batch fixed at the config's batch, one rank per node): a step takes
# the measured 1-rank compute time plus a ring allreduce of the measured bytes,
#   t_allreduce(N) = 2 (N-1)/N * bytes / B  +  2 (N-1) * buckets * latency
# with B = 1.1 GB/s (10 Gb/s less TCP/IP overhead) and latency 50 us per message, no overlap with
# the backward pass. Raw JSON lines go to $BUILD/bench_mpi.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
config=M repeats=3 steps="" warmup="" threads_row=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) config=S repeats=1 steps=3 warmup=1 ;;
    --config) config=${2:?}; shift ;;
    --repeats) repeats=${2:?}; shift ;;
    --steps) steps=${2:?}; shift ;;
    --with-threads) threads_row=1 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_mpi.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
bin=$BUILD/bench/bench_mpi
[ -x "$bin" ] || { echo "bench_mpi.sh: $bin not built (ninja -C $BUILD bench/bench_mpi)" >&2; exit 1; }
command -v mpirun > /dev/null || { echo "bench_mpi.sh: mpirun not found (tools/install_deps.sh --mpi)" >&2; exit 1; }
args=(--config "$config" --json)
[ -z "$steps" ] || args+=(--steps "$steps")
[ -z "$warmup" ] || args+=(--warmup "$warmup")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
out=$BUILD/bench_mpi.jsonl
: > "$out"
for r in $(seq "$repeats"); do
  echo "== repeat $r/$repeats" >&2
  OMP_NUM_THREADS=1 "$bin" "${args[@]}" --threads 1 | tee /dev/stderr | tail -1 >> "$out"
  OMP_NUM_THREADS=1 mpirun -np 2 --bind-to core "$bin" "${args[@]}" --threads 1 | tee /dev/stderr | tail -1 >> "$out"
  # Control: two independent processes, one per core, no communication.
  for core in 0 1; do
    OMP_NUM_THREADS=1 taskset -c $core "$bin" "${args[@]}" --threads 1 | tail -1 | sed 's/^{/{"control": '$core', /' \
      > "$out.$core" &
  done
  wait
  cat "$out.0" "$out.1" | tee /dev/stderr >> "$out"; rm -f "$out.0" "$out.1"
  [ $threads_row = 0 ] || OMP_NUM_THREADS=2 "$bin" "${args[@]}" --threads 2 | tee /dev/stderr | tail -1 >> "$out"
  # The same 2 ranks talking over TCP (loopback) instead of shared memory: the network stack's cost.
  OMP_NUM_THREADS=1 OMPI_MCA_btl=self,tcp mpirun -np 2 --bind-to core "$bin" "${args[@]}" --threads 1 \
    | tee /dev/stderr | tail -1 | sed 's/^{/{"btl": "tcp", /' >> "$out"
done

"$PYTHON" - "$out" "$config" "$repeats" <<'PY'
import json, statistics, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
config, repeats = sys.argv[2], int(sys.argv[3])
control = [r for r in rows if "control" in r]
rows = [r for r in rows if "control" not in r]
def med(key, ranks, threads, btl="vader"):
    v = [r[key] for r in rows if r["ranks"] == ranks and r["threads"] == threads and r.get("btl", "vader") == btl]
    return statistics.median(v) if v else float("nan")
base = med("tokens_per_s", 1, 1)
print(f"\nconfig {config}, global batch {rows[0]['global_batch']} ({rows[0]['tokens_per_step']} target tokens/step), "
      f"{rows[0]['parameters']} parameters; medians of {repeats} runs; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n")
print("| setting | ms/step | tokens/s | speed-up | allreduce ms/step (incl. wait) | transfer alone ms | bytes/step |")
print("|---|---:|---:|---:|---:|---:|---:|")
for ranks, threads, btl in [(1, 1, "vader"), (2, 1, "vader"), (1, 2, "vader"), (2, 1, "tcp")]:
    b = [r for r in rows if r["ranks"] == ranks and r["threads"] == threads and r.get("btl", "vader") == btl]
    if not b: continue
    tok = med("tokens_per_s", ranks, threads, btl)
    comm = f"{med('allreduce_ms', ranks, threads, btl):.1f}" if ranks > 1 else "-"
    pure = f"{med('pure_allreduce_ms', ranks, threads, btl):.1f}" if ranks > 1 else "-"
    mb = f"{b[0]['bytes_per_step'] / 1e6:.1f} MB" if ranks > 1 else "-"
    how = " (shared memory)" if ranks > 1 and btl == "vader" else " (TCP loopback)" if btl == "tcp" else ""
    print(f"| {ranks} rank{'s' if ranks > 1 else ''} x {threads} thread{'s' if threads > 1 else ''}{how} | "
          f"{med('ms_per_step', ranks, threads, btl):.0f} | {tok:.0f} | {tok / base:.2f}x | {comm} | {pure} | {mb} |")
if control:
    # per repeat: the two concurrent runs' tokens/s summed; then the median over repeats
    sums = [a["tokens_per_s"] + b["tokens_per_s"] for a, b in zip(control[0::2], control[1::2])]
    ms = statistics.median(r["ms_per_step"] for r in control)
    tok = statistics.median(sums)
    print(f"| control: 2 independent 1-rank runs at once (no MPI), summed | {ms:.0f} each | {tok:.0f} | "
          f"{tok / base:.2f}x | - | - | - |")

two = [r for r in rows if r["ranks"] == 2 and r.get("btl", "vader") == "vader"]
if two:
    nbytes, buckets = two[0]["bytes_per_step"], two[0]["allreduce_calls"]
    t_c = med("ms_per_step", 1, 1) / 1e3
    bw, lat = 1.1e9, 50e-6
    print(f"\n10 GbE projection: one rank x 1 thread per node, batch {rows[0]['global_batch']} per node, "
          f"{nbytes / 1e6:.1f} MB in {buckets} buckets per step, compute {t_c * 1e3:.0f} ms/step "
          f"(measured above), ring allreduce at {bw / 1e9:.1f} GB/s + {lat * 1e6:.0f} us/message, no overlap\n")
    print("| nodes | allreduce ms | step ms | tokens/s | efficiency |")
    print("|---:|---:|---:|---:|---:|")
    for n in [1, 2, 4, 8, 16, 32]:
        t_ar = 0 if n == 1 else 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * buckets * lat
        step = t_c + t_ar
        print(f"| {n} | {t_ar * 1e3:.0f} | {step * 1e3:.0f} | {n * rows[0]['tokens_per_step'] / step:.0f} | "
              f"{t_c / step * 100:.0f}% |")
PY
