//! skewscope's collector: reads agent and probe logs, joins them and reports
//! skew, latency, fan-out and loss; also runs the embedded demo.

pub mod demo;
pub mod inputs;
pub mod table;
