//! Asking the server for one broadcast: the trigger URL, once per
//! broadcast, and what its answer says of the server (its `Server:`
//! header, recorded so a rerun knows what it measured).

use super::options::TriggerRequest;

/// Largest trigger answer read (the rest is not needed): read whole, so
/// the connection is kept for the next trigger.
const MAX_ANSWER: u64 = 64 * 1024;

/// Why a trigger did not make a broadcast.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    /// No answer: refused, timed out, reset.
    #[error(
        "{method} {url}: no answer ({source}); check that the server runs and that --trigger is its broadcast endpoint"
    )]
    Unreachable {
        /// The method.
        method: String,
        /// The URL asked.
        url: String,
        /// What went wrong.
        source: ureq::Error,
    },
    /// An answer other than 2xx.
    #[error("{method} {url} answered {status}{}; give --trigger an endpoint that broadcasts once (and --trigger-method, --trigger-body, --trigger-header as it wants them)", if body.is_empty() { String::new() } else { format!(": {body}") })]
    Refused {
        /// The method.
        method: String,
        /// The URL asked.
        url: String,
        /// The status.
        status: u16,
        /// The start of its body.
        body: String,
    },
}

/// What a trigger's answer said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Its `Server:` header, if it sent one (`uvicorn`, `nginx/1.22`).
    pub server: Option<String>,
}

/// The trigger, with the HTTP client that asks it (one connection kept
/// across triggers, as a script calling it in a loop would).
pub struct Trigger {
    http: ureq::Agent,
    request: TriggerRequest,
}

impl Trigger {
    /// A trigger asked over `http` (the audit's client: its timeout, and
    /// for `https://` its trust).
    pub fn new(request: TriggerRequest, http: ureq::Agent) -> Trigger {
        Trigger { http, request }
    }

    /// Asks for one broadcast; returns once the server answered.
    pub fn send(&self) -> Result<Answer, TriggerError> {
        let r = &self.request;
        let result = match (r.method.as_str(), &r.body) {
            ("POST" | "PUT", body) => {
                let mut request = if r.method == "POST" {
                    self.http.post(&r.url)
                } else {
                    self.http.put(&r.url)
                };
                for (name, value) in &r.headers {
                    request = request.header(name, value);
                }
                match body {
                    Some(body) => request.send(body.as_bytes()),
                    None => request.send_empty(),
                }
            }
            _ => {
                let mut request = self.http.get(&r.url);
                for (name, value) in &r.headers {
                    request = request.header(name, value);
                }
                request.call()
            }
        };
        let unreachable = |source| TriggerError::Unreachable {
            method: r.method.clone(),
            url: r.url.clone(),
            source,
        };
        let mut response = result.map_err(unreachable)?;
        let status = response.status().as_u16();
        let server = response
            .headers()
            .get("server")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty());
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER)
            .read_to_vec()
            .unwrap_or_default();
        if (200..300).contains(&status) {
            Ok(Answer { server })
        } else {
            Err(TriggerError::Refused {
                method: r.method.clone(),
                url: r.url.clone(),
                status,
                body: String::from_utf8_lossy(&body[..body.len().min(200)])
                    .trim()
                    .to_owned(),
            })
        }
    }
}
