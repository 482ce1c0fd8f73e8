// Prototype: node counts of the constellation search under different row orders.
use nqueens_core::*;
fn count(n: u8, order: &[u8], k: usize, cols: u32, d1: u64, d2: u64, full: u32, nodes: &mut u64) -> u64 {
    if k == order.len() { return 1; }
    let r = order[k] as u32;
    let mut free = full & !(cols | (d1 >> r) as u32 | (d2 >> (n as u32 - 1 - r)) as u32);
    let mut t = 0;
    while free != 0 {
        let c = free.trailing_zeros();
        free &= free - 1;
        *nodes += 1; unsafe { HIST[order.len() - k] += 1; }
        t += count(n, order, k + 1, cols | 1 << c, d1 | 1 << (r + c), d2 | 1 << (c + n as u32 - 1 - r), full, nodes);
    }
    t
}
static mut HIST: [u64; 33] = [0; 33];
fn main() {
    let n: u8 = std::env::args().nth(1).unwrap().parse().unwrap();
    let full = (1u32 << n) - 1;
    let setup = |c: &Constellation| { let qs = c.queens(n); let (mut cols, mut d1, mut d2) = (0u32, 0u64, 0u64);
            for &(r, cc) in &qs { let (r, cc) = (r as u32, cc as u32); cols |= 1 << cc; d1 |= 1 << (r + cc); d2 |= 1 << (cc + n as u32 - 1 - r); }
            let rows: Vec<u8> = (0..n).filter(|r| !qs.iter().any(|q| q.0 == *r)).collect(); (cols, d1, d2, rows) };
    for depth in [0usize; 0] {
        let t0 = std::time::Instant::now();
        let mut nodes = 0; let mut q = 0;
        for (c, w) in canonical_constellations(n) {
            let mut best = (u64::MAX, c);
            for s in Symmetry::ALL { let img = c.transformed(n, s); let (cols, d1, d2, rows) = setup(&img);
                let mut nn = 0; count(n, &rows[..depth.min(rows.len())], 0, cols, d1, d2, full, &mut nn); if nn < best.0 { best = (nn, img); } }
            let (cols, d1, d2, rows) = setup(&best.1);
            q += w as u64 * count(n, &rows, 0, cols, d1, d2, full, &mut nodes);
        }
        println!("best-of-8 lookahead {depth}: total={q} nodes={nodes} {:?}", t0.elapsed());
    }
    for strategy in ["bottom-up"] {
        let t0 = std::time::Instant::now();
        let mut nodes = 0; let mut q = 0;
        for (c, w) in canonical_constellations(n) {
            let qs = c.queens(n);
            let (mut cols, mut d1, mut d2) = (0u32, 0u64, 0u64);
            for &(r, cc) in &qs { let (r, cc) = (r as u32, cc as u32); cols |= 1 << cc; d1 |= 1 << (r + cc); d2 |= 1 << (cc + n as u32 - 1 - r); }
            let mut rows: Vec<u8> = (0..n).filter(|r| !qs.iter().any(|q| q.0 == *r)).collect();
            let m = n as i32 - 1;
            match strategy {
                "outside-in" => rows.sort_by_key(|&r| (r as i32).min(m - r as i32)),
                "inside-out" => rows.sort_by_key(|&r| -(r as i32).min(m - r as i32)),
                "bottom-up" => rows.reverse(),
                "most-blocked" => rows.sort_by_key(|&r| { let r = r as u32; (full & !(cols | (d1 >> r) as u32 | (d2 >> (n as u32 - 1 - r)) as u32)).count_ones() }),
                _ => {}
            }
            q += w as u64 * count(n, &rows, 0, cols, d1, d2, full, &mut nodes);
        }
        unsafe { println!("{:?}", &HIST[..n as usize]); }
        println!("{strategy:>14}: total={q} nodes={nodes} {:?}", t0.elapsed());
    }
}
