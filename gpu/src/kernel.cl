/*
 * N-Queens work items on a GPU: one lane searches one item depth first at a time.
 *
 * Written in the C subset that OpenCL C and CUDA C++ share, behind a few macros, so that the same
 * text could be compiled by NVRTC with a different prelude instead of the OpenCL one below:
 *
 *     typedef unsigned int uint;
 *     typedef unsigned long long ulong;
 *     #define NQ_KERNEL extern "C" __global__ void
 *     #define NQ_GLOBAL
 *     #define NQ_LOCAL __shared__
 *     #define NQ_LANE threadIdx.x
 *     #define NQ_GID (blockIdx.x * blockDim.x + threadIdx.x)
 *     #define NQ_POPCOUNT(x) __popc(x)
 *     #define NQ_ATOMIC_INC(p) atomicAdd((p), 1u)
 *     #define NQ_PRELUDE_DONE
 *
 * (NQ_MAXL and NQ_WG come as -D options in both cases.) No pointers to local memory, no
 * recursion, no goto, no vector types, no OpenCL built-ins outside the macros.
 *
 * Host contract (see lib.rs):
 * - table: per job, JOB_WORDS words: rows, shifts (2 bits per searched row, low word then high
 *   word), 0, then blocked[0..32].
 * - items: per item, ITEM_WORDS words: job index in table, start depth, cols, down_right,
 *   down_left. Every item starts at least two rows above the last (depth <= rows - 2) and at most
 *   NQ_MAXL rows above the end (rows - depth <= NQ_MAXL).
 * - counters[0]: the atomic counter of items handed out; counters[1]: lanes that stopped with an
 *   unfinished item (their state is in saved, one SAVE_WORDS slot per lane, word 0 = 1 + item or 0).
 * - counts/nodes: one 64-bit count per item, written once, when the item is finished.
 * - chunks: the step budget of this dispatch, in units of 1024 steps (one step is one queen
 *   placed or taken back, or one second-to-last row counted).
 */

#ifndef NQ_PRELUDE_DONE
#define NQ_KERNEL __kernel void
#define NQ_GLOBAL __global
#define NQ_LOCAL __local
#define NQ_LANE ((uint)get_local_id(0))
#define NQ_GID ((uint)get_global_id(0))
#define NQ_POPCOUNT(x) popcount(x)
#define NQ_ATOMIC_INC(p) atomic_inc(p)
#define NQ_PRELUDE_DONE
#endif

#define JOB_WORDS 36u
#define ITEM_WORDS 5u
#define SAVE_HEAD 10u
#define SAVE_WORDS (SAVE_HEAD + 4u * NQ_MAXL)
/* The stack is laid out [level][word][lane]: neighbouring lanes touch neighbouring words. */
#define ST(l, k) stack[((l) * 4u + (k)) * NQ_WG + lane]
#define BLK(l) blk[(l) * NQ_WG + lane]

NQ_KERNEL nq_solve(NQ_GLOBAL const uint* table, NQ_GLOBAL const uint* items, uint n_items,
                   NQ_GLOBAL uint* counters, NQ_GLOBAL ulong* counts,
                   NQ_GLOBAL ulong* nodes, NQ_GLOBAL uint* saved, uint chunks)
{
    NQ_LOCAL uint stack[NQ_MAXL * 4u * NQ_WG];
    NQ_LOCAL uint blk[NQ_MAXL * NQ_WG];
    const uint lane = NQ_LANE;
    NQ_GLOBAL uint* save = saved + (ulong)NQ_GID * SAVE_WORDS;

    uint item = 0; /* 1 + index of the item being searched, 0 for none */
    uint base = 0, last = 0, d = 0, cols = 0, dr = 0, dl = 0, avail = 0;
    ulong shifts = 0, cnt = 0, nd = 0;
    uint exhausted = 0;

    /* Resume the item this lane stopped in during the previous dispatch. */
    if (save[0] != 0u) {
        item = save[0];
        NQ_GLOBAL const uint* it = items + (ulong)(item - 1u) * ITEM_WORDS;
        NQ_GLOBAL const uint* jt = table + (ulong)it[0] * JOB_WORDS;
        base = it[1];
        last = jt[0] - 1u;
        shifts = (ulong)jt[1] | ((ulong)jt[2] << 32);
        for (uint r = base; r <= last; r++) BLK(r - base) = jt[4u + r];
        d = save[1];
        cols = save[2];
        dr = save[3];
        dl = save[4];
        avail = save[5];
        cnt = (ulong)save[6] | ((ulong)save[7] << 32);
        nd = (ulong)save[8] | ((ulong)save[9] << 32);
        for (uint l = 0; l < d - base; l++) {
            for (uint k = 0; k < 4u; k++) ST(l, k) = save[SAVE_HEAD + 4u * l + k];
        }
    }

    /* The step budget as two nested loops of bounded length: some drivers end (or refuse) loops
       that run longer than 65,535 iterations, and each loop here stays far below that. */
    for (uint c = 0; c < chunks && !exhausted; c++) {
        for (uint s = 0; s < 1024u; s++) {
            if (item == 0u) {
                /* Fetch the next item: the list is sorted longest first. */
                uint i = NQ_ATOMIC_INC(counters);
                if (i >= n_items) {
                    exhausted = 1;
                    break;
                }
                NQ_GLOBAL const uint* it = items + (ulong)i * ITEM_WORDS;
                NQ_GLOBAL const uint* jt = table + (ulong)it[0] * JOB_WORDS;
                base = it[1];
                cols = it[2];
                dr = it[3];
                dl = it[4];
                last = jt[0] - 1u;
                shifts = (ulong)jt[1] | ((ulong)jt[2] << 32);
                /* The item's blocked masks, read once from global memory into local memory. */
                for (uint r = base; r <= last; r++) BLK(r - base) = jt[4u + r];
                d = base;
                avail = ~(cols | dr | dl | BLK(0));
                cnt = 0;
                nd = 0;
                item = i + 1u;
                continue;
            }
            if (avail != 0u) {
                uint sh = (uint)(shifts >> (2u * d)) & 3u;
                if (d + 1u == last) {
                    /* Second-to-last row: each queen here completes in as many ways as the last
                       row has avail squares, counted by popcount instead of placed. */
                    uint bl = BLK(last - base);
                    while (avail != 0u) {
                        uint b = avail & (0u - avail);
                        avail ^= b;
                        cnt += NQ_POPCOUNT(~(cols | b | ((dr | b) << sh) | ((dl | b) >> sh) | bl));
                        nd++;
                    }
                } else {
                    uint b = avail & (0u - avail);
                    uint l = d - base;
                    avail ^= b;
                    ST(l, 0u) = avail;
                    ST(l, 1u) = cols;
                    ST(l, 2u) = dr;
                    ST(l, 3u) = dl;
                    cols |= b;
                    dr = (dr | b) << sh;
                    dl = (dl | b) >> sh;
                    d++;
                    nd++;
                    avail = ~(cols | dr | dl | BLK(d - base));
#ifndef NQ_NO_LOOKAHEAD
                    {
                        /* The row after next, as the CPU search checks it: if the queens so far
                           leave it no free square, no queen in this row can help: a dead state.
                           (d < last always holds here: the second-to-last row is never entered.) */
                        uint s2 = (uint)(shifts >> (2u * d)) & 3u;
                        if (~(cols | (dr << s2) | (dl >> s2) | BLK(d + 1u - base)) == 0u) avail = 0u;
                    }
#endif
                }
            }
            if (avail == 0u) {
                if (d == base) {
                    counts[item - 1u] = cnt;
                    nodes[item - 1u] = nd;
                    item = 0;
                } else {
                    uint l;
                    d--;
                    l = d - base;
                    avail = ST(l, 0u);
                    cols = ST(l, 1u);
                    dr = ST(l, 2u);
                    dl = ST(l, 3u);
                }
            }
        }
    }

    /* Out of steps: save the unfinished item for the next dispatch. */
    if (item != 0u) {
        save[0] = item;
        save[1] = d;
        save[2] = cols;
        save[3] = dr;
        save[4] = dl;
        save[5] = avail;
        save[6] = (uint)cnt;
        save[7] = (uint)(cnt >> 32);
        save[8] = (uint)nd;
        save[9] = (uint)(nd >> 32);
        for (uint l = 0; l < d - base; l++) {
            for (uint k = 0; k < 4u; k++) save[SAVE_HEAD + 4u * l + k] = ST(l, k);
        }
        NQ_ATOMIC_INC(counters + 1);
    } else {
        save[0] = 0;
    }
}
