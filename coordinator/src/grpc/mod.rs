//! The gRPC port: the service's handlers ([`service`]), the conversions between its messages and
//! the engine's domain types ([`wire`], where the protocol ends), the accept loop that bounds
//! connections ([`connections`]) and the caps that decide which connections stay
//! ([`admission`]).

pub(crate) mod admission;
pub(crate) mod auth;
pub(crate) mod connections;
pub(crate) mod service;
pub(crate) mod wire;

pub use connections::GrpcLimits;
