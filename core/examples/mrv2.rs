// Prototype: iterative search with dynamic row choice (fewest free squares first).
use nqueens_core::*;

#[derive(Clone, Copy, Default)]
struct Fr { row: u32, free: u32, bit: u32 }

#[inline(always)]
fn pick(n1: u32, board: u32, rows_left: u32, cols: u32, d1: u64, d2: u64, blocked: &[u32; 32]) -> (u32, u32, u32) {
    // returns (count, row, free) of the row with the fewest free squares
    let mut best: u64 = u64::MAX;
    let mut rl = rows_left;
    while rl != 0 {
        let r = rl.trailing_zeros();
        rl &= rl - 1;
        let f = board & !(cols | (d1 >> r) as u32 | (d2 >> (n1 - r)) as u32 | blocked[(r & 31) as usize]);
        let key = ((f.count_ones() as u64) << 40) | ((r as u64) << 32) | f as u64;
        best = best.min(key);
    }
    ((best >> 40) as u32, ((best >> 32) & 0xff) as u32, best as u32)
}

fn count(n: u32, board: u32, rows0: u32, cols0: u32, d10: u64, d20: u64, blocked: &[u32; 32], nodes: &mut u64) -> u64 {
    let n1 = n - 1;
    let (mut rows_left, mut cols, mut d1, mut d2) = (rows0, cols0, d10, d20);
    if rows_left.count_ones() <= 2 { return 0; } // prototype: skip tiny
    let (c, r, f) = pick(n1, board, rows_left, cols, d1, d2, blocked);
    if c == 0 { return 0; }
    let mut stack = [Fr::default(); 32];
    let mut k = 0usize;
    stack[0] = Fr { row: r, free: f, bit: 0 };
    let mut sols = 0u64;
    loop {
        let fr = &mut stack[k & 31];
        // undo the previous child placed from this frame
        if fr.bit != 0 {
            let (b, r) = (fr.bit, fr.row);
            cols ^= b; d1 ^= (b as u64) << r; d2 ^= (b as u64) << (n1 - r); rows_left |= 1 << r;
            fr.bit = 0;
        }
        if fr.free == 0 {
            if k == 0 { break; }
            k -= 1;
            continue;
        }
        let b = fr.free & fr.free.wrapping_neg();
        fr.free ^= b;
        fr.bit = b;
        let r = fr.row;
        *nodes += 1;
        cols ^= b; d1 ^= (b as u64) << r; d2 ^= (b as u64) << (n1 - r); rows_left &= !(1 << r);
        if rows_left.count_ones() == 2 {
            let r1 = rows_left.trailing_zeros(); let r2 = 31 - rows_left.leading_zeros();
            let f1 = board & !(cols | (d1 >> r1) as u32 | (d2 >> (n1 - r1)) as u32 | blocked[(r1 & 31) as usize]);
            let f2 = board & !(cols | (d1 >> r2) as u32 | (d2 >> (n1 - r2)) as u32 | blocked[(r2 & 31) as usize]);
            let open = !cols & board; let lo = open & open.wrapping_neg(); let hi = open ^ lo;
            let apart = (hi != lo << (r2 - r1)) as u64;
            sols += apart * ((((f1 & lo) != 0) & ((f2 & hi) != 0)) as u64 + (((f1 & hi) != 0) & ((f2 & lo) != 0)) as u64);
            continue;
        }
        let (c, r2, f2) = pick(n1, board, rows_left, cols, d1, d2, blocked);
        if c != 0 {
            k += 1;
            stack[k & 31] = Fr { row: r2, free: f2, bit: 0 };
        }
    }
    sols
}

fn main() {
    let n: u8 = std::env::args().nth(1).unwrap().parse().unwrap();
    let full = (1u32 << n) - 1;
    let t0 = std::time::Instant::now(); let mut nodes = 0; let mut q = 0;
    for (c, w) in canonical_constellations(n) {
        let qs = c.queens(n); let (mut cols, mut d1, mut d2, mut rows) = (0u32, 0u64, 0u64, full);
        for &(r, cc) in &qs { let (r, cc) = (r as u32, cc as u32); cols |= 1 << cc; d1 |= 1 << (r + cc); d2 |= 1 << (cc + n as u32 - 1 - r); rows &= !(1 << r); }
        let blocked = [0u32; 32];
        q += w as u64 * count(n as u32, full, rows, cols, d1, d2, &blocked, &mut nodes);
    }
    println!("mrv2: total={q} nodes={nodes} {:?}", t0.elapsed());
}
