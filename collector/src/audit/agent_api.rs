//! The agent's HTTP endpoints the audit uses, and the trigger of a foreign
//! server: small blocking calls with a bearer token and a timeout.

use std::time::Duration;

use serde::Deserialize;

/// How long one request may take before the agent counts as unreachable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest `/audit/log` body accepted: the agent's piece limit plus one
/// record of the largest size a log allows.
const MAX_BODY: u64 = 4 * 1024 * 1024 + 64 * 1024 * 1024 + 8;

/// Why a call failed: whether the agent could be reached decides the
/// audit's exit status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No answer at all (refused, timed out, reset).
    #[error(
        "{url}: no answer ({source}); check that skewscope-agent runs there and listens on that address (its --listen; the default, 127.0.0.1:8080, answers on its own host only)"
    )]
    Unreachable {
        /// What was asked.
        url: String,
        /// What went wrong.
        source: ureq::Error,
    },
    /// 401: the token is missing or wrong.
    #[error("{url}: {}", unauthorized_text(token_file.as_deref(), *given))]
    Unauthorized {
        /// What was asked.
        url: String,
        /// Whether a token was sent.
        given: bool,
        /// The file it was read from.
        token_file: Option<std::path::PathBuf>,
    },
    /// Any other status than the one expected.
    #[error("{url}: answered {status}: {body}")]
    Status {
        /// What was asked.
        url: String,
        /// The status.
        status: u16,
        /// The start of the body, for the message.
        body: String,
    },
    /// No TLS client could be made for an `https://` agent.
    #[error("{0}")]
    Tls(String),
    /// An answer that is not what this version of skewscope expects.
    #[error("{url}: unexpected answer: {detail}")]
    Unexpected {
        /// What was asked.
        url: String,
        /// What was wrong with it.
        detail: String,
    },
}

/// What to do about a 401: the token sent (from which file) is not the
/// agent's, or none was sent.
fn unauthorized_text(file: Option<&std::path::Path>, given: bool) -> String {
    const WHERE: &str = "the file the agent was given with its own --token-file (/etc/skewscope/agent.token where its package installed it)";
    match (given, file) {
        (true, Some(file)) => format!(
            "the agent refused the token from {} (401): it is not the agent's token; give --token-file {WHERE}",
            file.display()
        ),
        (true, None) => {
            format!(
                "the agent refused the token (401): it is not the agent's; give --token-file {WHERE}"
            )
        }
        (false, _) => format!(
            "the agent requires a token (401) and none was given: give --token-file {WHERE}"
        ),
    }
}

/// One probe run the agent stores, as `/audit/status` lists it.
#[derive(Clone, Debug, Deserialize)]
pub struct ProbeRun {
    /// Run id (hex).
    pub run: String,
    /// Its log, relative to the data directory.
    pub file: String,
    /// The probe's name.
    pub name: String,
    /// The device's host name; a browser probe page's is
    /// [`skewscope_core::page_ingest::PAGE_HOST`].
    #[serde(default)]
    pub host: String,
    /// Uploading right now.
    pub uploading: bool,
    /// Milliseconds since its last batch was stored (or since it was
    /// opened); absent from agents before 0.1.
    #[serde(default)]
    pub idle_ms: Option<u64>,
}

impl ProbeRun {
    /// Its name (a browser probe page's marked so), or the start of its run
    /// id while its `Started` record has not arrived.
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            format!("run {}", &self.run[..8.min(self.run.len())])
        } else if self.host == skewscope_core::page_ingest::PAGE_HOST {
            format!("{} (browser page)", self.name)
        } else {
            self.name.clone()
        }
    }
}

/// A log of the agent's data directory.
#[derive(Clone, Debug, Deserialize)]
pub struct LogFile {
    /// Its name, relative to the data directory.
    pub name: String,
    /// Its size.
    pub bytes: u64,
}

/// `/audit/status`.
#[derive(Clone, Debug, Deserialize)]
pub struct Status {
    /// This agent run's id: changes when the agent restarts.
    pub agent_run: String,
    /// Prefix of this run's segment files.
    pub segment_stem: String,
    /// The agent's wall clock when it answered.
    pub now_wall_ns: u64,
    /// WebSocket clients of the hub.
    pub clients: u64,
    /// Broadcasts the hub started in this run (its ids are 1 to this).
    #[serde(default)]
    pub broadcasts: u64,
    /// Probe runs uploaded since the agent started.
    pub probes: Vec<ProbeRun>,
    /// Every record log in the data directory.
    pub logs: Vec<LogFile>,
}

/// What the agent's `/start_test` answered.
#[derive(Clone, Copy, Debug, Deserialize)]
pub struct Sent {
    /// The broadcast's id in the agent's log.
    pub broadcast: u64,
    /// Clients it was sent to.
    pub clients: u64,
}

/// A piece of a log: bytes from the offset asked, and the file's size.
pub struct Piece {
    /// Whole frames (and the header, from offset 0).
    pub bytes: Vec<u8>,
    /// The file's size on the agent when it answered.
    pub file_bytes: u64,
}

/// The agent, at a base URL like `http://server:8080`.
#[derive(Clone)]
pub struct AgentApi {
    base: String,
    token: Option<String>,
    token_file: Option<std::path::PathBuf>,
    http: ureq::Agent,
}

impl AgentApi {
    /// A client of the agent at `base` over `http` (see [`http_client`]),
    /// sending `token` if given.
    pub fn new(base: &str, token: Option<String>, http: ureq::Agent) -> AgentApi {
        AgentApi {
            base: base.trim_end_matches('/').to_owned(),
            token,
            token_file: None,
            http,
        }
    }

    /// Names the file the token was read from, for the message of a 401.
    pub fn token_from(mut self, file: Option<std::path::PathBuf>) -> AgentApi {
        self.token_file = file;
        self
    }

    /// The client it asks with, for `--trigger` too (same trust, same
    /// timeout).
    pub fn http(&self) -> &ureq::Agent {
        &self.http
    }

    /// `GET /audit/status`.
    pub fn status(&self) -> Result<Status, ApiError> {
        let url = format!("{}/audit/status", self.base);
        let body = self.get(&url, MAX_BODY)?.1;
        serde_json::from_slice(&body).map_err(|e| ApiError::Unexpected {
            url,
            detail: e.to_string(),
        })
    }

    /// `GET /start_test`: one test broadcast through the hub; with a
    /// `lead`, it carries its time to act that long after it is sent.
    pub fn start_test(
        &self,
        lead: Option<skewscope_core::lead::LeadChoice>,
    ) -> Result<Sent, ApiError> {
        let url = match lead {
            Some(lead) => format!("{}/start_test?lead={}", self.base, lead.query_value()),
            None => format!("{}/start_test", self.base),
        };
        let body = self.get(&url, 1 << 20)?.1;
        serde_json::from_slice(&body).map_err(|e| ApiError::Unexpected {
            url,
            detail: e.to_string(),
        })
    }

    /// `GET /audit/log?name=NAME&from=FROM`; `Ok(None)` when the file is now
    /// shorter than `from` (cut back: read it again from 0).
    pub fn log_piece(&self, name: &str, from: u64) -> Result<Option<Piece>, ApiError> {
        let url = format!("{}/audit/log?name={name}&from={from}", self.base);
        match self.get(&url, MAX_BODY) {
            Ok((file_bytes, bytes)) => {
                let file_bytes = file_bytes.ok_or_else(|| ApiError::Unexpected {
                    url,
                    detail: "no X-Skewscope-File-Bytes header".into(),
                })?;
                Ok(Some(Piece { bytes, file_bytes }))
            }
            Err(ApiError::Status { status: 416, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `METHOD PATH` with `body` as JSON, expecting 200 and a JSON answer
    /// of at most 1 MiB: the calls a sweep and its workers make to the
    /// agent's board (`/sweep…`).
    pub fn call_json<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&impl serde::Serialize>,
    ) -> Result<T, ApiError> {
        let url = format!("{}{path}", self.base);
        let body = body
            .map(|b| serde_json::to_vec(b).expect("our own types serialise"))
            .unwrap_or_default();
        let answer = self.request(method, &url, &body, 1 << 20)?.1;
        serde_json::from_slice(&answer).map_err(|e| ApiError::Unexpected {
            url,
            detail: e.to_string(),
        })
    }

    /// A GET expecting 200: the file-size header if any, and the body.
    fn get(&self, url: &str, limit: u64) -> Result<(Option<u64>, Vec<u8>), ApiError> {
        self.request("GET", url, &[], limit)
    }

    /// A request expecting 200 (a body sent with all but GET and DELETE):
    /// the file-size header if any, and the body.
    fn request(
        &self,
        method: &str,
        url: &str,
        body: &[u8],
        limit: u64,
    ) -> Result<(Option<u64>, Vec<u8>), ApiError> {
        let mut request = ureq::http::Request::builder().method(method).uri(url);
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        // A body only where there is one: ureq refuses one on a GET.
        let result = if body.is_empty() {
            request.body(()).map(|r| self.http.run(r))
        } else {
            request
                .header("Content-Type", "application/json")
                .body(body)
                .map(|r| self.http.run(r))
        }
        .map_err(|e| ApiError::Unexpected {
            url: url.to_owned(),
            detail: format!("cannot make the request: {e}"),
        })?;
        let mut response = result.map_err(|source| ApiError::Unreachable {
            url: url.to_owned(),
            source,
        })?;
        let status = response.status().as_u16();
        let file_bytes = response
            .headers()
            .get("x-skewscope-file-bytes")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let body = response
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(|source| ApiError::Unreachable {
                url: url.to_owned(),
                source,
            })?;
        match status {
            200 => Ok((file_bytes, body)),
            401 => Err(ApiError::Unauthorized {
                url: url.to_owned(),
                given: self.token.is_some(),
                token_file: self.token_file.clone(),
            }),
            _ => Err(ApiError::Status {
                url: url.to_owned(),
                status,
                body: String::from_utf8_lossy(&body[..body.len().min(200)])
                    .trim()
                    .to_owned(),
            }),
        }
    }
}

/// Triggers one broadcast on a server that is not the agent (`--trigger`):
/// any 2xx answer counts.
pub fn trigger(http: &ureq::Agent, url: &str, method: &str) -> Result<(), ApiError> {
    let result = match method {
        "POST" => http.post(url).send_empty(),
        _ => http.get(url).call(),
    };
    let response = result.map_err(|source| ApiError::Unreachable {
        url: url.to_owned(),
        source,
    })?;
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(ApiError::Status {
            url: url.to_owned(),
            status,
            body: String::new(),
        })
    }
}

/// The HTTP client of the agent and of `--trigger`: one timeout, statuses
/// as answers, and for `https://` (an agent with `--tls-cert`) rustls
/// trusting only the CAs in `ca_file`, else the system's roots.
#[cfg(feature = "tls")]
pub fn http_client(ca_file: Option<&std::path::Path>) -> Result<ureq::Agent, ApiError> {
    use std::sync::Arc;
    use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};
    let roots: Vec<Certificate<'static>> = match ca_file {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| {
                ApiError::Tls(format!("cannot read --ca-file {}: {e}", path.display()))
            })?;
            let certs: Vec<_> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err(ApiError::Tls(format!(
                    "--ca-file {}: no PEM certificate in it",
                    path.display()
                )));
            }
            certs
        }
        None => rustls_native_certs::load_native_certs()
            .certs
            .into_iter()
            .map(|der| Certificate::from_der(der.as_ref()).to_owned())
            .collect(),
    };
    let tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::new_with_certs(&roots))
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .build();
    Ok(ureq::Agent::config_builder()
        .timeout_global(Some(REQUEST_TIMEOUT))
        .http_status_as_error(false)
        .tls_config(tls)
        .build()
        .into())
}

/// The HTTP client of the agent and of `--trigger`, in a build without TLS:
/// `http://` only, and `--ca-file` refused.
#[cfg(not(feature = "tls"))]
pub fn http_client(ca_file: Option<&std::path::Path>) -> Result<ureq::Agent, ApiError> {
    if ca_file.is_some() {
        return Err(ApiError::Tls(
            "--ca-file: this build of skewscope has no TLS (built without the `tls` feature)"
                .into(),
        ));
    }
    Ok(ureq::Agent::config_builder()
        .timeout_global(Some(REQUEST_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_token_names_its_file_or_says_none_was_given() {
        let refused = ApiError::Unauthorized {
            url: "http://srv:8080/audit/status".into(),
            given: true,
            token_file: Some("badtoken".into()),
        };
        assert_eq!(
            refused.to_string(),
            "http://srv:8080/audit/status: the agent refused the token from badtoken (401): it is not the agent's token; give --token-file the file the agent was given with its own --token-file (/etc/skewscope/agent.token where its package installed it)"
        );
        let none = ApiError::Unauthorized {
            url: "u".into(),
            given: false,
            token_file: None,
        };
        assert!(
            none.to_string().starts_with(
                "u: the agent requires a token (401) and none was given: give --token-file"
            ),
            "{none}"
        );
    }
}
