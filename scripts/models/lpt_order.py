"""lpt_order.py: the state / reverse passes' block scheduling, modelled: each CTA is one chain (a sequence's value
head and V tile) that runs its sequence's chunks one after another, one CTA an SM, the hardware handing the next CTA
in launch order to the first SM that frees. Prints the makespan in chunk-steps (plus a fixed cost a CTA) for the
standard workloads with the sequences in their given order and longest first (chunk_map.h lpt_key), against the
ideal (all work spread evenly).

    python3 scripts/models/lpt_order.py [--sms 132] [--overhead 2]
"""
import argparse
import heapq
import math

WORKLOADS = {  # name: (sequence lengths, value heads); 64-column tiles, K = V = 128 (two tiles a chain)
    "h64-fixed": ([8192], 64), "h64-mixed": ([1300, 547, 2048, 963, 271, 3063], 64), "h64-uniform": ([1024] * 8, 64),
    "h96-fixed": ([8192], 96), "h96-mixed": ([1300, 547, 2048, 963, 271, 3063], 96), "h96-uniform": ([1024] * 8, 96),
}


def lpt_key(count):  # chunk_map.h lpt_key
    if count <= 0:
        return 0
    msb = count.bit_length() - 1
    frac = count >> (msb - 2) if msb >= 2 else count << (2 - msb)
    return 1 + 4 * msb + (frac & 3)


def makespan(chunks, heads, sms, overhead, order):
    seqs = list(range(len(chunks)))
    if order == "lpt":
        seqs.sort(key=lambda i: -lpt_key(chunks[i]))  # stable: within a key, by index
    free = [0.0] * sms
    for i in seqs:
        for _ in range(2 * heads):
            heapq.heappush(free, heapq.heappop(free) + chunks[i] + overhead)
    return max(free)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--overhead", type=float, default=2.0, help="a CTA's fixed cost, in chunk-steps")
    a = ap.parse_args()
    for name, (lens, heads) in WORKLOADS.items():
        chunks = [math.ceil(n / 64) for n in lens]
        ideal = sum(c + a.overhead for c in chunks) * 2 * heads / a.sms
        given = makespan(chunks, heads, a.sms, a.overhead, "given")
        lpt = makespan(chunks, heads, a.sms, a.overhead, "lpt")
        print(f"{name:12s} given order {given:6.1f}  longest first {lpt:6.1f}  ideal {ideal:6.1f} chunk-steps")


if __name__ == "__main__":
    main()
