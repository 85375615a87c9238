//! permessage-deflate (RFC 7692): a client's side of it (what browsers
//! offer, what the server's answer means, inflating what the server then
//! sends: [`inflate`]) and the hub's (which offers it accepts, and each
//! broadcast compressed once for every client that agreed: [`deflate`]).
//!
//! Servers that negotiate it (Python websockets and uvicorn do by default)
//! compress every copy of a broadcast, per connection, for the clients
//! that offer it, which every browser does. A probe that did not offer it
//! would be sent plain frames: a cheaper fan-out than the real clients get.

pub mod deflate;
pub mod inflate;

/// What Chromium and Firefox offer: the server compresses as it likes
/// (context takeover, its full window) and may bound the client's window.
/// The probe never compresses what it sends, so every answer to this offer
/// is one it can honour.
pub const BROWSER_OFFER: &str = "permessage-deflate; client_max_window_bits";

/// The extension's name, as it is offered and answered.
const NAME: &str = "permessage-deflate";

/// What the server agreed to (RFC 7692 §7.1), from its `101` response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accepted {
    /// Each server message is compressed on its own: the inflater starts
    /// afresh for every message.
    pub server_no_context_takeover: bool,
    /// The client may not keep its context (the probe never compresses).
    pub client_no_context_takeover: bool,
    /// The server's window, 8 to 15 bits; `None` is 15. A 15-bit inflater
    /// reads every smaller window.
    pub server_max_window_bits: Option<u8>,
    /// The client's window, 8 to 15 bits (the probe never compresses).
    pub client_max_window_bits: Option<u8>,
}

/// An answer a client must fail the connection for (RFC 6455 §4.1, RFC 7692 §5).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// An extension the client did not offer.
    #[error("the server accepted an extension the client never offered: {0}")]
    NotOffered(String),
    /// permessage-deflate accepted more than once.
    #[error("the server accepted permessage-deflate more than once")]
    Twice,
    /// A parameter RFC 7692 does not define.
    #[error("the server's permessage-deflate has an unknown parameter {0:?}")]
    UnknownParameter(String),
    /// A parameter given twice.
    #[error("the server's permessage-deflate gives {0} twice")]
    RepeatedParameter(String),
    /// A parameter with a value it may not have, or without one it needs.
    #[error("the server's permessage-deflate has {0} with a bad value {1:?}")]
    BadValue(String, String),
}

/// Reads the server's `Sec-WebSocket-Extensions` header values (one item per
/// header line, or several separated by commas), the client having offered
/// [`BROWSER_OFFER`] when `offered`. `None`: no extension is in use.
pub fn read_answer(values: &[&str], offered: bool) -> Result<Option<Accepted>, AnswerError> {
    let mut accepted = None;
    for item in values.iter().flat_map(|v| v.split(',')) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let mut parts = item.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default();
        if !offered || !name.eq_ignore_ascii_case(NAME) {
            return Err(AnswerError::NotOffered(item.to_owned()));
        }
        if accepted.is_some() {
            return Err(AnswerError::Twice);
        }
        accepted = Some(parameters(parts, Side::Answer)?);
    }
    Ok(accepted)
}

/// What the hub answers every offer it accepts: each message is
/// compressed on its own both ways, so one compressed frame serves every
/// client, and a client's message inflates without state kept between them.
pub const HUB_ANSWER: &str =
    "permessage-deflate; server_no_context_takeover; client_no_context_takeover";

/// The hub's answer to a client's `Sec-WebSocket-Extensions` values: the
/// first permessage-deflate offer it can honour gets [`HUB_ANSWER`] (with
/// `server_max_window_bits=15` if the offer named it); offers it cannot
/// (a smaller server window, unknown or repeated parameters, bad values)
/// and other extensions are declined, as RFC 7692 §5 says. `None`: no
/// extension.
pub fn answer_offers(values: &[&str]) -> Option<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .filter_map(|item| {
            let mut parts = item.trim().split(';').map(str::trim);
            let name = parts.next()?;
            name.eq_ignore_ascii_case(NAME).then_some(parts)
        })
        .filter_map(|parts| parameters(parts, Side::Offer).ok())
        // The compressor's window is 15 bits; a client that wants the
        // server's smaller could not read what it sends.
        .find(|offer| offer.server_max_window_bits.is_none_or(|b| b == 15))
        .map(|offer| match offer.server_max_window_bits {
            Some(bits) => format!("{HUB_ANSWER}; server_max_window_bits={bits}"),
            None => HUB_ANSWER.to_owned(),
        })
}

/// Which message the parameters are in: they differ only in that an offer
/// may name `client_max_window_bits` without a value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Offer,
    Answer,
}

/// The parameters after the extension's name.
fn parameters<'a>(
    parts: impl Iterator<Item = &'a str>,
    side: Side,
) -> Result<Accepted, AnswerError> {
    let mut a = Accepted::default();
    let mut seen: Vec<String> = Vec::new();
    for part in parts.filter(|p| !p.is_empty()) {
        let (key, value) = match part.split_once('=') {
            Some((k, v)) => (k.trim(), Some(unquoted(v.trim()))),
            None => (part, None),
        };
        let key = key.to_ascii_lowercase();
        if seen.contains(&key) {
            return Err(AnswerError::RepeatedParameter(key));
        }
        let bad = || AnswerError::BadValue(key.clone(), value.unwrap_or_default().to_owned());
        match key.as_str() {
            "server_no_context_takeover" | "client_no_context_takeover" => {
                if value.is_some() {
                    return Err(bad());
                }
                if key.starts_with("server") {
                    a.server_no_context_takeover = true;
                } else {
                    a.client_no_context_takeover = true;
                }
            }
            "client_max_window_bits" if side == Side::Offer && value.is_none() => {}
            "server_max_window_bits" | "client_max_window_bits" => {
                let bits = value
                    .and_then(|v| v.parse::<u8>().ok())
                    .filter(|b| (8..=15).contains(b))
                    .ok_or_else(bad)?;
                if key.starts_with("server") {
                    a.server_max_window_bits = Some(bits);
                } else {
                    a.client_max_window_bits = Some(bits);
                }
            }
            _ => return Err(AnswerError::UnknownParameter(key)),
        }
        seen.push(key);
    }
    Ok(a)
}

/// A parameter value without the quotes RFC 7692 §7.1 allows around it.
fn unquoted(v: &str) -> &str {
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_servers_give_are_read() {
        assert_eq!(read_answer(&[], true), Ok(None));
        assert_eq!(
            read_answer(&["permessage-deflate"], true),
            Ok(Some(Accepted::default()))
        );
        // Python websockets' usual answer to a browser's offer.
        let a = read_answer(
            &["permessage-deflate; server_max_window_bits=12; client_max_window_bits=\"12\""],
            true,
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.server_max_window_bits, Some(12));
        assert_eq!(a.client_max_window_bits, Some(12));
        let a = read_answer(
            &["Permessage-Deflate;server_no_context_takeover; client_no_context_takeover"],
            true,
        )
        .unwrap()
        .unwrap();
        assert!(a.server_no_context_takeover && a.client_no_context_takeover);
    }

    #[test]
    fn the_hub_accepts_the_offers_it_can_honour_and_declines_the_rest() {
        let hub = |offers: &[&str]| answer_offers(offers);
        // Browsers, Python websockets, gorilla.
        assert_eq!(hub(&[BROWSER_OFFER]).as_deref(), Some(HUB_ANSWER));
        assert_eq!(
            hub(&["permessage-deflate; server_no_context_takeover; client_no_context_takeover"])
                .as_deref(),
            Some(HUB_ANSWER)
        );
        assert_eq!(
            hub(&["permessage-deflate; server_max_window_bits=15"]).as_deref(),
            Some(&*format!("{HUB_ANSWER}; server_max_window_bits=15"))
        );
        // A smaller window than the compressor's, then a fallback offer.
        assert_eq!(
            hub(&["permessage-deflate; server_max_window_bits=10"]),
            None
        );
        assert_eq!(
            hub(&["permessage-deflate; server_max_window_bits=10, permessage-deflate"]).as_deref(),
            Some(HUB_ANSWER)
        );
        // Offers a server must decline: nothing is answered.
        for bad in [
            "permessage-deflate; mystery",
            "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; client_max_window_bits=99",
            "x-webkit-deflate-frame",
        ] {
            assert_eq!(hub(&[bad]), None, "{bad}");
        }
        assert_eq!(hub(&[]), None);
    }

    #[test]
    fn answers_a_client_must_fail_are_errors() {
        let cases: [(&[&str], AnswerError); 7] = [
            (
                &["x-webkit-deflate-frame"],
                AnswerError::NotOffered("x-webkit-deflate-frame".into()),
            ),
            (
                &["permessage-deflate", "permessage-deflate"],
                AnswerError::Twice,
            ),
            (
                &["permessage-deflate, permessage-deflate"],
                AnswerError::Twice,
            ),
            (
                &["permessage-deflate; mystery"],
                AnswerError::UnknownParameter("mystery".into()),
            ),
            (
                &["permessage-deflate; server_no_context_takeover; server_no_context_takeover"],
                AnswerError::RepeatedParameter("server_no_context_takeover".into()),
            ),
            (
                &["permessage-deflate; server_max_window_bits=16"],
                AnswerError::BadValue("server_max_window_bits".into(), "16".into()),
            ),
            (
                &["permessage-deflate; client_no_context_takeover=1"],
                AnswerError::BadValue("client_no_context_takeover".into(), "1".into()),
            ),
        ];
        for (values, error) in cases {
            assert_eq!(read_answer(values, true), Err(error), "{values:?}");
        }
        assert!(matches!(
            read_answer(&["permessage-deflate; client_max_window_bits"], true),
            Err(AnswerError::BadValue(..))
        ));
        // Not offered at all: any extension is one the client never offered.
        assert_eq!(
            read_answer(&["permessage-deflate"], false),
            Err(AnswerError::NotOffered("permessage-deflate".into()))
        );
    }
}
