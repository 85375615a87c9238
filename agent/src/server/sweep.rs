//! `/sweep`, `/sweep/plan` and `/sweep/worker`: the board a sweep from
//! several machines meets its workers at ([`crate::sweep_board`]). Each is
//! behind the agent's token, like the uploads the workers make.

use std::time::Instant;

use crate::server::conn::Conn;
use crate::server::context::Context;
use crate::server::http::{Request, respond};
use crate::sweep_board::{BoardError, MAX_PLAN_BYTES, MAX_STATUS_BYTES};

/// `GET /sweep`: the plan and the workers heard from.
pub async fn view(stream: &mut Conn, context: &Context) {
    let view = context.sweep_board.view(Instant::now());
    respond(stream, 200, "", &(view.to_string() + "\n")).await;
}

/// `PUT /sweep/plan`: pins the plan in the body.
pub async fn pin_plan(mut stream: Conn, request: Request, context: &Context) {
    let Some(body) = small_body(&mut stream, request, context, MAX_PLAN_BYTES).await else {
        return;
    };
    match context.sweep_board.pin_plan(&body, Instant::now()) {
        Ok(()) => respond(&mut stream, 200, "", "{\"pinned\":true}\n").await,
        Err(e) => refuse(&mut stream, &e).await,
    }
}

/// `DELETE /sweep/plan`: the sweep is over.
pub async fn take_down_plan(stream: &mut Conn, context: &Context) {
    context.sweep_board.take_down_plan();
    respond(stream, 200, "", "{\"pinned\":false}\n").await;
}

/// `POST /sweep/worker`: a worker's status in, the plan out.
pub async fn report(mut stream: Conn, request: Request, context: &Context) {
    let Some(body) = small_body(&mut stream, request, context, MAX_STATUS_BYTES).await else {
        return;
    };
    match context.sweep_board.report(&body, Instant::now()) {
        Ok(plan) => respond(&mut stream, 200, "", &(plan.to_string() + "\n")).await,
        Err(e) => refuse(&mut stream, &e).await,
    }
}

async fn refuse(stream: &mut Conn, why: &BoardError) {
    let status = match why {
        BoardError::Full => 503,
        BoardError::NotAnObject(_) | BoardError::BadName => 422,
    };
    respond(stream, status, "", &format!("{why}\n")).await;
}

/// The whole body, of at most `limit` bytes, within the request timeout;
/// `None` once the request is answered (refused, or its peer gone).
async fn small_body(
    stream: &mut Conn,
    request: Request,
    context: &Context,
    limit: usize,
) -> Option<Vec<u8>> {
    let len = match super::body::declared_length(&request) {
        Ok(len) => len,
        Err((status, msg)) => {
            respond(stream, status, "", msg).await;
            return None;
        }
    };
    if len > limit {
        let msg = format!("{} takes a body of at most {limit} bytes\n", request.path);
        respond(stream, 413, "", &msg).await;
        return None;
    }
    let mut body = request.rest;
    body.truncate(len);
    let missing = (len - body.len()) as u64;
    let read = tokio::time::timeout(
        context.request_timeout,
        super::body::read_in_bites(stream, &mut body, missing),
    )
    .await;
    match read {
        Ok(Ok(true)) if body.len() == len => Some(body),
        Ok(_) => None,
        Err(_) => {
            respond(stream, 408, "", "request body timed out\n").await;
            None
        }
    }
}
