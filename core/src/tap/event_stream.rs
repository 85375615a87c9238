//! An event stream (SSE) a tapped server sends: the response body read as
//! the probe's `--protocol sse` reads it ([`crate::sse::EventStream`]:
//! chunked, of a length or to the close; events by the HTML standard), each
//! event's data a message dated by the segments that carried its first and
//! last byte. The probe records the same data, so the report joins them.

use crate::sse::{EventStream, ResponseHead, SseError};

/// One followed event stream.
pub(crate) struct TappedEventStream {
    stream: EventStream,
    /// Capture time of the first byte of the event it holds part of.
    since_ns: Option<u64>,
}

impl TappedEventStream {
    /// The stream after `head`, taking the event types in `events` (empty:
    /// every one), each line and event's data up to `max_message` bytes.
    pub(crate) fn new(head: &ResponseHead, events: Vec<String>, max_message: usize) -> Self {
        TappedEventStream {
            stream: EventStream::new(head, events, max_message),
            since_ns: None,
        }
    }

    /// Body bytes captured at `at_ns`: each event they complete goes to
    /// `deliver` with the capture time of its first byte. Returns how many.
    pub(crate) fn push(
        &mut self,
        bytes: &[u8],
        at_ns: u64,
        deliver: &mut dyn FnMut(&[u8], u64),
    ) -> Result<usize, SseError> {
        let started = self.since_ns.unwrap_or(at_ns);
        let mut n = 0usize;
        let result = self.stream.push(bytes, &mut |data| {
            deliver(data, if n == 0 { started } else { at_ns });
            n += 1;
        });
        self.since_ns = self
            .stream
            .holds_partial()
            .then_some(if n == 0 { started } else { at_ns });
        result.map(|()| n)
    }

    /// Whether the body has ended (its last chunk, or its length).
    pub(crate) fn ended(&self) -> bool {
        self.stream.ended()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::parse_response_head;

    #[test]
    fn events_are_dated_by_the_segments_of_their_first_and_last_byte() {
        let head = parse_response_head(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        )
        .unwrap()
        .unwrap()
        .0;
        let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
        let body = [
            chunk("retry: 300\n"),
            chunk(": keep-alive\n\n"),
            chunk("id: 1\nevent: show\ndata: {\"n\":0}\n\n"),
            chunk("id: 2\nevent: other\ndata: {}\n\n"),
            chunk("event: show\ndata: {\"n\":1}\n\n"),
            "0\r\n\r\n".to_owned(),
        ]
        .concat();
        let body = body.as_bytes();
        // Segments: the first two chunks; the first event cut in two; the
        // rest of it and two more events; the last chunk.
        let cut = body.windows(3).position(|w| w == b":0}").unwrap();
        let last = body.len() - 5;
        let mut s = TappedEventStream::new(&head, vec!["show".into()], 1 << 20);
        let mut got = Vec::new();
        for (bytes, at) in [(&body[..cut], 3), (&body[cut..last], 4), (&body[last..], 5)] {
            s.push(bytes, at, &mut |d, first| {
                got.push((String::from_utf8_lossy(d).into_owned(), first, at))
            })
            .unwrap();
        }
        // The second event's first byte came in the segment that finished
        // the first.
        assert_eq!(
            got,
            vec![("{\"n\":0}".into(), 3, 4), ("{\"n\":1}".into(), 4, 4)]
        );
        assert!(s.ended());
    }
}
