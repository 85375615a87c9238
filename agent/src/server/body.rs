//! Reading a request body on the thread that serves every request, a bite
//! at a time.
//!
//! The agent's HTTP runtime is one thread. A body read in one go (a 1 MB
//! body is in the socket's buffer at once) holds that thread for the whole
//! copy: forty 1 MB `/publish` bodies at once held a `/clock` round trip
//! for 14–24 ms on the 2-core VM (`skewscope-bench publish-flood`). Read
//! [`BITE`] at a time, yielding between bites, every other request gets its
//! turn between two bites of any body.

use tokio::io::{AsyncRead, AsyncReadExt};

use super::http::Request;

/// The most of one body read before the thread is given to the others.
pub const BITE: u64 = 16 * 1024;

/// The body's length as its `Content-Length` declares it, or the status
/// and the reason to refuse it: a body must say its length, once, in
/// digits only ("+5", "-1" and "0x10" are what request smuggling uses),
/// and a chunked one is refused.
pub fn declared_length(request: &Request) -> Result<usize, (u16, &'static str)> {
    if request.header("transfer-encoding").is_some() {
        return Err((411, "send the body with Content-Length\n"));
    }
    let lengths: Vec<&str> = request
        .headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.trim())
        .collect();
    match lengths.as_slice() {
        [] => Err((411, "Content-Length required\n")),
        [one] if !one.is_empty() && one.bytes().all(|b| b.is_ascii_digit()) => one
            .parse::<usize>()
            .map_err(|_| (413, "Content-Length too large\n")),
        [_] => Err((400, "Content-Length must be digits only\n")),
        _ => Err((400, "more than one Content-Length\n")),
    }
}

/// Reads `missing` more bytes into `body`, [`BITE`] at a time, yielding
/// between bites. `Ok(false)` when the peer ended before the last byte.
/// Into the room the caller reserved, if it did (`/publish`, whose budget
/// counts each body's declared length); else `body` grows with what
/// arrives.
pub async fn read_in_bites<S: AsyncRead + Unpin>(
    stream: &mut S,
    body: &mut Vec<u8>,
    missing: u64,
) -> std::io::Result<bool> {
    let want = body.len() as u64 + missing;
    while (body.len() as u64) < want {
        let bite_end = body.len() as u64 + BITE.min(want - body.len() as u64);
        // Not `read_to_end`: with the room exactly reserved, it would grow
        // the body for a last probe, one more copy of all of it.
        while (body.len() as u64) < bite_end {
            let limit = bite_end - body.len() as u64;
            if (&mut *stream).take(limit).read_buf(body).await? == 0 {
                return Ok(false);
            }
        }
        tokio::task::yield_now().await;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_is_read_whole_across_bites_and_a_short_one_is_said() {
        let sent: Vec<u8> = (0..3 * BITE + 17).map(|i| (i % 251) as u8).collect();
        let mut body = sent[..5].to_vec();
        let mut reader = &sent[5..];
        let whole = read_in_bites(&mut reader, &mut body, sent.len() as u64 - 5)
            .await
            .unwrap();
        assert!(whole);
        assert_eq!(body, sent);
        // The peer ends 10 bytes short.
        let mut body = Vec::new();
        let mut reader = &sent[..100];
        let whole = read_in_bites(&mut reader, &mut body, 110).await.unwrap();
        assert!(!whole);
        assert_eq!(body, sent[..100]);
    }
}
