//! A client without a token that holds as many connections to a port as it can, from several
//! loopback addresses, and never makes a call: what an attacker who can only reach the port
//! does to take the coordinator's descriptors.
//!
//! Each of its connections is either an idle HTTP/2 connection (the preface and settings sent,
//! the server's pings answered by hyper's client, no request ever) or a silent TCP connection (an
//! HTTP request head never sent). Whenever the coordinator closes one, it is opened again a
//! moment later, from the same address.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

/// The pause before a closed connection is opened again.
pub const REOPEN_AFTER: Duration = Duration::from_millis(100);

/// What each connection of a [`Flood`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speech {
    /// An HTTP/2 client that answers pings and never makes a call (the gRPC port).
    IdleHttp2,
    /// Nothing at all (the HTTP port: a request head that never comes).
    Silent,
}

/// Connections held open against a port (see the module doc); they close when it is dropped.
pub struct Flood {
    open: Arc<AtomicUsize>,
    opened: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Flood {
    /// Starts `per_source` connections from each of `sources` to 127.0.0.1:`port`, each saying
    /// `speech`. Must be called inside a tokio runtime.
    pub fn start(port: u16, sources: &[Ipv4Addr], per_source: usize, speech: Speech) -> Flood {
        let open = Arc::new(AtomicUsize::new(0));
        let opened = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for &source in sources {
            for _ in 0..per_source {
                let (open, opened) = (open.clone(), opened.clone());
                tasks.push(tokio::spawn(async move {
                    loop {
                        if let Some(stream) = connect(source, port).await {
                            opened.fetch_add(1, Ordering::Relaxed);
                            open.fetch_add(1, Ordering::Relaxed);
                            hold(stream, speech).await;
                            open.fetch_sub(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(REOPEN_AFTER).await;
                    }
                }));
            }
        }
        Flood { open, opened, tasks }
    }

    /// Connections open now (as this side sees them).
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections opened so far: beyond the number it holds, each was closed by the other side.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A connection from `source` to 127.0.0.1:`port`, or `None` when it cannot be made within 2 s.
async fn connect(source: Ipv4Addr, port: u16) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind((source, 0).into()).ok()?;
    let connecting = socket.connect((Ipv4Addr::LOCALHOST, port).into());
    tokio::time::timeout(Duration::from_secs(2), connecting).await.ok()?.ok()
}

/// Holds `stream` open, saying `speech`, until the other side closes it.
async fn hold(mut stream: TcpStream, speech: Speech) {
    match speech {
        Speech::IdleHttp2 => {
            let io = hyper_util::rt::TokioIo::new(stream);
            let executor = hyper_util::rt::TokioExecutor::new();
            let Ok((sender, connection)) = hyper::client::conn::http2::handshake::<
                _,
                _,
                http_body_util::Empty<hyper::body::Bytes>,
            >(executor, io)
            .await
            else {
                return;
            };
            // Driving the connection answers the server's pings; it ends when the server closes
            // it. The sender is kept: dropping it would close the connection from this side.
            let _ = connection.await;
            drop(sender);
        }
        Speech::Silent => {
            let mut buf = [0u8; 256];
            while let Ok(k) = stream.read(&mut buf).await {
                if k == 0 {
                    break;
                }
            }
        }
    }
}
