"""The in-process side of the model benchmarks (bench/model_server.py, bench/frameworks.py):
a call timed in a loop by several caller threads for a while."""
import re
import threading
import time

import numpy as np


def timed(call, duration, callers):
    """`call` run by `callers` threads at once for `duration` seconds, after a warm-up:
    calls per second, p50 and p99 in µs, and the count."""
    for _ in range(20):  # warm-up: first runs allocate (and trace)
        call()
    lats = [[] for _ in range(callers)]
    start = threading.Barrier(callers + 1)
    deadline = [0.0]

    def loop(mine):
        start.wait()
        clock, end = time.perf_counter_ns, deadline[0]
        while True:
            t0 = clock()
            call()
            t1 = clock()
            mine.append(t1 - t0)
            if t1 >= end:
                break

    threads = [threading.Thread(target=loop, args=(lat,)) for lat in lats]
    for t in threads:
        t.start()
    t0 = time.perf_counter_ns()
    deadline[0] = t0 + int(duration * 1e9)
    start.wait()
    for t in threads:
        t.join()
    elapsed = (time.perf_counter_ns() - t0) / 1e9
    all_ = np.concatenate([np.array(lat, dtype=np.float64) for lat in lats]) / 1000
    p50, p99 = np.percentile(all_, [50, 99])
    return all_.size / elapsed, p50, p99, all_.size


def seconds(d):
    m = re.fullmatch(r"([\d.]+)(ms|s|m|h)?", d)
    return float(m[1]) * {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600}[m[2]]
