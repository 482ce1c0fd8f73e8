//! The coordinator library.
