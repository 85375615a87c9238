//! The daemons' log lines: levels, a target per part (`agent::engine`,
//! `probe::upload`, …), chosen with `RUST_LOG` or `--log`, written to
//! standard error as plain lines.
//!
//! Under systemd (`JOURNAL_STREAM` names standard error) each line starts
//! with its syslog priority (`<4>` for a warning) and carries no time:
//! journald stamps lines itself and reads the priority, so `journalctl -p
//! warning` shows warnings and errors. Elsewhere a line starts with its UTC
//! time. Nothing is coloured: the lines are read in files and journals.

use std::io::IsTerminal as _;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// What the daemons show when neither `--log` nor `RUST_LOG` says.
pub const DEFAULT_FILTER: &str = "info";

/// Starts logging to standard error with `filter` (`--log`; else
/// `RUST_LOG`; else `default`, such as [`DEFAULT_FILTER`]), in the form for
/// where standard error goes. A filter that does not parse is an error
/// naming it; so is a second call (logging is already set up).
pub fn init(filter: Option<&str>, default: &str) -> Result<(), String> {
    // `target=level` pairs and a bare default level: what the daemons
    // need of RUST_LOG's syntax. tracing-subscriber's `Targets` parses it
    // without a regular-expression engine, which would add most of a
    // megabyte to the devices' static probe.
    let filter: Targets = match filter {
        Some(f) => f.parse().map_err(|e| format!("--log {f}: {e}"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(f) if !f.is_empty() => f.parse().map_err(|e| format!("RUST_LOG={f}: {e}"))?,
            _ => default.parse().map_err(|e| format!("{default}: {e}"))?,
        },
    };
    let format = Lines {
        journald: under_journald(),
    };
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(format)
        .with_filter(filter);
    tracing_subscriber::registry()
        .with(lines)
        .try_init()
        .map_err(|e| e.to_string())
}

/// Whether standard error is the journal's stream: systemd sets
/// `JOURNAL_STREAM` to its device and inode, which a redirected standard
/// error no longer matches.
fn under_journald() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    if std::io::stderr().is_terminal() {
        return false;
    }
    match nix::sys::stat::fstat(std::io::stderr()) {
        Ok(st) => dev == st.st_dev.to_string() && ino == st.st_ino.to_string(),
        Err(_) => false,
    }
}

/// The syslog priority of a level (RFC 5424: 3 error … 7 debug).
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// One plain line per event: `TIME LEVEL target: message`, or under the
/// journal `<PRIORITY>LEVEL target: message`.
struct Lines {
    journald: bool,
}

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        if self.journald {
            write!(writer, "<{}>", priority(meta.level()))?;
        } else {
            SystemTime.format_time(&mut writer)?;
            write!(writer, " ")?;
        }
        write!(writer, "{} {}: ", meta.level(), meta.target())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_map_to_syslog_priorities() {
        assert_eq!(priority(&Level::ERROR), 3);
        assert_eq!(priority(&Level::WARN), 4);
        assert_eq!(priority(&Level::INFO), 6);
        assert_eq!(priority(&Level::DEBUG), 7);
    }

    #[test]
    fn a_filter_that_does_not_parse_is_an_error_naming_it() {
        let e = init(Some("agent=["), DEFAULT_FILTER).unwrap_err();
        assert!(e.contains("--log agent=["), "{e}");
    }
}
