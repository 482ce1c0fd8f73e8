//! The gRPC port: the service's handlers ([`service`]), the conversions between its messages and
//! the engine's domain types ([`wire`], where the protocol ends), and the accept loop that bounds
//! connections ([`connections`]).

pub(crate) mod auth;
pub(crate) mod connections;
pub(crate) mod service;
pub(crate) mod wire;

pub use connections::GrpcLimits;
