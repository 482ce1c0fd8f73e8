/*
 * N-Queens work items on a GPU: one lane searches one item depth first at a time.
 *
 * Written in the C subset that OpenCL C and CUDA C++ share, behind a few macros: NVRTC compiles
 * the same text under `CUDA_PRELUDE` (lib.rs) instead of the OpenCL prelude below, as
 * gpu/tests/kernel_nvrtc.rs checks for Hopper (sm_90).
 *
 * (NQ_MAXL and NQ_WG come as -D options in both cases, NQ_LOOKAHEAD_ROWS too where not 1.)
 * uint4 and uint2 are the only vector types, used through .x/.y/.z/.w and the two constructor
 * macros, which both languages share.
 * No pointers to local memory (CUDA would make them 64-bit generic pointers), no recursion, no
 * goto, no built-ins outside the macros.
 *
 * The search step is branch-free, as in the fastest GPU solvers: every step takes one queen from
 * the frame on top of the stack, pops that frame if it was its last queen, and pushes the child
 * frame unless the child is dead or on the second-to-last row (whose completions are counted by a
 * popcount of the last row). Lanes of a warp therefore run the same instructions each step, in
 * whatever phase of their own search they are; only fetching the next item branches.
 *
 * Host contract (see lib.rs and items.rs):
 * - table: per job, JOB_WORDS words: rows, shifts (2 bits per searched row, low word then high
 *   word), 0, then blocked[0..32].
 * - items: per item, ITEM_WORDS words: job index in table, start depth, cols, down_right,
 *   down_left. Every item starts at least two rows above the last (depth <= rows - 2) and at most
 *   NQ_MAXL rows above the end (rows - depth <= NQ_MAXL).
 * - counters[0]: the atomic counter of items handed out; counters[1]: lanes that stopped with an
 *   unfinished item (their state is in saved, one SAVE_WORDS slot per lane, word 0 = 1 + item or 0).
 * - counts/nodes: one 64-bit count per item, written once, when the item is finished.
 * - chunks: the step budget of this dispatch, in units of 1024 steps (one step is one queen
 *   placed). A lane fetches a new item at the start of a chunk only: it waits out the rest of the
 *   chunk its item ended in (at most 1,023 steps an item, nothing beside the millions of steps of
 *   a typical item), and the step loop stays free of the fetch.
 */

#ifndef NQ_PRELUDE_DONE
#define NQ_KERNEL __kernel __attribute__((reqd_work_group_size(NQ_WG, 1, 1))) void
#define NQ_GLOBAL __global
#define NQ_LOCAL __local
#define NQ_LANE ((uint)get_local_id(0))
#define NQ_GID ((uint)get_global_id(0))
#define NQ_POPCOUNT(x) popcount(x)
#define NQ_ATOMIC_INC(p) atomic_inc(p)
#define NQ_UINT4(a, b, c, d) ((uint4)((a), (b), (c), (d)))
#define NQ_UINT2(a, b) ((uint2)((a), (b)))
#define NQ_PRELUDE_DONE
#endif

/* Rows below the child checked for a free square before it is pushed (0, 1 or 2; -D option). */
#ifndef NQ_LOOKAHEAD_ROWS
#define NQ_LOOKAHEAD_ROWS 1
#endif

#define JOB_WORDS 36u
#define ITEM_WORDS 5u
#define SAVE_HEAD 6u
#define SAVE_WORDS (SAVE_HEAD + 4u * NQ_MAXL)
/* Both arrays are laid out [level][lane]: the lanes of a warp read neighbouring words. */
/* A frame: the masks on entering its row (cols, down_right, down_left) and its row's free
   squares not yet tried. */
#define FRAME(l) frames[(l) * NQ_WG + lane]
/* A level's row data: the blocked mask of the row below it, and its row's shift. */
#define ROW(l) rowinfo[(l) * NQ_WG + lane]

NQ_KERNEL nq_solve(NQ_GLOBAL const uint* table, NQ_GLOBAL const uint* items, uint n_items,
                   NQ_GLOBAL uint* counters, NQ_GLOBAL ulong* counts,
                   NQ_GLOBAL ulong* nodes, NQ_GLOBAL uint* saved, uint chunks)
{
    NQ_LOCAL uint4 frames[NQ_MAXL * NQ_WG];
    NQ_LOCAL uint2 rowinfo[NQ_MAXL * NQ_WG];
    const uint lane = NQ_LANE;
    NQ_GLOBAL uint* save = saved + (ulong)NQ_GID * SAVE_WORDS;

    uint item = 0;    /* 1 + index of the item being searched, 0 for none */
    /* The step loop indexes both arrays with signed ints, so that the compiler may fold the
       constant offsets (sp - NQ_WG, r + NQ_WG) into the addresses. */
    const int bottom = (int)lane;
    int sp = bottom; /* frames[sp] is just above the lane's top frame: its stack is empty when
                        sp == bottom */
    int row0 = bottom; /* ROW(level) is rowinfo[popcount(frame's columns) * NQ_WG + row0]: a frame's
                          level is the queens on its board less those on the item's start */
    uint leafq = 0;    /* queens on the board of a frame on the second-to-last row */
    uint rows_of = 0; /* the item whose row data is in rowinfo */
    ulong cnt = 0, nd = 0;

    /* Resume the item this lane stopped in during the previous dispatch. */
    if (save[0] != 0u) {
        item = save[0];
        const uint depth = save[1];
        cnt = (ulong)save[2] | ((ulong)save[3] << 32);
        nd = (ulong)save[4] | ((ulong)save[5] << 32);
        for (uint l = 0; l < depth; l++) {
            FRAME(l) = NQ_UINT4(save[SAVE_HEAD + 4u * l], save[SAVE_HEAD + 4u * l + 1u],
                                save[SAVE_HEAD + 4u * l + 2u], save[SAVE_HEAD + 4u * l + 3u]);
        }
        sp = bottom + (int)(depth * NQ_WG);
    }

    for (uint c = 0; c < chunks; c++) {
        if (sp == bottom) {
            /* The item is searched (or there is none yet): write it, fetch the next. */
            if (item != 0u) {
                counts[item - 1u] = cnt;
                nodes[item - 1u] = nd;
            }
            const uint i = NQ_ATOMIC_INC(counters);
            if (i >= n_items) {
                item = 0;
                break;
            }
            NQ_GLOBAL const uint* it = items + (ulong)i * ITEM_WORDS;
            NQ_GLOBAL const uint* jt = table + (ulong)it[0] * JOB_WORDS;
            const uint cols = it[2], dr = it[3], dl = it[4];
            const uint free = ~(cols | dr | dl | jt[4u + it[1]]);
            FRAME(0) = NQ_UINT4(cols, dr, dl, free);
            sp = bottom + (free != 0u ? (int)NQ_WG : 0);
            cnt = 0;
            nd = 0;
            item = i + 1u;
        }
        if (rows_of != item) {
            /* A new or resumed item: its row data, read once from global memory. */
            NQ_GLOBAL const uint* it = items + (ulong)(item - 1u) * ITEM_WORDS;
            NQ_GLOBAL const uint* jt = table + (ulong)it[0] * JOB_WORDS;
            const uint base = it[1];
            const ulong shifts = (ulong)jt[1] | ((ulong)jt[2] << 32);
            const uint leaf = jt[0] - 2u - base;
            const uint k0 = NQ_POPCOUNT(it[2]);
            for (uint l = 0; l <= leaf; l++) {
                ROW(l) = NQ_UINT2(jt[4u + base + l + 1u], (uint)(shifts >> (2u * (base + l))) & 3u);
            }
            leafq = leaf + k0;
            row0 = bottom - (int)(k0 * NQ_WG);
            rows_of = item;
        }

        /* The steps. Each takes the lowest free square of the top frame, pops that frame if
           this was its last square (so that no step is spent on an empty frame), and pushes
           the child frame in its place or above it, unless the child is on the second-to-last
           row (whose completions are counted by a popcount of the last row) or dead. */
        uint part = 0, s = 0;
        int top = sp - (int)NQ_WG; /* the top frame; below bottom when the stack is empty */
        for (; s < 1024u && top >= bottom; s++) {
            const uint4 f = frames[top];
            const uint queens = NQ_POPCOUNT(f.x);
            const int r = (int)queens * (int)NQ_WG + row0;
            const uint2 row = rowinfo[r];
            const uint bit = f.w & (0u - f.w);
            const uint rest = f.w ^ bit;
            frames[top].w = rest;
            const uint cols = f.x | bit;
            const uint dr = (f.y | bit) << row.y;
            const uint dl = (f.z | bit) >> row.y;
            const uint free = ~(cols | dr | dl | row.x);
            const uint at_leaf = queens == leafq;
            if (at_leaf) part += NQ_POPCOUNT(free);
            uint push = !at_leaf && free != 0u;
#if NQ_LOOKAHEAD_ROWS >= 1
            {
                /* The row after next, as the CPU search checks it: if the queens so far leave it
                   no free square, no queen in the next row can help: a dead state, not pushed.
                   (rowinfo[r + NQ_WG] is within the array even at the leaf, where it is unused.) */
                const uint2 next = rowinfo[r + (int)NQ_WG];
                const uint dr2 = dr << next.y, dl2 = dl >> next.y;
                if (~(cols | dr2 | dl2 | next.x) == 0u) push = 0u;
#if NQ_LOOKAHEAD_ROWS >= 2
                /* And the row below that, where the board has one (its row data is read from
                   this level's own where it has not: no read past the array). */
                const uint has2 = queens + 2u <= leafq;
                const uint2 next2 = rowinfo[has2 ? r + 2 * (int)NQ_WG : r];
                if (has2 && ~(cols | (dr2 << next2.y) | (dl2 >> next2.y) | next2.x) == 0u) push = 0u;
#endif
            }
#endif
            if (rest == 0u) top -= (int)NQ_WG;
            if (push) {
                top += (int)NQ_WG;
                frames[top] = NQ_UINT4(cols, dr, dl, free);
            }
        }
        sp = top + (int)NQ_WG;
        cnt += part;
        nd += s;
    }

    if (item != 0u && sp == bottom) {
        /* Finished in the last chunk of the dispatch. */
        counts[item - 1u] = cnt;
        nodes[item - 1u] = nd;
        item = 0;
    }
    if (item != 0u) {
        /* Out of steps: save the unfinished item for the next dispatch. */
        const uint depth = (uint)(sp - bottom) / NQ_WG;
        save[0] = item;
        save[1] = depth;
        save[2] = (uint)cnt;
        save[3] = (uint)(cnt >> 32);
        save[4] = (uint)nd;
        save[5] = (uint)(nd >> 32);
        for (uint l = 0; l < depth; l++) {
            const uint4 f = FRAME(l);
            save[SAVE_HEAD + 4u * l] = f.x;
            save[SAVE_HEAD + 4u * l + 1u] = f.y;
            save[SAVE_HEAD + 4u * l + 2u] = f.z;
            save[SAVE_HEAD + 4u * l + 3u] = f.w;
        }
        NQ_ATOMIC_INC(counters + 1);
    } else {
        save[0] = 0;
    }
}
