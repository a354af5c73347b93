#!/usr/bin/env python3
"""Checks that every test case that must run on this machine ran and passed.

  tools/check_test_results.py BUILD_DIR [--results DIR] [--archs LIST] [--report-only] [--left-out GLOB]

The test binaries write one JSON line per test case (passed, failed or skipped, with the reason)
into $TAPEGRAD_TEST_RESULTS (tests/test_main.cpp); tools/test.sh points it at BUILD_DIR/test-results,
emptied before each run. This lists every case of every doctest binary `meson test` runs in
BUILD_DIR (`meson introspect --tests`, then `<binary> --list-test-cases`) and fails (exit 1) when

  - a case failed;
  - a case has no result: no meson test ran it (a filter left it out, a binary did not run);
  - a case was skipped or left out, unless it is a kernel case "<kernel>.<arch>.<what>" for an
    arch this machine lacks: by default the archs /proc/cpuinfo reports, read as the dispatcher
    reads CPUID (sse2; avx2 with fma; avx512 = avx512f, dq, bw and vl; neon = asimd), or --archs.
    The bf16 dot-product cases "<kernel>.<arch>.dot.<what>" need that arch's bf16 unit too:
    avx512_bf16 (arch "avx512_bf16") or the Arm BF16 extension ("neon_bf16"); an AVX-512 CPU
    without AVX512_BF16 (an Intel Xeon of the Skylake / Cascade Lake generations) skips them. The
    AMX cases "<kernel>.avx512.amx.<what>" need amx_tile and amx_bf16 ("amx_bf16").

Everything else tests/skip.hpp can skip (torch, numpy or sentencepiece not importable, the Hugging
Face venv of tools/setup_hf.sh missing, the apps not built) must run: .ci/run installs all of it.
--report-only prints the same summary and exits 0 (what tools/test.sh does after a plain `meson
test`, where a missing torch or venv is allowed).
"""
import argparse
import fnmatch
import glob
import json
import os
import re
import subprocess
import sys

ARCH_CASE = re.compile(r"^[^.]+\.(sse2|avx2|avx512|neon)\.(?:(dot|amx)\.)?")


def case_arch(m):
    """The arch a kernel case needs: "avx512" for gemm_bf16.avx512.widen.x, "avx512_bf16" for .dot,
    "amx_bf16" for .amx."""
    if m.group(2) == "amx":
        return "amx_bf16"
    return m.group(1) + ("_bf16" if m.group(2) else "")


def cpu_archs():
    """The SIMD archs /proc/cpuinfo reports (empty if it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags") or line.startswith("Features"):
                    flags = set(line.split(":", 1)[1].split())
                    break
            else:
                return set()
    except OSError:
        return set()
    archs = set()
    if "sse2" in flags:
        archs.add("sse2")
    if {"avx2", "fma"} <= flags:
        archs.add("avx2")
    if {"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx2", "fma"} <= flags:
        archs.add("avx512")
        if "avx512_bf16" in flags:
            archs.add("avx512_bf16")
        if {"amx_tile", "amx_bf16", "avx512_bf16"} <= flags:  # as the dispatcher asks
            archs.add("amx_bf16")
    if "asimd" in flags:
        archs.add("neon")
        if "bf16" in flags:
            archs.add("neon_bf16")
    return archs


def listed_cases(build):
    """{binary path: [case names]} for the doctest binaries of BUILD_DIR's meson tests."""
    tests = json.loads(subprocess.run(["meson", "introspect", build, "--tests"], check=True,
                                      capture_output=True, text=True).stdout)
    root = os.path.realpath(build) + os.sep
    cases = {}
    for t in tests:
        binary = os.path.realpath(t["cmd"][0])
        if not binary.startswith(root) or binary in cases:
            continue  # a script (tests/mpi/mpi_train.sh), or already listed
        out = subprocess.run([binary, "--list-test-cases"], check=True, capture_output=True, text=True).stdout
        cases[binary] = [l for l in out.splitlines() if l and not l.startswith("[doctest]") and not l.startswith("====")]
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--results", help="the TAPEGRAD_TEST_RESULTS directory (default BUILD/test-results)")
    ap.add_argument("--archs", help="comma-separated SIMD archs this machine has (default: /proc/cpuinfo)")
    ap.add_argument("--report-only", action="store_true", help="print the summary, never fail")
    ap.add_argument("--left-out", action="append", default=[], metavar="GLOB",
                    help="cases matching GLOB (fnmatch) may be left out of this run on purpose, as .ci/run "
                         "leaves the copy-task training out of the ASan suite; they are counted, not excused "
                         "if they ran and failed or were skipped")
    args = ap.parse_args()
    results = args.results or os.path.join(args.build, "test-results")
    archs = set(args.archs.split(",")) if args.archs else cpu_archs()

    outcomes = {}  # (binary, case) -> list of (result, reason)
    files = sorted(glob.glob(os.path.join(results, "*.jsonl")))
    if not files:
        print(f"check_test_results: no results in {results}: run meson test with TAPEGRAD_TEST_RESULTS={results} "
              "(tools/test.sh does)")
        return 0 if args.report_only else 1
    for path in files:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                outcomes.setdefault((os.path.realpath(r["binary"]), r["case"]), []).append((r["result"], r["reason"]))

    problems, skipped, counts = [], [], {"passed": 0, "skipped": 0, "failed": 0, "not run": 0}
    left_out = 0
    arch_passed = {a: 0 for a in sorted(archs)}
    arch_absent = {}  # arch this CPU lacks -> number of its cases skipped or not run
    for binary, names in sorted(listed_cases(args.build).items()):
        for name in names:
            got = outcomes.get((binary, name), [])
            results_ = {r for r, _ in got}
            m = ARCH_CASE.match(name)
            excused = m is not None and case_arch(m) not in archs
            label = f"{os.path.basename(binary)}: {name}"
            if "failed" in results_:
                counts["failed"] += 1
                problems.append(f"FAILED: {label}")
            elif not got and any(fnmatch.fnmatchcase(name, g) for g in args.left_out):
                left_out += 1
            elif "skipped" in results_ or not got:
                why = next((reason for r, reason in got if r == "skipped"), "not run by any meson test")
                counts["skipped" if got else "not run"] += 1
                if excused:
                    arch_absent[case_arch(m)] = arch_absent.get(case_arch(m), 0) + 1
                else:
                    skipped.append(f"{label}: {why}")
                    problems.append(f"must run here but {'was SKIPPED' if got else 'did not run'}: {label}: {why}")
            else:
                counts["passed"] += 1
                if m and case_arch(m) in arch_passed:
                    arch_passed[case_arch(m)] += 1

    print(f"check_test_results: {sum(counts.values()) + left_out} test cases in {args.build}: " +
          ", ".join(f"{v} {k}" for k, v in counts.items()))
    if args.left_out:
        print(f"  {left_out} cases left out of this run on purpose (--left-out {' '.join(args.left_out)})")
    print("  kernel cases passed per arch of this CPU (" + ("--archs" if args.archs else "/proc/cpuinfo") + "): " +
          (", ".join(f"{a} {n}" for a, n in arch_passed.items()) or "none"))
    for a, n in arch_passed.items():
        if n == 0:
            problems.append(f"no kernel case ran on {a}, which this CPU has")
    for a, n in sorted(arch_absent.items()):
        print(f"  {n} kernel cases for {a} skipped or not run: this CPU lacks {a}")
    if skipped:
        print(f"  SKIPPED or not run ({len(skipped)}):")
        for s in skipped:
            print("    " + s)
    if problems:
        print(f"check_test_results: {len(problems)} problem(s){' (report only)' if args.report_only else ''}:")
        for p in problems:
            print("  " + p)
        return 0 if args.report_only else 1
    print("check_test_results: every case that must run here ran and passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
