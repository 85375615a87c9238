//! Where a sweep ran: the machine, its limits, the server as it named
//! itself, and how to run the same sweep again. Written into the result so
//! two results are compared knowing what differed besides the server.

use serde::{Deserialize, Serialize};

/// The machine and the run, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// The collector's version.
    pub skewscope_version: String,
    /// When the sweep began (RFC 3339, UTC).
    pub started_at: String,
    /// This host's name (the probes' and, with `--server-pid`, the server's).
    pub host: String,
    /// The kernel release.
    pub kernel: Option<String>,
    /// The CPU model.
    pub cpu: Option<String>,
    /// Cores this process may use.
    pub cores: u32,
    /// Memory in total, MiB.
    pub memory_mib: Option<u64>,
    /// Open files this process may hold (its hard limit): what caps a stage.
    pub open_file_limit: u64,
    /// The local ports outgoing connections draw from: what caps the
    /// connections one address holds to one server port.
    pub local_ports: Option<(u16, u16)>,
    /// The server's `Server:` header, from the trigger's answers, if it
    /// sent one.
    pub server_header: Option<String>,
    /// The server process's command line (`--server-pid`).
    pub server_command: Option<String>,
    /// The command that runs this sweep again (secrets hidden).
    pub command: String,
}

/// The environment now; `open_file_limit` as the sweep found it.
pub fn gather(open_file_limit: u64, server_pid: Option<u32>, command: String) -> Environment {
    use skewscope_os::machine;
    Environment {
        skewscope_version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        host: skewscope_os::host::host_name(),
        kernel: machine::kernel_release(),
        cpu: machine::cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        memory_mib: machine::memory_bytes().map(|b| b >> 20),
        open_file_limit,
        local_ports: machine::local_port_range(),
        server_header: None,
        server_command: server_pid.and_then(skewscope_os::process::command_line),
        command,
    }
}
