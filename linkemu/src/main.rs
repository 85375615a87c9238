//! `skewscope-linkemu`: a device's link to a server, emulated, for
//! `bench/run` and for trying a probe over Wi-Fi by hand.
//!
//! ```sh
//! skewscope-linkemu --profile good-wifi --to 127.0.0.1:8080 --log link.jsonl
//! # prints "listening on 127.0.0.1:PORT": point the probe there
//! ```

use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use skewscope_linkemu::{Link, Profile};

/// Relays TCP and UDP on one port to a server's one port, through an
/// emulated link.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// wired, good-wifi, busy-wifi or asymmetric.
    #[arg(long, default_value = "good-wifi")]
    profile: String,
    /// The link's chance is drawn from this.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where devices connect (port 0: any free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The server: TCP and UDP on this one port.
    #[arg(long)]
    to: SocketAddr,
    /// Every delay applied, one JSON line a packet.
    #[arg(long)]
    log: Option<std::path::PathBuf>,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long)]
    seconds: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let profile = Profile::named(&args.profile).with_context(|| {
        format!(
            "no profile {:?}: one of {}",
            args.profile,
            Profile::ALL.map(|p| p.name).join(", ")
        )
    })?;
    let log = args
        .log
        .as_ref()
        .map(std::fs::File::create)
        .transpose()
        .context("cannot create the log")?;
    let link = Link::start(profile, args.seed, args.listen, args.to, log)?;
    println!("listening on {}", link.addr());
    match args.seconds {
        Some(s) => std::thread::sleep(std::time::Duration::from_secs(s)),
        None => loop {
            std::thread::park();
        },
    }
    let _ = link.stop();
    Ok(())
}
