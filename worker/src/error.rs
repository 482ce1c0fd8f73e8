//! Errors: [`WorkerError`] ends the worker; [`SessionError`] ends one connection, and the reconnect
//! loop logs it with its cause in plain words ([`SessionError::why`]) and its chain once
//! ([`SessionError::chain`]).

use nqueens_proto::Reason;
use std::error::Error as StdError;
use std::fmt;
use thiserror::Error;

/// Why a worker stopped with an error.
#[derive(Debug, Error)]
pub enum WorkerError {
    /// This machine's solver gave a wrong count for a known answer: its results cannot be trusted.
    #[error("solver self-test failed: N={n} gave {found}, expected {expected}")]
    SelfTest {
        /// Board size tested.
        n: u32,
        /// Count found.
        found: u64,
        /// Known count.
        expected: u64,
    },
    /// The coordinator refused this worker for a reason that reconnecting cannot fix.
    #[error("the coordinator refused this worker ({reason:?}): {message}")]
    Refused {
        /// The coordinator's typed reason.
        reason: Reason,
        /// The coordinator's explanation.
        message: String,
    },
    /// The solver threads could not be started.
    #[error("starting the solver pool")]
    Pool(#[source] rayon::ThreadPoolBuildError),
    /// The GPU asked for (`--gpu INDEX`) cannot be used.
    #[error("the GPU cannot be used")]
    Gpu(#[from] nqueens_gpu::GpuError),
    /// The GPU gave a wrong count for a known answer: its results cannot be trusted.
    #[error("GPU self-test failed: N={n} gave {found}, expected {expected}")]
    GpuSelfTest {
        /// Board size tested.
        n: u32,
        /// Count found.
        found: u64,
        /// Known count.
        expected: u64,
    },
}

/// Why one session with the coordinator ended; the reconnect loop retries after any of these
/// unless the coordinator's status carries a refusal that retrying cannot fix.
#[derive(Debug, Error)]
pub(crate) enum SessionError {
    #[error("connecting to {url}")]
    Connect {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("connecting to {url}: no usable connection within {}s", waited.as_secs())]
    ConnectTimeout { url: String, waited: std::time::Duration },
    #[error("{call} call")]
    Call {
        call: &'static str,
        #[source]
        source: tonic::Status,
    },
    #[error("the coordinator closed the result stream")]
    StreamClosed,
    /// An answer past the contract's bounds (`nqueens_proto::bounds`): not read any further.
    #[error("{call} answer")]
    Answer {
        call: &'static str,
        #[source]
        source: nqueens_proto::WireError,
    },
}

impl SessionError {
    /// The error and its causes, each said once (see [`Chain`]).
    pub(crate) fn chain(&self) -> Chain<'_> {
        Chain(self)
    }

    /// The cause in plain words, where it can be told from the error.
    pub(crate) fn why(&self) -> &'static str {
        match self {
            SessionError::ConnectTimeout { .. } => {
                "the coordinator's address accepts connections but does not answer"
            }
            SessionError::Connect { source, .. } => {
                cause_in_chain(source).unwrap_or("cannot connect to the coordinator")
            }
            SessionError::Call { source, .. } => match source.code() {
                tonic::Code::Unauthenticated => {
                    "the coordinator did not accept the token (--token / NQ_TOKEN)"
                }
                tonic::Code::DeadlineExceeded => "the coordinator did not answer in time",
                tonic::Code::Cancelled if source.message() == "Timeout expired" => {
                    "the coordinator did not answer in time"
                }
                code => cause_in_chain(source).unwrap_or(if code == tonic::Code::Unavailable {
                    "the coordinator is unavailable (stopped, restarting or cut off)"
                } else {
                    "the coordinator answered with an error"
                }),
            },
            SessionError::StreamClosed => "the coordinator closed the result stream",
            SessionError::Answer { .. } => "the coordinator's answer breaks the protocol's bounds",
        }
    }
}

const DROPPED: &str =
    "the connection broke (a coordinator serving TLS breaks http:// connections: use https://)";

/// Plain words for a connection failure found anywhere in an error's chain: refused, timed out,
/// dropped, unknown host name or TLS.
fn cause_in_chain(err: &(dyn StdError + 'static)) -> Option<&'static str> {
    let mut next = Some(err);
    let mut texts = String::new();
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            match io.kind() {
                ConnectionRefused => {
                    return Some("connection refused: nothing listens at that address and port")
                }
                TimedOut => {
                    return Some("timed out: the host does not answer (down or firewalled)")
                }
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => {
                    return Some(DROPPED)
                }
                _ => {}
            }
        }
        texts.push_str(&e.to_string().to_lowercase());
        texts.push('\n');
        next = e.source();
    }
    let has = |words: &[&str]| words.iter().any(|w| texts.contains(w));
    if has(&["dns error", "failed to lookup address"]) {
        Some("the host name does not resolve")
    } else if has(&["corrupt message", "invalidcontenttype"]) {
        Some("TLS failed: the coordinator there does not serve TLS (use http://)")
    } else if has(&["certificate", "tls", "handshake"]) {
        Some("TLS failed: is --tls-ca the CA that signed the coordinator's certificate?")
    } else if has(&["broken pipe", "connection reset", "stream closed", "frame with invalid size"])
    {
        Some(DROPPED)
    } else {
        None
    }
}

/// Displays an error and its sources joined by ": ", each said once: a layer whose text is already
/// in the line (hyper's "tcp connect error: <cause>", a status whose message is its source's) is
/// skipped, and a gRPC status shows as its code and message only.
pub(crate) struct Chain<'a>(&'a (dyn StdError + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut said = String::new();
        let mut next = Some(self.0);
        while let Some(e) = next {
            let text = match e.downcast_ref::<tonic::Status>() {
                Some(s) if s.message().is_empty() => format!("{:?}", s.code()),
                Some(s) => format!("{:?}: {}", s.code(), s.message()),
                None => e.to_string(),
            };
            if !said.contains(&text) {
                if !said.is_empty() {
                    said.push_str(": ");
                }
                said.push_str(&text);
            }
            next = e.source();
        }
        f.write_str(&said)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Error)]
    #[error("tcp connect error: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn chain_says_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let status = tonic::Status::from_error(Box::new(Repeats(io)));
        let e = SessionError::Call { call: "lease", source: status };
        assert_eq!(
            e.chain().to_string(),
            "lease call: Unknown: tcp connect error: Connection refused"
        );
    }

    #[test]
    fn causes_are_said_in_plain_words() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        assert!(cause_in_chain(&Repeats(io)).unwrap().starts_with("connection refused"));
        let status = tonic::Status::unauthenticated("missing or wrong token");
        let e = SessionError::Call { call: "lease", source: status };
        assert!(e.why().contains("did not accept the token"), "{}", e.why());
    }
}
