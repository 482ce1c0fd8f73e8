//! Which build of the search runs: picked once per process from the CPU's features, then kept.
//!
//! This is the one place where a build is entered: [`Detected::count`] calls a build's
//! `#[target_feature]` function, which is sound only on a CPU with those features, and a
//! [`Detected`] exists only for a build whose features were detected.

#[cfg(target_arch = "x86_64")]
use super::x86_64::{avx2, avx512, bmi2};
use super::{Found, Layout, State};
use std::sync::OnceLock;

/// One compiled form of the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Build {
    /// Plain Rust, for any CPU: the five-row form.
    Portable,
    /// BMI1/BMI2, POPCNT and AVX2: the five-row form. Never detected on AMD's family 0x17,
    /// whose `pext` is microcoded.
    #[cfg(target_arch = "x86_64")]
    Bmi2,
    /// AVX2, BMI1 and POPCNT (no `pext`): the six-row form, batched eight lanes at a time.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512 (F, VL, BW, BITALG, VBMI2, VPOPCNTDQ) and BMI2/AVX2: the six-row form.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Build {
    /// Every build compiled for this target, the narrowest first.
    #[cfg(target_arch = "x86_64")]
    pub const ALL: &'static [Build] = &[Build::Portable, Build::Bmi2, Build::Avx2, Build::Avx512];
    /// Every build compiled for this target, the narrowest first.
    #[cfg(not(target_arch = "x86_64"))]
    pub const ALL: &'static [Build] = &[Build::Portable];

    /// The build's name, as `NQ_SOLVER_BUILD` takes it: `portable`, `bmi`, `avx2` or `avx512`.
    pub fn name(self) -> &'static str {
        match self {
            Build::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Build::Bmi2 => "bmi",
            #[cfg(target_arch = "x86_64")]
            Build::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Build::Avx512 => "avx512",
        }
    }

    /// The CPU features the build is compiled for (none for the portable build).
    pub fn features(self) -> &'static [&'static str] {
        match self {
            Build::Portable => &[],
            #[cfg(target_arch = "x86_64")]
            Build::Bmi2 => bmi2::FEATURES,
            #[cfg(target_arch = "x86_64")]
            Build::Avx2 => avx2::FEATURES,
            #[cfg(target_arch = "x86_64")]
            Build::Avx512 => avx512::FEATURES,
        }
    }

    /// This build, if this CPU has every feature it is compiled for and runs it at full speed.
    /// The AVX-512 build also needs the BMI2/AVX2 build (its features are a superset): it hands
    /// that build the searches it cannot take. The BMI2/AVX2 build is not run where `pext` is
    /// microcoded ([`bmi2::pext_is_slow`]).
    pub fn detect(self) -> Option<Detected> {
        let detected = match self {
            Build::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Build::Bmi2 => bmi2::detected() && !bmi2::pext_is_slow(),
            #[cfg(target_arch = "x86_64")]
            Build::Avx2 => avx2::detected(),
            #[cfg(target_arch = "x86_64")]
            Build::Avx512 => avx512::detected() && bmi2::detected(),
        };
        detected.then_some(Detected(self))
    }
}

/// A build that this CPU can run. Only [`Build::detect`] makes one: holding one is the proof that
/// the CPU has the build's features, on which [`Detected::count`] relies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Detected(Build);

impl Detected {
    /// The build that every search of this process uses: the widest that the CPU runs and that
    /// `NQ_SOLVER_BUILD` allows (`portable`, `bmi` or `avx2`, for comparing builds on one
    /// machine; unset or anything else, the CPU decides). Chosen on the first call, then kept.
    pub fn selected() -> Detected {
        static SELECTED: OnceLock<Detected> = OnceLock::new();
        *SELECTED.get_or_init(|| {
            let allowed = std::env::var("NQ_SOLVER_BUILD");
            let widest = Build::ALL
                .iter()
                .rposition(|b| Ok(b.name()) == allowed.as_deref())
                .unwrap_or(Build::ALL.len() - 1);
            Build::ALL[..=widest]
                .iter()
                .rev()
                .find_map(|b| b.detect())
                .expect("the portable build runs anywhere")
        })
    }

    /// The build.
    pub fn build(self) -> Build {
        self.0
    }

    /// Counts the completions of `start` with this build.
    #[inline]
    pub fn count(self, layout: &Layout, start: &State) -> Found {
        match self.0 {
            Build::Portable => layout.count_portable(start),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `self` exists, so the CPU has the build's features (`Build::detect`).
            Build::Bmi2 => unsafe { layout.count_bmi2(start) },
            #[cfg(target_arch = "x86_64")]
            Build::Avx2 => match layout.six_for(start) {
                // SAFETY: `self` exists, so the CPU has the build's features (`Build::detect`).
                Some(six) => unsafe { layout.count_avx2(start, six) },
                // Too few rows, or a start below row `last`: a small search, counted plainly.
                None => layout.count_portable(start),
            },
            #[cfg(target_arch = "x86_64")]
            Build::Avx512 => match layout.six_for(start) {
                // SAFETY: `self` exists, so the CPU has the build's features (`Build::detect`).
                Some(six) => unsafe { layout.count_avx512(start, six) },
                // SAFETY: `Build::detect` makes an AVX-512 build only where the BMI2/AVX2
                // build's features are detected too.
                None => unsafe { layout.count_bmi2(start) },
            },
        }
    }
}
