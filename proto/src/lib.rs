//! The gRPC contract between coordinator and workers, generated from
//! `proto/nqueens/v1/cluster.proto`.
//!
//! Kept in its own crate so coordinator, worker and tests share one definition and one version
//! check.

/// The generated messages and services of package `nqueens.v1`.
#[allow(missing_docs)] // generated code; the .proto file documents every message and field
pub mod v1 {
    tonic::include_proto!("nqueens.v1");
}

pub use v1::*;

pub mod bounds;
pub mod convert;
pub use bounds::CheckBounds;
pub use convert::WireError;

/// Major version of the wire protocol and job semantics; part of every run fingerprint, so a worker
/// built for another major version is refused.
pub const PROTOCOL_MAJOR: u32 = 1;

/// Metadata key carrying the shared-secret token (`authorization: Bearer <token>`).
pub const AUTH_HEADER: &str = "authorization";

/// The typed reason of a gRPC status returned by the coordinator, if it carries one.
pub fn status_reason(status: &tonic::Status) -> Option<ErrorDetail> {
    use prost::Message;
    if status.details().is_empty() {
        return None;
    }
    ErrorDetail::decode(status.details()).ok()
}

/// A gRPC status carrying a typed [`Reason`] in its details.
pub fn status_with_reason(
    code: tonic::Code,
    reason: Reason,
    message: impl Into<String>,
) -> tonic::Status {
    use prost::Message;
    let message = message.into();
    let detail = ErrorDetail { reason: reason as i32, message: message.clone() };
    tonic::Status::with_details(code, message, detail.encode_to_vec().into())
}

/// Adds the shared-secret token to every outgoing call.
#[derive(Clone)]
pub struct TokenInterceptor {
    header: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl TokenInterceptor {
    /// An interceptor that sends `token` (none: sends nothing); an error if it cannot be a header.
    pub fn new(token: Option<&str>) -> Result<Self, tonic::Status> {
        let header = match token {
            Some(t) if !t.is_empty() => Some(format!("Bearer {t}").parse().map_err(|_| {
                tonic::Status::invalid_argument("the token must be printable ASCII")
            })?),
            _ => None,
        };
        Ok(TokenInterceptor { header })
    }
}

impl tonic::service::Interceptor for TokenInterceptor {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(h) = &self.header {
            req.metadata_mut().insert(AUTH_HEADER, h.clone());
        }
        Ok(req)
    }
}

/// A client of the coordinator service that sends the token on every call.
pub type Client = coordinator_client::CoordinatorClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, TokenInterceptor>,
>;

/// Connects to `url` (`http://host:7447`, or `https://...` with `tls_ca` the PEM of the CA that
/// signed the coordinator's certificate). A bare `host:port` means http.
pub async fn connect_channel(
    url: &str,
    tls_ca: Option<&[u8]>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let url = if url.contains("://") { url.to_owned() } else { format!("http://{url}") };
    let mut endpoint = tonic::transport::Endpoint::from_shared(url)?
        .connect_timeout(std::time::Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(std::time::Duration::from_secs(20))
        .keep_alive_while_idle(true);
    if let Some(ca) = tls_ca {
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca));
        endpoint = endpoint.tls_config(tls)?;
    }
    endpoint.connect().await
}

/// A coordinator client over `channel` carrying `token`.
pub fn client(
    channel: tonic::transport::Channel,
    token: Option<&str>,
) -> Result<Client, tonic::Status> {
    Ok(coordinator_client::CoordinatorClient::with_interceptor(
        channel,
        TokenInterceptor::new(token)?,
    )
    .max_decoding_message_size(64 << 20))
}
