//! The gRPC contract between coordinator and workers (filled in with the cluster).
