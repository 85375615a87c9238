//! What `skewscope audit` reads from a running agent, token-protected like
//! `/publish`: `/audit/status` (this run, the agent's clock now, the probes
//! that upload) and `/audit/log` (one record log of the data directory,
//! followed piece by piece in whole frames, so the audit's copy of the data
//! directory reads exactly as the directory itself).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::server::conn::Conn;
use serde::Serialize;
use skewscope_core::log::{HEADER_LEN, whole_frames_end};

use crate::ingest::store::{PROBES_DIR, RunStatus};
use crate::server::http::{Request, respond, respond_bytes};

/// Largest piece of a log one `/audit/log` response carries; the audit asks
/// again from where it got to.
pub const MAX_PIECE: u64 = 4 * 1024 * 1024;

/// The response header that carries the file's whole size, so the follower
/// knows whether there is more.
pub const FILE_BYTES_HEADER: &str = "X-Skewscope-File-Bytes";

/// This agent run, as the audit names it.
#[derive(Debug)]
pub struct AuditSource {
    /// The data directory.
    pub data_dir: PathBuf,
    /// The file-name prefix of this run's segments (`agent-SECS-PID`).
    pub segment_stem: String,
    /// The run id of this agent run.
    pub run_id: u128,
}

#[derive(Serialize)]
struct Status {
    agent_run: String,
    segment_stem: String,
    now_wall_ns: u64,
    clients: usize,
    broadcasts: u64,
    probes: Vec<RunStatus>,
    logs: Vec<LogFile>,
}

#[derive(Serialize)]
struct LogFile {
    name: String,
    bytes: u64,
}

/// What the rest of the agent says for `/audit/status`, read by the caller.
#[derive(Debug)]
pub struct Now {
    /// WebSocket clients connected.
    pub clients: usize,
    /// Broadcasts started in this run.
    pub broadcasts: u64,
    /// Probe runs uploaded since the agent started.
    pub probes: Vec<RunStatus>,
}

/// `GET /audit/status`.
pub async fn status(stream: &mut Conn, source: &AuditSource, now: Now) {
    let logs = list_logs(&source.data_dir);
    let status = Status {
        agent_run: format!("{:032x}", source.run_id),
        segment_stem: source.segment_stem.clone(),
        now_wall_ns: skewscope_os::clock::now().wall_ns,
        clients: now.clients,
        broadcasts: now.broadcasts,
        probes: now.probes,
        logs,
    };
    let body = serde_json::to_string(&status).expect("status serializes") + "\n";
    respond(stream, 200, "", &body).await
}

/// `GET /audit/log?name=NAME&from=OFFSET`: the log's bytes from `OFFSET`
/// (0 includes the file header) up to its last whole frame, at most
/// [`MAX_PIECE`] at a time.
pub async fn log(stream: &mut Conn, request: &Request, source: &AuditSource) {
    let Some(name) = request.query_param("name").filter(|n| is_log_name(n)) else {
        return respond(
            stream,
            400,
            "",
            "name=FILE required: a record log of the data directory as /audit/status lists it\n",
        )
        .await;
    };
    let Some(from) = request
        .query_param("from")
        .map_or(Some(0), |f| f.parse::<u64>().ok())
    else {
        return respond(stream, 400, "", "from= must be a byte offset\n").await;
    };
    let path = source.data_dir.join(&name);
    let piece = tokio::task::spawn_blocking(move || read_piece(&path, from)).await;
    match piece {
        Ok(Ok(piece)) => {
            let extra = format!("{FILE_BYTES_HEADER}: {}\r\n", piece.file_bytes);
            respond_bytes(
                stream,
                200,
                "application/octet-stream",
                &extra,
                &piece.bytes,
            )
            .await
        }
        Ok(Err(e)) if e.kind() == io::ErrorKind::NotFound => {
            respond(stream, 404, "", &format!("{name}: no such log\n")).await
        }
        Ok(Err(e)) if e.kind() == io::ErrorKind::InvalidInput => {
            respond(stream, 416, "", &format!("{name}: {e}\n")).await
        }
        Ok(Err(e)) => respond(stream, 500, "", &format!("{name}: {e}\n")).await,
        Err(_) => respond(stream, 500, "", "reading the log panicked\n").await,
    }
}

/// `agent-….sklog` or `probes/probe-….sklog`: a log of the data directory,
/// never a path out of it.
fn is_log_name(name: &str) -> bool {
    let file = name.strip_prefix("probes/").unwrap_or(name);
    file.ends_with(".sklog")
        && !file.starts_with('.')
        && file
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn list_logs(data_dir: &Path) -> Vec<LogFile> {
    let mut logs = Vec::new();
    for (dir, prefix) in [
        (data_dir.to_owned(), ""),
        (data_dir.join(PROBES_DIR), "probes/"),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if let (true, Ok(meta)) = (is_log_name(&name), entry.metadata())
                && meta.is_file()
            {
                logs.push(LogFile {
                    name,
                    bytes: meta.len(),
                });
            }
        }
    }
    logs.sort_by(|a, b| a.name.cmp(&b.name));
    logs
}

struct Piece {
    bytes: Vec<u8>,
    file_bytes: u64,
}

/// Reads whole frames of `path` from `from` on.
fn read_piece(path: &Path, from: u64) -> io::Result<Piece> {
    let mut file = File::open(path)?;
    let file_bytes = file.metadata()?.len();
    if from > file_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "from={from} is past its end ({file_bytes} bytes): it was cut back, read it again from 0"
            ),
        ));
    }
    let frames_from = from.max(HEADER_LEN as u64);
    if file_bytes < frames_from {
        // Its header is not all there yet.
        return Ok(Piece {
            bytes: Vec::new(),
            file_bytes,
        });
    }
    let available = file_bytes - from;
    let mut want = available.min(MAX_PIECE);
    loop {
        let mut bytes = Vec::with_capacity(want as usize);
        file.seek(SeekFrom::Start(from))?;
        (&mut file).take(want).read_to_end(&mut bytes)?;
        let skip = (frames_from - from) as usize;
        let end = skip + whole_frames_end(&bytes[skip..], 0, MAX_PIECE as usize);
        if end > skip || want >= available {
            bytes.truncate(end);
            return Ok(Piece { bytes, file_bytes });
        }
        // One frame larger than a piece: send it whole.
        want = available.min(want.saturating_mul(4));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_logs_of_the_data_directory_are_served() {
        assert!(is_log_name("agent-1700000000-42-0000.sklog"));
        assert!(is_log_name("probes/probe-00ff.sklog"));
        for bad in [
            "../etc/passwd",
            "probes/../x.sklog",
            "/etc/x.sklog",
            ".hidden.sklog",
            "probes/sub/x.sklog",
            "agent.txt",
            "",
        ] {
            assert!(!is_log_name(bad), "{bad}");
        }
    }
}
