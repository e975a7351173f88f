"""Probe (CPU): the ping-pong dW kernel's synchronisation protocol (scripts/probes/dw_gemm_sm90.cu,
dw_gemm_sm90_pingpong_kernel) as a random-interleaving simulation, since the kernel has not run on a
GPU. Per block: a producer filling a ring of `stages` slots in tile order, two consumer warpgroups
taking the block's tiles in turn, the two turn barriers; mbarrier parity waits as the hardware does
them (a wait for parity P succeeds once the barrier's completed-phase count has parity != P); TMA
transfers landing at random later times. With --cluster 2, two blocks run the same tile sequence:
each block's producer loads its own G slice and one of X's two boxes for both blocks (multicast), a
full barrier completes on its producer's arrival and all three transfers, and a stage's release
goes to the empty barriers of both blocks (two arrivals complete a phase).
Checks, for every schedule tried: no parity wait succeeds on a stale phase (a consumer reading a
stage before its fill for that K step, a producer refilling one before its release), no transfer
lands in a block's stage while that stage's barrier is in another phase, and every run ends (no
deadlock). With --no-turn the turn barriers are left out, with --own-release (cluster 2) a release
reaches only its own block: the errors each then finds are why the kernel does otherwise.
Usage: python scripts/probes/dw_pingpong_protocol.py [--cluster 1|2] [--no-turn] [--own-release]
[--runs N]"""

import argparse
import random


def simulate(tiles, kblocks, stages, blocks, turn, rng, cross_release=True):
    expect = 2 if blocks == 1 else 3  # transfers a fill: G's slice, X's box(es) (own, and the peer's)
    full = [[0] * stages for _ in range(blocks)]  # completed phases
    arrived = [[False] * stages for _ in range(blocks)]  # the producer's arrive.expect_tx this phase
    landed = [[0] * stages for _ in range(blocks)]  # transfers landed this phase
    empty = [[0] * stages for _ in range(blocks)]  # completed phases
    empty_arrivals = [[0] * stages for _ in range(blocks)]
    turns = [[0, 0] for _ in range(blocks)]
    prod = [0] * blocks  # next K step to load
    flying = []  # transfers: (target block, stage, K step)
    total = tiles * kblocks
    cons = [
        [{"li": c, "kb": 0, "n_own": 0, "waited": False, "inflight": None} for c in range(2)]
        for _ in range(blocks)
    ]
    errors = []

    def parity_ok(count, p):
        return (count & 1) != p

    def maybe_complete(b, s):
        if arrived[b][s] and landed[b][s] == expect:
            full[b][s] += 1
            arrived[b][s], landed[b][s] = False, 0

    def release(s, b):
        need = blocks if cross_release else 1
        for t in range(blocks) if cross_release else (b,):
            empty_arrivals[t][s] += 1
            if empty_arrivals[t][s] == need:
                empty[t][s] += 1
                empty_arrivals[t][s] = 0

    def step_producer(b):
        gk = prod[b]
        if gk >= total:
            return False
        s, phase = gk % stages, (gk // stages) & 1
        if not parity_ok(empty[b][s], phase ^ 1):
            return False
        if empty[b][s] != gk // stages:
            errors.append(
                f"block {b}'s producer refills stage {s} for k step {gk} after {empty[b][s]} releases"
            )
        arrived[b][s] = True
        flying.append((b, s, gk))  # G's slice
        for t in range(blocks):  # X's box (own; multicast to every block of the cluster)
            flying.append((t, s, gk))
        maybe_complete(b, s)
        prod[b] += 1
        return True

    def step_land():
        if not flying:
            return False
        t, s, gk = flying.pop(rng.randrange(len(flying)))
        if full[t][s] != gk // stages:
            errors.append(f"a transfer for k step {gk} lands in block {t}'s stage {s} at phase {full[t][s]}")
        landed[t][s] += 1
        maybe_complete(t, s)
        return True

    def step_consumer(b, c):
        st = cons[b][c]
        li = st["li"]
        if li >= tiles:
            return False
        if not st["waited"]:
            if turn and li > 0:
                p = ((st["n_own"] - 1) if c == 0 else st["n_own"]) & 1
                if not parity_ok(turns[b][c], p):
                    return False
            st["waited"] = True
            return True
        gk = li * kblocks + st["kb"]
        s, p = gk % stages, (gk // stages) & 1
        if not parity_ok(full[b][s], p):
            return False
        if full[b][s] != gk // stages + 1:
            errors.append(f"block {b} warpgroup {c} reads stage {s} for k step {gk} after {full[b][s]} fills")
        if st["inflight"] is not None:  # wait_group 1: the previous step's stage is released
            release(st["inflight"], b)
        st["inflight"] = s
        st["kb"] += 1
        if st["kb"] == kblocks:
            if turn:
                turns[b][1 - c] += 1
            release(st["inflight"], b)  # wait_group 0, release
            st.update(inflight=None, kb=0, li=li + 2, n_own=st["n_own"] + 1, waited=False)
        return True

    actors = [step_land]
    for b in range(blocks):
        actors.append(lambda b=b: step_producer(b))
        for c in range(2):
            actors.append(lambda b=b, c=c: step_consumer(b, c))
    while not errors:
        if not any(actors[i]() for i in rng.sample(range(len(actors)), len(actors))):
            break
    done = all(p == total for p in prod) and not flying and all(s["li"] >= tiles for bc in cons for s in bc)
    if not done and not errors:
        at = [[s["li"] for s in bc] for bc in cons]
        errors.append(f"deadlock: producers at {prod} of {total}, consumers at tiles {at}")
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", type=int, default=1, choices=[1, 2])
    ap.add_argument("--no-turn", action="store_true")
    ap.add_argument("--own-release", action="store_true")
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    rng = random.Random(0)
    bad = shapes = 0
    for tiles in (1, 2, 3, 7):
        for kblocks in (1, 2, 3, 5, 8, 13, 32):
            for stages in (2, 4, 6):
                shapes += 1
                for _ in range(args.runs):
                    errs = simulate(
                        tiles, kblocks, stages, args.cluster, not args.no_turn, rng, not args.own_release
                    )
                    if errs:
                        bad += 1
                        if bad <= 5:
                            print(f"tiles {tiles} kblocks {kblocks} stages {stages}: {errs[0]}")
                        break
    turn = "without" if args.no_turn else "with"
    where = ", releases to the own block only" if args.own_release else ""
    print(f"cluster {args.cluster}, {turn} turn barriers{where}: {bad} of {shapes} shapes with an error")


if __name__ == "__main__":
    main()
