//! Parking: a request that waits on something other than the server's own
//! work (a gang member held in bind until its group's quorum) tells the
//! server so, and leaves the budgets that protect the server's work: its
//! in-flight slot goes back at once, and so does its connection's slot
//! when the connection has nothing else in flight. It is counted against
//! the server's parked budget instead until it ends.
//!
//! The server ([`crate::tls::serve_with`]) inserts a [`Park`] into every request's extensions; a
//! handler that waits takes it (`Option<Extension<Park>>`) and calls
//! [`Park::park`]. Without a server (a router driven in a test) there is
//! none, and nothing to leave.

use std::sync::Arc;

/// What the server does when a request parks.
pub trait Parking: Send + Sync {
    /// Moves the request to the parked budget; `false` when that budget
    /// is full (the request then stays counted as before).
    fn park(&self) -> bool;
}

/// The server's handle on one request.
#[derive(Clone)]
pub struct Park(Arc<dyn Parking>);

impl Park {
    pub fn new(p: Arc<dyn Parking>) -> Self {
        Park(p)
    }

    /// The request waits on something other than server work from now
    /// until it ends. Whether it left the in-flight budget.
    pub fn park(&self) -> bool {
        self.0.park()
    }
}
