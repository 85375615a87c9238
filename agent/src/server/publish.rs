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
use skewscope_core::analysis::auto_lead::{self, AutoLeadNow, LeadBasis};
use skewscope_core::analysis::lead_rule::{self, Evidence};
use skewscope_core::lead::LeadChoice;
use skewscope_core::record::{AgentRecord, AutoLeadBasis, LeadChosen};
use tokio::sync::OwnedSemaphorePermit;

use crate::engine::hub::{Broadcasted, ReadyBroadcast};
use crate::server::context::Context;
use crate::server::http::{Request, respond};

/// A body's share of the in-flight budget, counted while held.
struct Held {
    _permit: OwnedSemaphorePermit,
    bytes: i64,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Held {
    /// Takes `len` bytes of the budget, if they are free (a length past
    /// what the budget can count never is).
    fn take(context: &Context, len: usize) -> Option<Held> {
        let permit = context
            .publish_budget
            .clone()
            .try_acquire_many_owned(u32::try_from(len).ok()?)
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

/// A lead to give a broadcast: the caller's, or `lead=auto`'s choice.
#[derive(Clone, Debug)]
pub struct Lead {
    /// Time to act minus the moment the message is built.
    pub duration: Duration,
    /// `lead=auto`: what it was chosen from.
    pub auto: Option<AutoLeadNow>,
}

impl Lead {
    /// The records of it, for broadcast `id`: how it was set, and for
    /// `lead=auto` what it weighed (for the report's line on it).
    pub fn records(&self, broadcast: u64) -> Vec<AgentRecord> {
        let mut out = vec![AgentRecord::LeadChosen(LeadChosen {
            broadcast,
            lead_ns: self.duration.as_nanos() as u64,
            auto: self.auto.is_some(),
            basis_copies: match self.auto.as_ref().map(|a| a.basis) {
                Some(LeadBasis::Probes { copies, .. }) => copies as u64,
                _ => 0,
            },
        })];
        if let Some(auto) = &self.auto {
            let (reads, tail_model) = match auto.basis {
                LeadBasis::Probes { evidence, .. } => (
                    evidence.reads(),
                    matches!(evidence, Evidence::TailModel { .. }),
                ),
                LeadBasis::FanoutOnly { .. } | LeadBasis::Nothing => (0, false),
            };
            out.push(AgentRecord::AutoLeadBasis(AutoLeadBasis {
                broadcast,
                wanted_ns: auto.wanted_ns,
                ceiling_ns: auto.ceiling_ns,
                readiness_ns: auto.readiness_ns,
                reads,
                tail_model,
                left_out: auto.left_out.iter().map(|l| l.name.clone()).collect(),
            }));
        }
        out
    }

    /// What a response says of it: `lead_ns`, and for `lead=auto` what it
    /// rests on, a warning when the ceiling cut it short, and the devices
    /// left out of it.
    pub fn describe(&self, out: &mut serde_json::Value) {
        out["lead_ns"] = (self.duration.as_nanos() as u64).into();
        let Some(auto) = &self.auto else {
            return;
        };
        out["lead"] = "auto".into();
        out["lead_basis"] = match auto.basis {
            LeadBasis::Probes { copies, evidence } => {
                let p = lead_rule::QUANTILE * 100.0;
                let independent = evidence.reads();
                let quantile = match evidence {
                    Evidence::Quantile { .. } => {
                        format!("p{p} of {copies} reads ({independent} independent)")
                    }
                    Evidence::TailModel { .. } => format!(
                        "a tail model of {copies} reads ({independent} independent, a device's copies of a broadcast once; the p{p} needs {}; never below their largest)",
                        lead_rule::MIN_EVIDENCE
                    ),
                };
                format!(
                    "{quantile} of the last {} s at their clock bounds' latest, plus the slowest device's readiness ({} us) and a margin",
                    auto_lead::WINDOW_NS / 1_000_000_000,
                    auto.readiness_ns / 1_000
                )
            }
            LeadBasis::FanoutOnly { broadcasts } => format!(
                "no uploads: the fan-out span over {broadcasts} broadcasts plus a network allowance"
            ),
            LeadBasis::Nothing => "nothing measured yet: the network allowance".to_owned(),
        }
        .into();
        if auto.capped() {
            out["warning"] = format!(
                "the reads asked for a lead of {} ms but --max-lead is {} ms: this broadcast has the ceiling, and the slowest copies will be late",
                auto.wanted_ns / 1_000_000,
                auto.ceiling_ns / 1_000_000
            )
            .into();
        }
        if !auto.left_out.is_empty() {
            out["lead_left_out"] = auto
                .left_out
                .iter()
                .map(|l| serde_json::json!({"name": l.name, "why": l.why}))
                .collect::<Vec<_>>()
                .into();
        }
    }
}

/// A request's `?lead=` (`None` without one), as `/start_test` and
/// `/publish` take it, `lead=auto` read from `auto`; the text of a 400
/// when it is not one.
pub fn lead_param(request: &Request, auto: AutoLeadNow) -> Result<Option<Lead>, String> {
    let Some(text) = request.query_param("lead") else {
        return Ok(None);
    };
    let text = text.as_str();
    match text
        .parse::<LeadChoice>()
        .map_err(|e| format!("lead={e}\n"))?
    {
        LeadChoice::Auto => Ok(Some(Lead {
            duration: Duration::from_nanos(auto.lead_ns),
            auto: Some(auto),
        })),
        LeadChoice::Fixed(lead) => Ok(Some(Lead {
            duration: lead,
            auto: None,
        })),
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
    let pointer = request
        .query_param("pointer")
        .unwrap_or_else(|| "/at".to_owned());
    if pointer.is_empty() {
        return Err("pointer= is empty: name the member to write the time in, like /at\n".into());
    }
    if let Err(e) = pointer.parse::<skewscope_core::json_pointer::JsonPointer>() {
        return Err(format!("pointer={e}\n"));
    }
    let unit = match request.query_param("unit") {
        None => ActUnit::S,
        Some(text) => ActUnit::written(&text).map_err(|e| format!("unit={e}\n"))?,
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
    let len = match super::body::declared_length(&request) {
        Ok(len) => len,
        Err((status, msg)) => return respond(&mut stream, status, "", msg).await,
    };
    if len > context.max_publish {
        let msg = format!(
            "body of {len} bytes exceeds --max-publish {}\n",
            context.max_publish
        );
        return respond(&mut stream, 413, "", &msg).await;
    }
    if u32::try_from(len).is_err() {
        let msg =
            format!("body of {len} bytes is past 4 GiB, the most the bodies' budget counts\n");
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
        // Its room at once, as the budget already counts it: a body grown by
        // doubling copies itself about once more on this thread. Refused,
        // not aborted, where the allocator has no room for it.
        if body.try_reserve_exact(len - body.len()).is_err() {
            return respond(
                &mut stream,
                503,
                "Retry-After: 1\r\n",
                "no memory for this body now; try again\n",
            )
            .await;
        }
        // A bite at a time: the thread serves every other request too.
        let missing = (len - body.len()) as u64;
        let read = tokio::time::timeout(
            context.request_timeout,
            super::body::read_in_bites(&mut stream, &mut body, missing),
        )
        .await;
        match read {
            Ok(Ok(true)) if body.len() == len => {}
            Ok(_) => return, // vanished mid-body: nothing is broadcast
            Err(_) => return respond(&mut stream, 408, "", "request body timed out\n").await,
        }
    }
    let Some(stamping) = stamping else {
        let Some(ready) = ready_to_send(context, body).await else {
            return respond(&mut stream, 500, "", "preparing the broadcast failed\n").await;
        };
        let sent = context.hub.send(ready, None).await;
        return respond(&mut stream, 200, "", &outcome_json(sent)).await;
    };
    // Parsing, writing and encoding a body grow with it: one at a time, on
    // a blocking thread, never on the thread that serves every request.
    let stamped = {
        let Ok(_turn) = context.body_work.acquire().await else {
            return;
        };
        let (pointer, unit) = (stamping.pointer.clone(), stamping.unit);
        let (hub, max_publish) = (context.hub.clone(), context.max_publish);
        let lead = stamping.lead.duration;
        tokio::task::spawn_blocking(move || {
            // The moment the message is built, its turn come, as for the
            // test message: the broadcast's start is stamped once it is
            // ready (a 1 MiB body's copies and hash: about a millisecond).
            let at = skewscope_os::clock::now()
                .wall_ns
                .saturating_add(lead.as_nanos() as u64);
            let payload = skewscope_core::act_stamp::stamp(&body, &pointer, unit, at)?;
            Ok::<_, skewscope_core::act_stamp::StampError>(if payload.len() > max_publish {
                Err(payload.len())
            } else {
                Ok((hub.ready_to_send(payload), at))
            })
        })
        .await
    };
    let (ready, at) = match stamped {
        Ok(Ok(Ok(ready))) => ready,
        Ok(Ok(Err(len))) => {
            let msg = format!(
                "the body with its time to act is {len} bytes, over --max-publish {}; nothing was broadcast\n",
                context.max_publish
            );
            return respond(&mut stream, 413, "", &msg).await;
        }
        Ok(Err(e)) => {
            let msg = format!("{e}; nothing was broadcast\n");
            return respond(&mut stream, 422, "", &msg).await;
        }
        Err(_) => return respond(&mut stream, 500, "", "stamping failed\n").await,
    };
    let mut sent = context.hub.send(ready, None).await;
    for record in stamping.lead.records(sent.id) {
        context.hub.record(record);
    }
    context.auto_lead.given(stamping.lead.auto.as_ref());
    sent.at_wall_ns = Some(at);
    let mut out: serde_json::Value =
        serde_json::from_str(&outcome_json(sent)).expect("our own JSON");
    stamping.lead.describe(&mut out);
    out["pointer"] = stamping.pointer.into();
    out["unit"] = stamping.unit.as_str().into();
    respond(&mut stream, 200, "", &(out.to_string() + "\n")).await
}

/// Bodies up to this size are made ready to send on the thread that serves
/// every request: a 64 KiB frame's copy and hash take some µs, less than a
/// blocking thread's hand-off, which would delay the broadcast.
const READY_HERE_MAX: usize = 64 * 1024;

/// `body` made ready to send: larger than [`READY_HERE_MAX`], on a
/// blocking thread, one at a time (the stamping's turn), so its copies,
/// hash and compression (a 1 MiB body's take milliseconds) never hold a
/// `/clock` reply or another request; `None` when that thread failed.
async fn ready_to_send(context: &Context, body: Vec<u8>) -> Option<ReadyBroadcast> {
    if body.len() <= READY_HERE_MAX {
        return Some(context.hub.ready_to_send(body));
    }
    let _turn = context.body_work.acquire().await.ok()?;
    let hub = context.hub.clone();
    tokio::task::spawn_blocking(move || hub.ready_to_send(body))
        .await
        .ok()
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
