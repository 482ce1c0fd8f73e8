use nqueens_core::*;
fn main() {
    let a: Vec<u32> = std::env::args().skip(1).map(|s| s.parse().unwrap()).collect();
    for n in a[0]..=a[1] {
        let t = std::time::Instant::now();
        let jl = job_list(n, &SplitParams::default()).unwrap();
        let tg = t.elapsed();
        let mut tally = Tally::new(n).unwrap();
        for j in &jl.jobs { tally.add(j.weight, &j.solve().unwrap()).unwrap(); }
        let tt = tally.totals();
        println!("{n}: {:?} jobs={} depth={} gen={:?} total={:?} nodes={}", tt, jl.jobs.len(), jl.depth, tg, t.elapsed(), tally.nodes);
    }
}
