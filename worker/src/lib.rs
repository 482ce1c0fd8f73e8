//! The worker: leases jobs, solves them with rayon, streams results back.
