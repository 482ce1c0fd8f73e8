//! Which gRPC connections the port keeps: a connection earns its place with its first
//! authenticated call, and one that has not earned it yet gives way to newer ones.
//!
//! Each accepted connection is *waiting* until a call on it proves authenticated: a registration
//! that succeeded, a call of a registered worker that the engine took (lease, heartbeat, release,
//! a result stream's first answer), or a status call under the shared token. From then on it is
//! *authenticated*, and nothing but its own silence or its client's going away closes it.
//!
//! - **A cap on all of them** ([`Admission::new`]'s `max_connections`, derived from the
//!   descriptor limit: see `fd_limit.rs`). When it is reached, a new connection pushes out a
//!   waiting one: the oldest of the address holding the most waiting ones (`waiting.rs`). Only
//!   when every connection is authenticated is the new one closed instead. So no number of
//!   connections without a token displaces a worker, and a newcomer alone on its address is
//!   never the one pushed out while a flood holds more than one connection per address.
//! - **A cap per address on waiting connections** (`--grpc-max-conns-per-ip`): one more from an
//!   address that holds as many is closed at once. Authenticated connections do not count, so
//!   thousands of workers behind one address (a NAT gateway) each keep theirs.
//! - **A deadline to earn it** (`--grpc-auth-seconds`): a connection still waiting that long
//!   after its accept is closed (see `connections.rs`, where its reads fail).
//!
//! How a call marks its connection: [`super::connections::Guarded`] hands tonic a [`Connection`]
//! as its connect info, which tonic puts into every request's extensions; the service takes it
//! out with [`ConnectionMark::of`] and, once the engine has taken the call, says
//! [`ConnectionMark::authenticated`]. The mark is shared with the socket (an atomic flag and a
//! cancellation token), so the socket learns it at its next read.

use crate::accept::RateLimitedLog;
use crate::waiting::Waiting;
use parking_lot::Mutex;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tonic::Request;

/// The connections counted against the caps.
#[derive(Default)]
struct Table {
    next_id: u64,
    /// Connections that have not authenticated yet, each with what closes it.
    waiting: Waiting<CancellationToken>,
    /// Connections that have.
    authenticated: usize,
}

/// Why a new connection is closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its address already holds as many waiting connections as `--grpc-max-conns-per-ip`.
    PerAddress,
    /// Every connection the cap allows is authenticated.
    Full,
}

/// The gRPC port's connections and their caps (see the module doc).
pub struct Admission {
    table: Mutex<Table>,
    max_connections: usize,
    max_waiting_per_ip: usize,
    pushed_out: Mutex<RateLimitedLog>,
}

/// One connection's state, shared by its socket, every request made on it and the table.
struct Shared {
    id: u64,
    ip: IpAddr,
    /// Set (under the table's lock) by its first authenticated call.
    authenticated: AtomicBool,
    /// Cancelled when the connection is pushed out: its reads fail from then on.
    pushed_out: CancellationToken,
    admission: Arc<Admission>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("id", &self.id)
            .field("ip", &self.ip)
            .field("authenticated", &self.authenticated)
            .finish_non_exhaustive()
    }
}

impl Admission {
    /// A port holding at most `max_connections` connections, of which at most
    /// `max_waiting_per_ip` waiting ones from any one address.
    pub fn new(max_connections: usize, max_waiting_per_ip: usize) -> Arc<Admission> {
        Arc::new(Admission {
            table: Mutex::default(),
            max_connections: max_connections.max(1),
            max_waiting_per_ip,
            pushed_out: Mutex::default(),
        })
    }

    /// The most connections the port holds.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// A place for a new connection from `ip`, waiting; pushes out another waiting connection
    /// when the port is full.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Ticket, Refused> {
        let mut table = self.table.lock();
        if table.waiting.held_by(ip) >= self.max_waiting_per_ip {
            return Err(Refused::PerAddress);
        }
        if table.waiting.len() + table.authenticated >= self.max_connections {
            let Some((from, _, close)) = table.waiting.pop_most_held() else {
                return Err(Refused::Full);
            };
            close.cancel();
            self.pushed_out.lock().note(|pushed| {
                tracing::warn!(
                    cap = self.max_connections,
                    authenticated = table.authenticated,
                    last_from = %from,
                    pushed,
                    "gRPC port full: connections that had made no authenticated call were closed to make room"
                )
            });
        }
        let id = table.next_id;
        table.next_id += 1;
        let shared = Arc::new(Shared {
            id,
            ip,
            authenticated: AtomicBool::new(false),
            pushed_out: CancellationToken::new(),
            admission: self.clone(),
        });
        table.waiting.insert(ip, id, shared.pushed_out.clone());
        Ok(Ticket(shared))
    }

    /// How many connections are waiting and how many authenticated.
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        let table = self.table.lock();
        (table.waiting.len(), table.authenticated)
    }

    fn authenticated(&self, conn: &Shared) {
        let mut table = self.table.lock();
        // A connection pushed out meanwhile is closing: it stays uncounted.
        if !conn.authenticated.load(Ordering::Acquire)
            && table.waiting.remove(conn.ip, conn.id).is_some()
        {
            conn.authenticated.store(true, Ordering::Release);
            table.authenticated += 1;
        }
    }

    fn closed(&self, conn: &Shared) {
        let mut table = self.table.lock();
        if conn.authenticated.load(Ordering::Acquire) {
            table.authenticated -= 1;
        } else {
            // Not there when it was pushed out: it was uncounted then.
            table.waiting.remove(conn.ip, conn.id);
        }
    }
}

/// A connection's place in its [`Admission`], given back when dropped.
#[derive(Debug)]
pub struct Ticket(Arc<Shared>);

impl Ticket {
    /// Whether a call on the connection has proved authenticated.
    pub fn is_authenticated(&self) -> bool {
        self.0.authenticated.load(Ordering::Acquire)
    }

    /// Resolves once the connection is pushed out to make room for a newer one.
    pub fn pushed_out(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.0.pushed_out.clone().cancelled_owned()
    }

    /// Whether the connection was pushed out.
    pub fn is_pushed_out(&self) -> bool {
        self.0.pushed_out.is_cancelled()
    }

    /// What tonic puts into the extensions of every request on this connection.
    pub fn connection(&self, remote: Option<SocketAddr>) -> Connection {
        Connection { remote, shared: self.0.clone() }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.admission.closed(&self.0);
    }
}

/// A connection as its requests see it (tonic's connect info): its peer and its mark.
#[derive(Debug, Clone)]
pub struct Connection {
    remote: Option<SocketAddr>,
    shared: Arc<Shared>,
}

impl Connection {
    /// The connection `request` came on, where it came through a guarded port (tonic puts the
    /// socket's connect info into the extensions of TLS connections' requests too).
    fn of<T>(request: &Request<T>) -> Option<&Connection> {
        request.extensions().get::<Connection>()
    }

    /// The mark a call on this connection sets once it proved authenticated.
    pub fn mark(&self) -> ConnectionMark {
        ConnectionMark(Some(self.shared.clone()))
    }
}

/// The peer address of `request`'s connection, if known.
pub fn peer_addr<T>(request: &Request<T>) -> Option<SocketAddr> {
    Connection::of(request).and_then(|c| c.remote).or_else(|| request.remote_addr())
}

/// What a call says of its connection once it proved authenticated; does nothing for a request
/// that came without a [`Connection`] (a service served without the guarded port, in tests).
#[derive(Debug, Clone, Default)]
pub struct ConnectionMark(Option<Arc<Shared>>);

impl ConnectionMark {
    /// The mark of the connection `request` came on.
    pub fn of<T>(request: &Request<T>) -> ConnectionMark {
        Connection::of(request).map_or_else(ConnectionMark::default, Connection::mark)
    }

    /// The call proved authenticated: the connection has earned its place.
    pub fn authenticated(&self) {
        if let Some(conn) = &self.0 {
            if !conn.authenticated.load(Ordering::Acquire) {
                conn.admission.authenticated(conn);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        [127, 0, 0, last].into()
    }

    fn mark(ticket: &Ticket) -> ConnectionMark {
        ConnectionMark(Some(ticket.0.clone()))
    }

    #[test]
    fn a_full_port_pushes_out_waiting_connections_never_authenticated_ones() {
        let admission = Admission::new(4, 100);
        let worker = admission.admit(ip(1)).unwrap();
        mark(&worker).authenticated();
        mark(&worker).authenticated();
        assert!(worker.is_authenticated());
        let flood: Vec<Ticket> = (0..3).map(|_| admission.admit(ip(2)).unwrap()).collect();
        assert_eq!(admission.counts(), (3, 1));
        // Full: each newcomer pushes out the flood's oldest, never the worker.
        let newcomer = admission.admit(ip(3)).unwrap();
        assert!(flood[0].is_pushed_out() && !flood[1].is_pushed_out());
        assert_eq!(admission.counts(), (3, 1));
        // The newcomer authenticates; the flood keeps coming and only pushes itself out.
        mark(&newcomer).authenticated();
        let more: Vec<Ticket> = (0..5).map(|_| admission.admit(ip(2)).unwrap()).collect();
        assert!(!worker.is_pushed_out() && !newcomer.is_pushed_out());
        assert_eq!(admission.counts(), (2, 2));
        assert_eq!(more.iter().filter(|t| t.is_pushed_out()).count(), 3);
        // A pushed-out connection that authenticates late stays uncounted, also once closed.
        mark(&flood[1]).authenticated();
        assert!(!flood[1].is_authenticated());
        drop(flood);
        drop(more);
        assert_eq!(admission.counts(), (0, 2));
        // Every place authenticated: a newcomer is refused.
        let a = admission.admit(ip(4)).unwrap();
        let b = admission.admit(ip(4)).unwrap();
        mark(&a).authenticated();
        mark(&b).authenticated();
        assert_eq!(admission.admit(ip(5)).unwrap_err(), Refused::Full);
        drop(worker);
        assert_eq!(admission.counts(), (0, 3));
        assert!(admission.admit(ip(5)).is_ok());
    }

    #[test]
    fn the_cap_per_address_counts_waiting_connections_only() {
        let admission = Admission::new(1000, 2);
        let first = admission.admit(ip(1)).unwrap();
        let second = admission.admit(ip(1)).unwrap();
        assert_eq!(admission.admit(ip(1)).unwrap_err(), Refused::PerAddress);
        assert!(admission.admit(ip(2)).is_ok(), "another address is not capped by this one");
        // Behind one address (a NAT gateway), authenticated connections are not capped.
        mark(&first).authenticated();
        let mut workers = vec![first, second];
        for _ in 0..50 {
            let conn = admission.admit(ip(1)).unwrap();
            mark(&conn).authenticated();
            workers.push(conn);
        }
        assert_eq!(admission.counts(), (1, 51));
        assert!(admission.admit(ip(1)).is_ok(), "one more may wait beside the second");
    }
}
