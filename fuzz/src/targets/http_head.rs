//! The agent's HTTP request head, as it reads it from a connection.

use agent::decoders::{MAX_HEAD, parse_head};

use crate::chunks::pieces;

/// Bytes from a connection: read as the server reads them (parsed again
/// after every read), a head found early is the head found in the whole,
/// and nothing over the size limit is ever read.
pub fn http_head(data: &[u8]) {
    let whole = parse_head(data);
    let mut buf = Vec::new();
    for piece in pieces(data) {
        buf.extend_from_slice(piece);
        match parse_head(&buf) {
            Ok(None) => continue,
            Ok(Some(early)) => {
                let Ok(Some(late)) = &whole else {
                    panic!("a head read from a prefix is not read from the whole");
                };
                assert_eq!(
                    (&early.method, &early.path, &early.query, &early.headers),
                    (&late.method, &late.path, &late.query, &late.headers)
                );
                assert!(buf.len() - early.rest.len() <= MAX_HEAD);
                return;
            }
            Err(_) => return,
        }
    }
}
