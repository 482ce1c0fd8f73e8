// Prototype: node counts with dynamic row ordering (fewest free squares first).
use nqueens_core::*;
fn count(n: u32, rows_left: u32, cols: u32, d1: u64, d2: u64, full: u32, nodes: &mut u64) -> u64 {
    if rows_left == 0 { return 1; }
    // pick row with fewest free
    let mut best_row = 0; let mut best_free = 0u32; let mut best_cnt = 99;
    let mut rl = rows_left;
    while rl != 0 { let r = rl.trailing_zeros(); rl &= rl - 1;
        let f = full & !(cols | (d1 >> r) as u32 | (d2 >> (n - 1 - r)) as u32);
        let c = f.count_ones(); if std::env::var_os("UNIT").is_some() { if c == 0 { return 0; } if c == 1 && best_cnt > 1 { best_cnt = 1; best_row = r; best_free = f; } else if best_cnt == 99 { best_cnt = 98; best_row = r; best_free = f; } continue; }
        if c < best_cnt { best_cnt = c; best_row = r; best_free = f; if c == 0 { return 0; } } }
    let r = best_row; let mut free = best_free; let mut t = 0;
    while free != 0 { let c = free.trailing_zeros(); free &= free - 1; *nodes += 1;
        t += count(n, rows_left & !(1 << r), cols | 1 << c, d1 | 1 << (r + c), d2 | 1 << (c + n - 1 - r), full, nodes); }
    t
}
fn main() {
    let n: u8 = std::env::args().nth(1).unwrap().parse().unwrap();
    let full = (1u32 << n) - 1;
    let t0 = std::time::Instant::now(); let mut nodes = 0; let mut q = 0;
    for (c, w) in canonical_constellations(n) {
        let qs = c.queens(n); let (mut cols, mut d1, mut d2, mut rows) = (0u32, 0u64, 0u64, full);
        for &(r, cc) in &qs { let (r, cc) = (r as u32, cc as u32); cols |= 1 << cc; d1 |= 1 << (r + cc); d2 |= 1 << (cc + n as u32 - 1 - r); rows &= !(1 << r); }
        q += w as u64 * count(n as u32, rows, cols, d1, d2, full, &mut nodes);
    }
    println!("mrv: total={q} nodes={nodes} {:?}", t0.elapsed());
}
