//! Client connections: one task per client, replies leave in request order.
//!
//! [`session`] runs the connection loop (read, decode, admit through one chain of
//! interceptors that each answer with one `step::Step`, write in order) over a
//! [`stream::ClientStream`]; `transaction` and [`pubsub`] are interceptors of that chain,
//! and the node side of both lives in `upstream`;
//! `local` answers what belongs to the connection itself (HELLO, CLIENT, SELECT, AUTH,
//! PING, ...); `monitor` feeds MONITOR the commands every client sends; `tracking` keeps what
//! tracking clients are owed (client-side caching); [`registry`] lists the connected clients for CLIENT LIST; [`plain`] marks
//! the commands the session routes without its own checks.

mod flow;
mod limits;
mod local;
mod monitor;
mod ordered;
mod pause;
mod pipeline;
pub mod plain;
pub mod pubsub;
pub mod registry;
pub mod session;
mod step;
pub mod stream;
mod tracking;
mod transaction;

pub use registry::Registry;
pub use session::serve;
pub use stream::{ClientStream, Ends};
