//! One file per decoder under fuzz.

mod act_at;
mod chrony;
mod client_frames;
mod clock_json;
mod clock_model;
mod http_head;
mod inflate;
mod ingest;
mod log_body;
mod mqtt;
mod page_ingest;
mod server_frames;
mod socketio;
mod sse;
mod stomp;
pub mod tap;
mod time_exchange;

pub use act_at::act_at;
pub use chrony::chrony;
pub use client_frames::client_frames;
pub use clock_json::clock_json;
pub use clock_model::clock_model;
pub use http_head::http_head;
pub use inflate::inflate;
pub use ingest::ingest;
pub use log_body::log_body;
pub use mqtt::mqtt;
pub use page_ingest::page_ingest;
pub use server_frames::server_frames;
pub use socketio::socketio;
pub use sse::sse;
pub use stomp::stomp;
pub use tap::tap;
pub use time_exchange::time_exchange;
