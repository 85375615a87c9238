//! What an SSE server answers, as the probe's `--protocol sse` reads it:
//! the response head, the body (chunked, of a length, or to the end) and
//! the events in it.

use skewscope_core::sse::{EventStream, ResponseHead, parse_response_head};

use crate::chunks::pieces;

/// Longest line or event the fuzzed stream takes: small, so it is reached.
const MAX_BYTES: usize = 1024;

/// A response (head and body) read from the input, or the input as a body
/// of each framing: in pieces the same events, last event id, retry time,
/// end and verdict as at once; no event's data over the limit.
pub fn sse(data: &[u8]) {
    let heads = match parse_response_head(data) {
        Ok(Some((head, used))) => vec![(head, used)],
        _ => [
            "",
            "Transfer-Encoding: chunked\r\n",
            "Content-Length: 100\r\n",
        ]
        .iter()
        .map(|extra| {
            let text = format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{extra}\r\n");
            parse_response_head(text.as_bytes())
                .expect("a head made here")
                .expect("complete")
        })
        .map(|(head, _)| (head, 0))
        .collect(),
    };
    for (head, used) in heads {
        let body = &data[used..];
        let whole = read(&head, &[body]);
        let split = read(&head, &pieces(body));
        assert_eq!(whole, split, "pieces change what is read");
        for event in &whole.0 {
            assert!(event.len() <= MAX_BYTES, "an event of {}", event.len());
        }
    }
}

type Read = (Vec<Vec<u8>>, String, Option<u64>, bool, bool);

fn read(head: &ResponseHead, input: &[&[u8]]) -> Read {
    let mut stream = EventStream::new(
        head,
        vec!["message".to_owned(), "show".to_owned()],
        MAX_BYTES,
    );
    let mut events = Vec::new();
    let mut failed = false;
    for piece in input {
        if stream
            .push(piece, &mut |d| events.push(d.to_vec()))
            .is_err()
        {
            failed = true;
            break;
        }
    }
    (
        events,
        stream.last_event_id().to_owned(),
        stream.retry_ms(),
        stream.ended(),
        failed,
    )
}
