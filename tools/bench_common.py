"""Shared by the PyTorch benchmark scripts (tools/bench_torch_train.py, tools/bench_torch_lm.py).
Imports nothing heavy: the scripts set their thread variables before importing torch."""
import statistics
import time


def timed(f, reps, warm=True):
    """Median, min, max seconds of `reps` calls of f (after one untimed call when warm)."""
    if warm:
        f()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), min(samples), max(samples)
