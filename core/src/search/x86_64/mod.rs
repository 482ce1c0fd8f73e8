//! The x86-64 builds of the search, one module per set of CPU features.
//!
//! Each build writes its CPU features once, in [`cpu_features!`]: the same list makes both its
//! functions' `#[target_feature]` attributes and its run-time check, so the two cannot differ (a
//! function compiled for a feature that the CPU lacks is undefined behaviour).

/// Declares the CPU features of the build in the calling module, written once, and defines there:
/// - `FEATURES`, the list;
/// - `detected()`, whether this CPU has every one of them (`is_x86_feature_detected!`);
/// - `detection()` (tests only), each feature with whether this CPU has it;
/// - a macro named by the caller, which compiles the one function inside it for exactly these
///   features: it adds one `#[target_feature(enable = "...")]` per feature.
///
/// Called as `cpu_features!($ name = ["bmi1", "bmi2"]);`. The leading `$` is handed through to
/// the macro it defines, whose own variables need one: a `macro_rules!` body cannot write a bare
/// `$` itself.
macro_rules! cpu_features {
    ($d:tt $wrap:ident = [$($feature:tt),+ $(,)?]) => {
        /// This build's CPU features: what its functions are compiled for, and what
        /// [`detected`] checks.
        pub(in crate::search) const FEATURES: &[&str] = &[$($feature),+];

        /// Whether this CPU has every one of [`FEATURES`].
        pub(in crate::search) fn detected() -> bool {
            true $(&& std::arch::is_x86_feature_detected!($feature))+
        }

        /// Each of [`FEATURES`] with whether this CPU has it.
        #[cfg(test)]
        pub(in crate::search) fn detection() -> Vec<(&'static str, bool)> {
            vec![$(($feature, std::arch::is_x86_feature_detected!($feature))),+]
        }

        /// Compiles the function inside for exactly [`FEATURES`].
        macro_rules! $wrap {
            ($d(#[$d meta:meta])* $d vis:vis fn $d($d rest:tt)*) => {
                $d(#[$d meta])*
                $(#[target_feature(enable = $feature)])+
                $d vis fn $d($d rest)*
            };
        }
    };
}

pub(super) mod avx2;
pub(super) mod avx512;
pub(super) mod bmi2;
mod waiting;
