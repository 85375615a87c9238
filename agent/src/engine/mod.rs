//! The fan-out engine: the [`hub`] starts a broadcast on every [`shard`] (one
//! thread per core, each a tight write loop over its [`client`]s, in the
//! order [`send_order`] gives); the [`tx_tracker`] matches kernel transmit
//! stamps to broadcasts.

pub mod client;
pub mod hub;
pub mod send_order;
pub mod shard;
pub mod tx_tracker;
pub mod wire;
