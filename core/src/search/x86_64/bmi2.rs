//! The BMI2/AVX2 build: the five-row form of [`crate::search::body`], compiled for BMI1/BMI2,
//! POPCNT and AVX2 (`blsi`, `shlx`, `pext`, `popcnt`, and the tail rows' masks of one queen
//! computed in one vector).

use crate::search::{Found, Lanes, Layout, State};
use crate::tail::{allowed, TAIL};
use std::arch::x86_64::*;

cpu_features!($ bmi2 = ["bmi1", "bmi2", "popcnt", "avx2"]);

/// Whether this CPU runs `pext` in microcode: AMD's family 0x17 (Zen 1, Zen+, Zen 2), where it
/// takes 18 cycles with an empty mask and hundreds with many bits set (about 3 from Zen 3 on).
/// This build calls it for every tail row, so it is not run there.
pub(in crate::search) fn pext_is_slow() -> bool {
    let vendor = __cpuid(0);
    let name = [vendor.ebx, vendor.edx, vendor.ecx].map(u32::to_le_bytes).concat();
    microcoded_pext(&name, __cpuid(1).eax)
}

/// Whether the CPU of `vendor` (CPUID leaf 0's name) and `signature` (leaf 1's EAX) is one whose
/// `pext` is microcoded: an AMD of family 0x17 (the base family 0xF plus the extended family 8).
pub(in crate::search) fn microcoded_pext(vendor: &[u8], signature: u32) -> bool {
    let base = (signature >> 8) & 0xf;
    let family = if base == 0xf { base + ((signature >> 20) & 0xff) } else { base };
    vendor == b"AuthenticAMD" && family == 0x17
}

impl Layout {
    bmi2! {
        /// Counts the completions of `start` with the BMI2/AVX2 build.
        ///
        /// # Safety
        ///
        /// Compiled for [`FEATURES`]: call it only where the CPU has them ([`detected`]), as
        /// [`crate::search::Detected`] does. On a CPU without them it is undefined behaviour.
        pub(in crate::search) fn count_bmi2(&self, start: &State) -> Found {
            self.count_body(start, |bit, above: &Lanes, reach: &Lanes, open| {
                let vector = |l: &Lanes| {
                    let v = l.0.map(|x| x as i32);
                    _mm256_setr_epi32(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7])
                };
                let (above, reach) = (vector(above), vector(reach));
                let queen = _mm256_set1_epi32(bit as i32);
                let right = _mm256_sllv_epi32(queen, reach);
                let left = _mm256_srlv_epi32(queen, reach);
                let free = _mm256_andnot_si256(_mm256_or_si256(right, left), above);
                let (low, high) =
                    (_mm256_castsi256_si128(free), _mm256_extracti128_si256::<1>(free));
                let rows = [
                    _mm_cvtsi128_si32(low),
                    _mm_extract_epi32::<1>(low),
                    _mm_extract_epi32::<2>(low),
                    _mm_extract_epi32::<3>(low),
                    _mm_cvtsi128_si32(high),
                ];
                allowed(open, &rows.map(|r| r as u32), |open, free: &[u32; TAIL]| {
                    free.map(|f| _pext_u32(f, open))
                })
            })
        }
    }
}
