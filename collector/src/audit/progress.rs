//! What the audit says on stderr while it runs: a live line on a terminal
//! (indicatif), plain lines otherwise, so a CI log reads like a story and a
//! terminal does not scroll.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Plain mode writes a waiting line at most this often.
const PLAIN_EVERY: Duration = Duration::from_secs(1);

/// The audit's progress output.
pub struct Progress {
    bar: Option<ProgressBar>,
    last_plain: Option<Instant>,
}

impl Progress {
    /// A live bar over `broadcasts` steps on a terminal, plain lines otherwise.
    pub fn new(broadcasts: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(
                Some(broadcasts),
                ProgressDrawTarget::stderr_with_hz(10),
            );
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{bar:20}] {pos}/{len} {msg}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            bar,
            last_plain: None,
        }
    }

    /// A line that always shows (above the bar on a terminal).
    pub fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// Broadcast `i` of `k` was triggered.
    pub fn triggered(&mut self, i: u64, k: u64, detail: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(i);
                bar.set_message(format!("broadcast {i} of {k} {detail}"));
            }
            None => eprintln!("audit: broadcast {i} of {k} {detail}"),
        }
    }

    /// Waiting for receipts: the state now.
    pub fn waiting(&mut self, state: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(state.to_owned()),
            None => {
                if self.last_plain.is_none_or(|t| t.elapsed() >= PLAIN_EVERY) {
                    self.last_plain = Some(Instant::now());
                    eprintln!("audit: {state}");
                }
            }
        }
    }

    /// Removes the live line, leaving the terminal clean for the report.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
