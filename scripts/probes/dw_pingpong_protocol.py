"""Probe (CPU): the ping-pong dW kernel's synchronisation protocol (scripts/probes/dw_gemm_sm90.cu,
dw_gemm_sm90_pingpong_kernel) as a random-interleaving simulation, since the kernel has not run on a
GPU. One block: a producer filling a ring of `stages` slots in tile order, two consumer warpgroups
taking the block's tiles in turn, mbarrier parity waits as the hardware does them (a wait for parity
P succeeds once the barrier's completed-phase count has parity != P), the two turn barriers. Checks,
for every schedule tried, that no parity wait succeeds on a stale phase (a consumer reading a stage
before its fill for this K step, or the producer refilling a stage before its release), and that
every run ends (no deadlock). With --no-turn the turn barriers are left out: the stale waits it then
finds are why they exist.
Usage: python scripts/probes/dw_pingpong_protocol.py [--no-turn] [--runs N]"""

import argparse
import random


def simulate(tiles, kblocks, stages, turn, rng):
    fills = [0] * stages  # completed phases of full[s]
    releases = [0] * stages  # completed phases of empty[s]
    turns = [0, 0]  # completed phases of turn[c]
    prod = {"gk": 0}
    total = tiles * kblocks
    # consumer state: its tiles are li = c, c + 2, ...; pc = position in its program
    cons = [{"li": c, "kb": 0, "n_own": 0, "state": "turn", "inflight": None} for c in range(2)]
    errors = []

    def parity_ok(count, p):
        return (count & 1) != p

    def step_producer():
        gk = prod["gk"]
        if gk >= total:
            return False
        s, phase = gk % stages, (gk // stages) & 1
        if not parity_ok(releases[s], phase ^ 1):
            return False
        if releases[s] != gk // stages:  # must have seen exactly every earlier use released
            errors.append(f"producer refills stage {s} for k step {gk} after {releases[s]} releases")
        fills[s] += 1  # the TMA completes (modelled as at once; a delay only slows the waiters)
        prod["gk"] += 1
        return True

    def step_consumer(c):
        st = cons[c]
        li = st["li"]
        if li >= tiles:
            return False
        if st["state"] == "turn":
            if turn and li > 0:
                p = ((st["n_own"] - 1) if c == 0 else st["n_own"]) & 1
                if not parity_ok(turns[c], p):
                    return False
            st["state"] = "loop"
            return True
        if st["state"] == "loop":
            gk = li * kblocks + st["kb"]
            s, p = gk % stages, (gk // stages) & 1
            if not parity_ok(fills[s], p):
                return False
            if fills[s] != gk // stages + 1:
                errors.append(f"warpgroup {c} reads stage {s} for k step {gk} after {fills[s]} fills")
            # MMAs issued; wait_group 1: the previous step's stage is released
            if st["inflight"] is not None:
                releases[st["inflight"]] += 1
            st["inflight"] = s
            st["kb"] += 1
            if st["kb"] == kblocks:
                if turn:
                    turns[1 - c] += 1
                releases[st["inflight"]] += 1  # wait_group 0, release
                st["inflight"] = None
                st["kb"] = 0
                st["li"] += 2
                st["n_own"] += 1
                st["state"] = "turn"
            return True
        return False

    actors = [step_producer, lambda: step_consumer(0), lambda: step_consumer(1)]
    while True:
        order = rng.sample(range(3), 3)
        if not any(actors[i]() for i in order):
            break
    done = prod["gk"] == total and all(st["li"] >= tiles for st in cons)
    if not done:
        at = [s["li"] for s in cons]
        errors.append(f"deadlock: producer at {prod['gk']} of {total}, consumers at tiles {at}")
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-turn", action="store_true")
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    rng = random.Random(0)
    bad = 0
    for tiles in (1, 2, 3, 7):
        for kblocks in (1, 2, 3, 5, 8, 13, 32):
            for stages in (2, 4, 6):
                for _ in range(args.runs):
                    errs = simulate(tiles, kblocks, stages, not args.no_turn, rng)
                    if errs:
                        bad += 1
                        if bad <= 5:
                            print(f"tiles {tiles} kblocks {kblocks} stages {stages}: {errs[0]}")
                        break
    print(f"{'without' if args.no_turn else 'with'} turn barriers: {bad} configurations with an error")


if __name__ == "__main__":
    main()
