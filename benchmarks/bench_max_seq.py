"""The longest sequence each stack trains at a fixed batch on one GPU (issue 5: "the longest sequence
each stack fits at batch 8 for the 1B config").

Per variant (hf, liger_cpp, liger by default), every trial is one bench_e2e.py worker process at
one sequence length: a warm-up step and a timed step, so the optimizer state exists at the peak.
The peaks at the preset's length and at twice it fit a line (with SDPA, memory grows linearly in
the sequence length), which predicts where the device's memory runs out; lengths are then tried
around that prediction, bisecting between the longest that trained and the shortest that ran out of
memory, until they are one step apart or the trials run out. A trial that fails for another reason
than memory ends that variant's search with its error.

Usage: python benchmarks/bench_max_seq.py [--preset 1b-b8t2048] [--variants hf,liger_cpp,liger]
           [--step 512] [--max-trials 7] [--timeout 300] [--out FILE.json]
Expected time on an H200: 20-60 s per trial (longer sequences take longer), a few minutes per variant.
"""

import argparse
import copy
import sys
import tempfile

import bench_e2e


def round_down(t: int, step: int) -> int:
    return max(step, (t // step) * step)


def predict(tried: dict, capacity: float):
    """Length at which the line through the two longest successful trials' peaks reaches capacity
    (None when there are not two, or the peak does not grow)."""
    oks = sorted(t for t, r in tried.items() if "error" not in r)
    if len(oks) < 2:
        return None
    (t1, t2) = oks[-2:]
    p1, p2 = tried[t1]["peak_bytes"], tried[t2]["peak_bytes"]
    if p2 <= p1:
        return None
    slope = (p2 - p1) / (t2 - t1)
    return int(t2 + (capacity - p2) / slope)


def search(trial, start: int, step: int, max_trials: int, headroom: float = 0.98) -> dict:
    """trial(T) -> a worker result (peak_bytes, device_bytes) or {"error": ...}. Returns the longest
    length that trained, the shortest that ran out of memory, the prediction and every trial."""
    tried, lo, hi, predicted = {}, None, None, None

    def result(**extra):
        return dict(longest=lo, shortest_oom=hi, predicted=predicted, tried=tried, **extra)

    t = start
    while len(tried) < max_trials and t not in tried:
        r = tried[t] = trial(t)
        if "error" in r and "out of memory" not in r["error"]:
            return result(error=f"T={t}: {r['error']}")
        if "error" in r:
            hi = t if hi is None else min(hi, t)
        else:
            lo = t if lo is None else max(lo, t)
            if r.get("device_bytes") and predicted is None:
                predicted = predict(tried, headroom * r["device_bytes"])
        if lo is not None and hi is not None and hi - lo <= step:
            break
        if lo is None:  # nothing trained yet: halve
            if t <= step:
                break
            t = round_down(t // 2, step)
        elif hi is None:  # nothing ran out yet: the prediction, else double, else grow by 1/8
            if predicted is not None and round_down(predicted, step) > lo:
                t = round_down(predicted, step)
            elif predicted is None:
                t = 2 * lo
            else:
                t = lo + max(step, round_down(lo // 8, step))
        else:  # bisect
            t = max(lo + step, round_down((lo + hi) // 2, step))
    return result()


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=list(bench_e2e.PRESETS), default="1b-b8t2048")
    p.add_argument("--variants", default="hf,liger_cpp,liger")
    p.add_argument("--step", type=int, default=512, help="lengths are multiples of this")
    p.add_argument("--max-trials", type=int, default=7, help="per variant")
    p.add_argument("--timeout", type=float, default=300, help="seconds per trial")
    p.add_argument("--device", default=None)
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    argv2 = [f"--preset={a.preset}", f"--variants={a.variants}", "--steps=1", "--warmup=1"]
    argv2 += [f"--timeout={a.timeout}"] + ([f"--device={a.device}"] if a.device else [])
    e2e = bench_e2e.parse(argv2)
    return a, e2e


def main(argv=None) -> int:
    a, e2e = parse(argv)
    import harness

    meta = harness.meta(e2e.device)
    title = (
        f"Longest sequence at batch {e2e.batch} (Llama {e2e.model}, {e2e.dtype}, one warm-up + one step per "
        f"trial, lengths in steps of {a.step}) on {meta['gpu']}, commit {meta['commit']}"
    )
    print(f"bench_max_seq: {title[0].lower()}{title[1:]}", flush=True)
    results, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for v in e2e.variants:

            def trial(t, v=v):
                args = copy.copy(e2e)
                args.seq = t
                r = bench_e2e.run_variant(v, args, tmp)
                state = r.get("error") or f"{r['peak_bytes'] / 2**30:.2f} GiB"
                print(f"  {v} T{t}: {state}", flush=True)
                return r

            res = results[v] = search(trial, e2e.seq, a.step, a.max_trials)
            best = res["tried"].get(res["longest"], {}) if res["longest"] else {}
            row = dict(
                variant=v,
                longest=res["longest"],
                **{"peak GiB": f"{best['peak_bytes'] / 2**30:.2f}" if best else None},
                first_oom=res["shortest_oom"],
                predicted=res["predicted"],
                trials=len(res["tried"]),
            )
            if "error" in res:
                row["error"] = res["error"]
            rows.append(row)
    if a.out:
        keep = ("peak_bytes", "tokens_per_s", "error")
        slim = {
            v: {**r, "tried": {t: {k: x.get(k) for k in keep} for t, x in r["tried"].items()}}
            for v, r in results.items()
        }
        harness.write_json(a.out, dict(meta=meta, title=title, results=slim, rows=rows))
    print()
    print(title)
    cols = ["variant", "longest", "peak GiB", "first_oom", "predicted", "trials"]
    print(harness.fmt_table(rows, cols + (["error"] if any("error" in r for r in rows) else [])))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
