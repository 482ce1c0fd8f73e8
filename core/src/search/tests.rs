//! Every build that this CPU can run, against a plain count; and the builds' CPU features.

use super::*;
use crate::{job_list, SplitParams};

/// Completions by plain recursion over the layout, with no tail and no batching.
fn plain(layout: &Layout, state: &State) -> u64 {
    layout.count_partial(state, layout.rows())
}

/// The builds that this CPU can run (the portable one at least), with a note of those it cannot.
fn runnable() -> Vec<Detected> {
    let runnable: Vec<Detected> = Build::ALL.iter().filter_map(|b| b.detect()).collect();
    if runnable.len() < Build::ALL.len() {
        eprintln!("this CPU runs {runnable:?} of {:?}: the others are not checked", Build::ALL);
    }
    runnable
}

#[test]
fn every_start_depth_and_every_build_match_a_plain_count() {
    let builds = runnable();
    for n in [9u32, 11, 12] {
        for job in job_list(n, &SplitParams::with_target(1)).unwrap().jobs {
            let (layout, start) = job.prepare().unwrap();
            // Start the search at every depth: above the tail, in the row above it, in it.
            let mut states = vec![start];
            for _ in start.depth..layout.rows() {
                let mut deeper = Vec::new();
                for state in &states {
                    let mut out = Vec::new();
                    layout.expand(state, 1, &mut out, &mut Vec::new());
                    deeper.extend(out.into_iter().map(|(s, _)| s));
                }
                for state in states.iter().take(40) {
                    let want = plain(&layout, state);
                    let depth = state.depth;
                    assert_eq!(layout.count(state).solutions, want, "n={n} {job:?} depth {depth}");
                    for build in &builds {
                        let found = build.count(&layout, state);
                        assert_eq!(found.solutions, want, "{build:?}, n={n} {job:?} depth {depth}");
                    }
                    let Some(six) = layout.six_for(state) else {
                        continue;
                    };
                    // The six-row forms: the same solutions, and the same nodes as the five-row
                    // form where it has rows enough for its tail (with fewer, it counts without
                    // placing).
                    let five = layout.count_portable(state);
                    let expected = (want, (layout.rows() >= TAIL + 2).then_some(five.nodes));
                    let found = |f: Found| (f.solutions, expected.1.map(|_| f.nodes));
                    let portable6 = layout.count_portable6(state, six);
                    assert_eq!(found(portable6), expected, "six rows, portable, n={n}");
                    #[cfg(target_arch = "x86_64")]
                    for batched in [Build::Avx2, Build::Avx512].iter().filter_map(|b| b.detect()) {
                        let fast6 = batched.count(&layout, state);
                        assert_eq!(found(fast6), expected, "six rows, {batched:?}, n={n}");
                    }
                }
                states = deeper;
            }
        }
    }
}

/// Whole jobs, big enough that the six-row search's batches fill and drain many times: the
/// same solutions and nodes as the five-row build, job by job, for each batched build (sixteen
/// lanes and eight) that this CPU runs.
#[test]
#[cfg(target_arch = "x86_64")]
fn six_row_batches_match_the_five_row_build_on_whole_jobs() {
    let batched: Vec<Detected> =
        [Build::Avx2, Build::Avx512].iter().filter_map(|b| b.detect()).collect();
    if batched.is_empty() {
        eprintln!("no AVX2 on this CPU: the six-row build is checked by the portable form only");
    }
    for build in batched {
        for n in [13u32, 14, 15] {
            let (mut six_total, mut five_total, mut batches) = (0, 0, 0);
            for job in job_list(n, &SplitParams::with_target(1)).unwrap().jobs {
                let (layout, start) = job.prepare().unwrap();
                if layout.six_for(&start).is_none() {
                    continue;
                }
                let fast6 = build.count(&layout, &start);
                let five = layout.count_portable(&start);
                assert_eq!(fast6, five, "{build:?}, n={n} {job:?}");
                six_total += fast6.solutions * job.weight as u64;
                five_total += five.solutions * job.weight as u64;
                // A few tens of nodes per state of row `last - 3`: above 1,000, the batch of
                // that row (16 states) has drained at least twice.
                batches += (fast6.nodes > 1_000) as u32;
            }
            assert_eq!(six_total, five_total);
            assert!(batches > 10, "n={n}: too few big jobs ({batches}) to fill the batches");
        }
    }
}

/// Each build's CPU features with whether this CPU has them, from the build's one list.
#[cfg(target_arch = "x86_64")]
fn detection(build: Build) -> Vec<(&'static str, bool)> {
    use super::x86_64::{avx2, avx512, bmi2};
    match build {
        Build::Portable => Vec::new(),
        Build::Bmi2 => bmi2::detection(),
        Build::Avx2 => avx2::detection(),
        Build::Avx512 => avx512::detection(),
    }
}

#[test]
#[cfg(target_arch = "x86_64")]
fn a_build_is_chosen_only_where_the_cpu_has_all_its_features() {
    let selected = Detected::selected().build();
    eprintln!("selected build: {} ({:?})", selected.name(), selected.features());
    let missing = |build: Build| -> Vec<&str> {
        detection(build).into_iter().filter(|&(_, has)| !has).map(|(f, _)| f).collect()
    };
    assert_eq!(missing(selected), Vec::<&str>::new(), "{selected:?} chosen");
    for &build in Build::ALL {
        let listed: Vec<&str> = detection(build).into_iter().map(|(f, _)| f).collect();
        assert_eq!(listed, build.features(), "{build:?}: one list for both uses");
        let runnable = match build {
            Build::Portable => true,
            Build::Bmi2 => missing(build).is_empty() && !super::x86_64::bmi2::pext_is_slow(),
            Build::Avx2 => missing(build).is_empty(),
            Build::Avx512 => missing(build).is_empty() && missing(Build::Bmi2).is_empty(),
        };
        assert_eq!(build.detect().is_some(), runnable, "{build:?}");
    }
    // Where AVX-512 is missing, AVX2 alone picks the batched eight-lane build over the BMI2 one.
    if missing(Build::Avx2).is_empty() && std::env::var("NQ_SOLVER_BUILD").is_err() {
        assert!(matches!(selected, Build::Avx2 | Build::Avx512), "{selected:?} chosen");
    }
    // The AVX-512 build hands the BMI2/AVX2 build the searches that it cannot take.
    let avx512 = Build::Avx512.features();
    assert!(Build::Bmi2.features().iter().all(|f| avx512.contains(f)));
}

/// `pext` is microcoded on AMD's family 0x17 only: CPUID signatures of real parts.
#[test]
#[cfg(target_arch = "x86_64")]
fn the_bmi2_build_is_refused_where_pext_is_microcoded() {
    use super::x86_64::bmi2::microcoded_pext;
    let (amd, intel) = (b"AuthenticAMD", b"GenuineIntel");
    // Zen 1 (EPYC 7601), Zen 2 (EPYC 7742): family 0x17.
    assert!(microcoded_pext(amd, 0x0080_0f12));
    assert!(microcoded_pext(amd, 0x0083_0f10));
    // Zen 3 (EPYC 7763), Zen 4 (EPYC 9654), Zen 5 (family 0x1a): fast `pext`.
    assert!(!microcoded_pext(amd, 0x00a0_0f11));
    assert!(!microcoded_pext(amd, 0x00a1_0f11));
    assert!(!microcoded_pext(amd, 0x00b0_0f00));
    // An Intel part with the same signature bits, and a Sapphire Rapids.
    assert!(!microcoded_pext(intel, 0x0083_0f10));
    assert!(!microcoded_pext(intel, 0x0008_06f8));
}

#[test]
fn the_selected_build_is_the_widest_that_the_cpu_runs_unless_limited() {
    let selected = Detected::selected().build();
    assert!(selected.detect().is_some());
    let widest = Build::ALL.iter().rev().find_map(|b| b.detect()).unwrap().build();
    match std::env::var("NQ_SOLVER_BUILD").as_deref() {
        Ok("portable") => assert_eq!(selected, Build::Portable),
        Ok(limit) => assert!(selected.name() == limit || selected == widest),
        Err(_) => assert_eq!(selected, widest),
    }
}

/// The AVX-512 build's probes (`breakdown` feature): every part timed inside the count's total,
/// the dead states among those tested, and a state of row `last` tested for each state of row
/// `last - 1` that survives with a queen. Without the probes, or on a CPU that runs another build,
/// they gather nothing.
#[test]
fn the_probes_time_each_part_inside_the_total() {
    use crate::breakdown::{self, Breakdown, Event, Part};
    let list = job_list(16, &SplitParams::default()).unwrap();
    breakdown::take();
    let solutions: u64 = list.jobs.iter().take(40).map(|j| j.solve().unwrap().solutions).sum();
    let gathered = breakdown::take();
    #[cfg(target_arch = "x86_64")]
    let probed = breakdown::ENABLED && Detected::selected().build() == Build::Avx512;
    #[cfg(not(target_arch = "x86_64"))]
    let probed = false;
    if !probed {
        assert_eq!(gathered, Breakdown::default());
        return;
    }
    assert!(solutions > 0);
    let parts = [Part::Count, Part::DeadLast, Part::Row1, Part::Row2, Part::Row3, Part::Row4];
    let inside: u64 = parts.iter().map(|&p| gathered.ticks(p)).sum();
    assert!(parts.iter().all(|&p| gathered.ticks(p) > 0), "{gathered:?}");
    assert!(inside < gathered.ticks(Part::Total), "{gathered:?}");
    let (tested, dead) = (gathered.events(Event::LastTested), gathered.events(Event::LastDead));
    assert!(0 < dead && dead < tested, "{gathered:?}");
    let (tested1, dead1) = (gathered.events(Event::Row1Tested), gathered.events(Event::Row1Dead));
    assert!(0 < dead1 && dead1 < tested1 && tested1 - dead1 <= tested, "{gathered:?}");
}
