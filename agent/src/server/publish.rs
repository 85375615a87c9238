//! `POST /publish`: any payload, broadcast to every client; with `?lead=`,
//! a JSON object with its time to act written in by the hub
//! ([`skewscope_core::act_stamp`]). `lead=auto` takes the lead the live
//! join's measurements allow now ([`skewscope_core::analysis::auto_lead`]);
//! every lead given is recorded (`LeadChosen`) for the report.
//!
//! A body is read only once its announced length fits `--max-publish` and
//! the bytes all requests in flight may hold together
//! (`--max-publish-in-flight`), so announcing large bodies cannot exhaust
//! memory; what is held shows in `/healthz` and `/metrics`.

use std::time::Duration;

use crate::server::conn::Conn;
use skewscope_core::act_at::ActUnit;
use skewscope_core::analysis::auto_lead::{AutoLeadNow, LeadBasis};
use skewscope_core::record::{AgentRecord, LeadChosen};
use skewscope_core::units::parse_duration;
use tokio::io::AsyncReadExt;
use tokio::sync::OwnedSemaphorePermit;

use crate::engine::hub::Broadcasted;
use crate::server::context::Context;
use crate::server::http::{Request, respond};

/// A body's share of the in-flight budget, counted while held.
struct Held {
    _permit: OwnedSemaphorePermit,
    bytes: i64,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Held {
    /// Takes `len` bytes of the budget, if they are free.
    fn take(context: &Context, len: usize) -> Option<Held> {
        let permit = context
            .publish_budget
            .clone()
            .try_acquire_many_owned(u32::try_from(len).unwrap_or(u32::MAX))
            .ok()?;
        let gauge = context.counters.publish_bytes_in_flight.clone();
        let bytes = len as i64;
        gauge.inc_by(bytes);
        Some(Held {
            _permit: permit,
            bytes,
            gauge,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.gauge.dec_by(self.bytes);
    }
}

/// The longest `?lead=`: a time to act an hour away is a mistake.
pub const MAX_LEAD: Duration = Duration::from_secs(3600);

/// A lead to give a broadcast: the caller's, or `lead=auto`'s choice.
#[derive(Clone, Copy, Debug)]
pub struct Lead {
    /// Time to act minus the moment the message is built.
    pub duration: Duration,
    /// `lead=auto`: what it was chosen from.
    pub auto: Option<AutoLeadNow>,
}

impl Lead {
    /// The record of it, for broadcast `id`.
    pub fn record(&self, broadcast: u64) -> AgentRecord {
        AgentRecord::LeadChosen(LeadChosen {
            broadcast,
            lead_ns: self.duration.as_nanos() as u64,
            auto: self.auto.is_some(),
            basis_copies: match self.auto.map(|a| a.basis) {
                Some(LeadBasis::Probes { copies }) => copies as u64,
                _ => 0,
            },
        })
    }

    /// What a response says of it: `lead_ns`, and for `lead=auto` what it
    /// rests on.
    pub fn describe(&self, out: &mut serde_json::Value) {
        out["lead_ns"] = (self.duration.as_nanos() as u64).into();
        if let Some(auto) = self.auto {
            out["lead"] = "auto".into();
            out["lead_basis"] = match auto.basis {
                LeadBasis::Probes { copies } => {
                    format!("p99.9 of {copies} probe copies' reads, plus their clock bounds and a margin")
                }
                LeadBasis::FanoutOnly { broadcasts } => format!(
                    "no probe uploads: the fan-out span over {broadcasts} broadcasts plus a network allowance"
                ),
                LeadBasis::Nothing => "nothing measured yet: the network allowance".to_owned(),
            }
            .into();
        }
    }
}

/// A request's `?lead=` (`None` without one), as `/start_test` and
/// `/publish` take it, `lead=auto` read from `auto`; the text of a 400
/// when it is not one.
pub fn lead_param(request: &Request, auto: AutoLeadNow) -> Result<Option<Lead>, String> {
    match request.query_param("lead") {
        None => Ok(None),
        Some("auto") => Ok(Some(Lead {
            duration: Duration::from_nanos(auto.lead_ns),
            auto: Some(auto),
        })),
        Some(text) => match parse_duration(text) {
            Ok(lead) if lead <= MAX_LEAD => Ok(Some(Lead {
                duration: lead,
                auto: None,
            })),
            Ok(_) => Err("lead= is at most 1h (or auto)\n".to_owned()),
            Err(e) => Err(format!("lead={e} (a duration, or auto)\n")),
        },
    }
}

/// Where and how `/publish?lead=` writes the time to act.
struct Stamping {
    lead: Lead,
    pointer: String,
    unit: ActUnit,
}

/// `?lead=`, `?pointer=` (default `/at`) and `?unit=` (default `s`).
fn stamping_of(request: &Request, auto: AutoLeadNow) -> Result<Option<Stamping>, String> {
    let Some(lead) = lead_param(request, auto)? else {
        if request.query_param("pointer").is_some() || request.query_param("unit").is_some() {
            return Err(
                "pointer= and unit= say where to write a time to act: give lead= too\n".to_owned(),
            );
        }
        return Ok(None);
    };
    let pointer = request.query_param("pointer").unwrap_or("/at").to_owned();
    let unit = match request.query_param("unit").unwrap_or("s") {
        "auto" => return Err("unit= is s, ms, us or ns\n".to_owned()),
        other => other
            .parse::<ActUnit>()
            .map_err(|e| format!("unit={other}: {e}\n"))?,
    };
    Ok(Some(Stamping {
        lead,
        pointer,
        unit,
    }))
}

/// `POST /publish`: reads a body of exactly `Content-Length` bytes (within
/// `--max-publish` and the in-flight budget) and broadcasts it; with
/// `?lead=`, first writes its time to act into it (a JSON object, or a 422
/// and nothing broadcast).
pub async fn publish(mut stream: Conn, request: Request, context: &Context) {
    let stamping = match stamping_of(&request, context.auto_lead.now()) {
        Ok(s) => s,
        Err(msg) => return respond(&mut stream, 400, "", &msg).await,
    };
    if request.header("transfer-encoding").is_some() {
        return respond(&mut stream, 411, "", "send the body with Content-Length\n").await;
    }
    let lengths: Vec<&str> = request
        .headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.trim())
        .collect();
    let len = match lengths.as_slice() {
        [] => return respond(&mut stream, 411, "", "Content-Length required\n").await,
        // Digits only: "+5", "-1" and "0x10" are what request smuggling uses.
        [one] if !one.is_empty() && one.bytes().all(|b| b.is_ascii_digit()) => {
            match one.parse::<usize>() {
                Ok(len) => len,
                Err(_) => return respond(&mut stream, 413, "", "Content-Length too large\n").await,
            }
        }
        [_] => {
            return respond(&mut stream, 400, "", "Content-Length must be digits only\n").await;
        }
        _ => return respond(&mut stream, 400, "", "more than one Content-Length\n").await,
    };
    if len > context.max_publish {
        let msg = format!(
            "body of {len} bytes exceeds --max-publish {}\n",
            context.max_publish
        );
        return respond(&mut stream, 413, "", &msg).await;
    }
    // Held for the body's whole life: what requests in flight announced
    // never adds up past the budget, whatever they announce.
    let Some(_held) = Held::take(context, len) else {
        return respond(
            &mut stream,
            503,
            "Retry-After: 1\r\n",
            "too many /publish bodies in flight; try again\n",
        )
        .await;
    };
    let mut body = request.rest;
    body.truncate(len);
    if body.len() < len {
        // Grows with what arrives: nothing is reserved for bytes not sent.
        let missing = (len - body.len()) as u64;
        let read = tokio::time::timeout(
            context.request_timeout,
            (&mut stream).take(missing).read_to_end(&mut body),
        )
        .await;
        match read {
            Ok(Ok(_)) if body.len() == len => {}
            Ok(_) => return, // vanished mid-body: nothing is broadcast
            Err(_) => return respond(&mut stream, 408, "", "request body timed out\n").await,
        }
    }
    let Some(stamping) = stamping else {
        let sent = context.hub.publish(&body).await;
        return respond(&mut stream, 200, "", &outcome_json(sent)).await;
    };
    // The moment the message is built, as for the test message: the
    // broadcast's start is stamped microseconds later.
    let at = skewscope_os::clock::now()
        .wall_ns
        .saturating_add(stamping.lead.duration.as_nanos() as u64);
    let payload =
        match skewscope_core::act_stamp::stamp(&body, &stamping.pointer, stamping.unit, at) {
            Ok(p) => p,
            Err(e) => {
                let msg = format!("{e}; nothing was broadcast\n");
                return respond(&mut stream, 422, "", &msg).await;
            }
        };
    let mut sent = context.hub.publish(&payload).await;
    context.hub.record(stamping.lead.record(sent.id));
    sent.at_wall_ns = Some(at);
    let mut out: serde_json::Value =
        serde_json::from_str(&outcome_json(sent)).expect("our own JSON");
    stamping.lead.describe(&mut out);
    out["pointer"] = stamping.pointer.into();
    out["unit"] = stamping.unit.as_str().into();
    respond(&mut stream, 200, "", &(out.to_string() + "\n")).await
}

/// What a broadcast reached, as `/publish` and `/start_test` answer it.
pub fn outcome_json(sent: Broadcasted) -> String {
    let mut out = serde_json::json!({ "broadcast": sent.id, "clients": sent.clients });
    if let Some(seq) = sent.seq {
        out["seq"] = seq.into();
    }
    if let Some(at) = sent.at_wall_ns {
        out["at_ns"] = at.into();
    }
    out.to_string() + "\n"
}
