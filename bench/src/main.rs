//! skewscope's benchmarks. `fanout`: the agent's fan-out span for N
//! connections, with recording on and off, beside the single-thread floor, all
//! in one run with their rounds interleaved so machine noise hits every column
//! alike. `floor`: the single-thread floor alone, with io_uring and staged
//! variants. `floor-server`: that floor behind a WebSocket endpoint, for
//! bench/run. `stamps`: kernel against userspace receipt stamps under CPU
//! stress. `upload`: what probes uploading costs the agent's fan-out, and
//! ingest throughput. `verdict`: an audit's last broadcast to its verdict.

mod act_notify;
mod action_truth;
mod auto_lead;
mod clock_models;
mod drain;
mod fanout;
mod flood;
mod floor;
mod floor_server;
mod format;
mod idle;
mod links;
mod live_cost;
mod probe_cost;
mod processes;
mod publish_flood;
mod report_cost;
mod scrape;
mod stamps;
mod tap;
mod tls;
mod upload;
mod verdict;
mod ws_client;

use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "skewscope-bench", version, about = "skewscope benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Acting together end to end over emulated links: two shifted probes,
    /// each behind its own skewscope-linkemu link, acting on the hub's
    /// broadcasts; the truth of every action from the logs.
    Links {
        /// Link profiles (wired, good-wifi, busy-wifi, asymmetric).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "wired,good-wifi,busy-wifi,asymmetric"
        )]
        profiles: Vec<String>,
        /// Broadcasts measured per profile after the warm-up (one every
        /// 500 ms), besides the 20 of the start-up.
        #[arg(long, default_value_t = 100)]
        broadcasts: usize,
        /// How long the probes run before the measured broadcasts.
        #[arg(long, default_value = "120s", value_parser = skewscope_core::units::parse_duration)]
        warmup: Duration,
        /// The time to act, this long after each broadcast.
        #[arg(long, default_value = "250ms", value_parser = skewscope_core::units::parse_duration)]
        lead: Duration,
        /// Print the figures as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also write the figures as JSON to this file.
        #[arg(long)]
        save: Option<std::path::PathBuf>,
    },
    /// `lead=auto` over emulated links: late actions, and the leads it
    /// chose against the best fixed lead in hindsight.
    AutoLead {
        /// Link profiles (wired, good-wifi, busy-wifi, asymmetric, dozing),
        /// or loopback: no link, the probes straight to the agent.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "wired,good-wifi,busy-wifi,asymmetric,dozing"
        )]
        profiles: Vec<String>,
        /// Busy loops beside each run (2: one per core of this machine),
        /// so the host itself stalls.
        #[arg(long, default_value_t = 0)]
        busy: usize,
        /// The probes act from a real-time thread (their --act-realtime;
        /// needs root or CAP_SYS_NICE), as a device under load should.
        #[arg(long)]
        act_realtime: bool,
        /// Broadcasts measured per profile, after 80 of warm-up: 334 make
        /// over 2,000 actions (6 connections), ten times what a p99.9
        /// needs to be seen once.
        #[arg(long, default_value_t = 334)]
        broadcasts: usize,
        /// Print the figures as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Where the actions' true error came from, for a run whose devices
    /// all ran on this host (bench/apps): per actor and per broadcast, the
    /// true error split into its clock part (the estimate) and its timer
    /// part, read from the agent's store. Prints JSON.
    ActionTruth {
        /// The agent's --data-dir.
        data: std::path::PathBuf,
        /// Only actions aimed at or after this server time (ns since 1970).
        #[arg(long, default_value_t = 0)]
        from_ns: u64,
        /// Only actions aimed at or before this server time.
        #[arg(long, default_value_t = u64::MAX)]
        to_ns: u64,
    },
    /// What --act-notify adds for the app beside a probe: the notice's
    /// latency (Unix datagram and UDP) against one local datagram and
    /// beside the probe's own timer error.
    ActNotify {
        /// Broadcasts, one every 100 ms.
        #[arg(long, default_value_t = 300)]
        broadcasts: usize,
        /// The time to act, this long after each broadcast.
        #[arg(long, default_value = "50ms", value_parser = skewscope_core::units::parse_duration)]
        lead: Duration,
        /// Print the figures as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Clock models side by side over emulated links, deterministic and
    /// without sockets: the truth inside the bound, the bound against the
    /// link's physical limit, the estimate's error. With --days, runs of
    /// days with what real clocks do over days.
    ClockModels {
        /// Link profiles (wired, good-wifi, busy-wifi, asymmetric, dozing);
        /// default: the first four, and all five with --days.
        #[arg(long, value_delimiter = ',')]
        profiles: Vec<String>,
        /// Runs per profile (default 100, and 4 with --days: 4 × 5 profiles
        /// × 7 days is over 10^7 questions).
        #[arg(long)]
        runs: Option<u32>,
        /// Seconds per run.
        #[arg(long, default_value_t = 600)]
        seconds: u64,
        /// Each run's drift is drawn within ± this many ppm.
        #[arg(long, default_value_t = 1.0)]
        drift_ppm: f64,
        /// Seed of every run's chance.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The steady exchange interval (the probe's --time-interval).
        #[arg(long, default_value = "1s", value_parser = skewscope_core::units::parse_duration)]
        interval: Duration,
        /// Runs of this many simulated days instead (7 for the runs):
        /// diurnal crystal wander, chrony on both hosts, the device's NTP
        /// outages ended by a step and a slew, agent restarts, device sleeps,
        /// a probe restart a day.
        #[arg(long)]
        days: Option<f64>,
        /// With --days: the device clock the probe stamps with (monotonic,
        /// the default: as the probe did before 2026-12-07; raw:
        /// CLOCK_MONOTONIC_RAW, which NTP does not slew: the probe's and the
        /// Python module's now).
        #[arg(long, value_enum, default_value = "monotonic")]
        device_clock: clock_models::days::DeviceClock,
        /// With --days: the probe sees its device's sleeps and starts its
        /// clock models again at the wake.
        #[arg(long)]
        sleep_seen: bool,
        /// With --days: worker threads (default: one per core).
        #[arg(long)]
        threads: Option<usize>,
        /// Print the figures as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also write the figures as JSON to this file.
        #[arg(long)]
        save: Option<std::path::PathBuf>,
    },
    /// Fan-out span for N connections: floor vs agent with and without recording.
    Fanout {
        /// Connection counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        sizes: Vec<usize>,
        /// Broadcasts per configuration and size.
        #[arg(long, default_value_t = 300)]
        rounds: usize,
        /// Pause between broadcasts, in milliseconds, so receivers drain.
        #[arg(long, default_value_t = 2)]
        pause_ms: u64,
        /// Print the figures as JSON (for bench/run) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The CPU floor alone, as JSON: one thread writing one frame to N sockets
    /// (what bench/run prints beside every server).
    Floor {
        /// Connection counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "1000")]
        sizes: Vec<usize>,
        /// Rounds per size.
        #[arg(long, default_value_t = 40)]
        rounds: usize,
        /// Open the sending sockets inside this named network namespace
        /// (`ip netns`), so writes cross its link and qdisc.
        #[arg(long, requires = "addr")]
        netns: Option<String>,
        /// Address the sending side listens on.
        #[arg(long, default_value = "127.0.0.1")]
        addr: std::net::IpAddr,
        /// Writer on this core and the drain on the other one (of two).
        #[arg(long)]
        writer_core: Option<usize>,
    },
    /// The CPU floor as a WebSocket server on `/ws` (`/start_test`, `/healthz`),
    /// for bench/run to measure with its probes beside the real servers.
    FloorServer {
        /// Address to listen on.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// Stage every frame (MSG_MORE), then push each socket (TCP_NODELAY).
        #[arg(long)]
        staged: bool,
        /// Start one more thread that only sleeps: the same writes from a
        /// process of two threads, where the kernel counts a reference on
        /// the file of every socket call (what being threaded costs).
        #[arg(long)]
        threaded: bool,
    },
    /// Whether Prometheus scraping /metrics disturbs the fan-out: spans with
    /// no scrape, a scrape every 100 ms, and a scrape at each broadcast.
    Scrape {
        /// Drained clients of the hub.
        #[arg(long, default_value_t = 1000)]
        connections: usize,
        /// Cycles of the three blocks.
        #[arg(long, default_value_t = 10)]
        cycles: usize,
        /// Broadcasts per block.
        #[arg(long, default_value_t = 20)]
        per_block: usize,
    },
    /// One hostile client against 50 others: worst broadcast latency and
    /// the agent's RSS, quiet, under a ping flood, under an empty-frame flood.
    Flood {
        /// Seconds per phase.
        #[arg(long, default_value_t = 4)]
        secs: u64,
    },
    /// What large stamped publishes cost everyone else: forty 1 MB
    /// bodies at once to /publish?lead=1s, against /clock round trips and
    /// a small broadcast's receipt, quiet and during the flood.
    PublishFlood {
        /// Floods, each followed by a second of quiet.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// What TLS costs the fan-out: CPU per broadcast on the shards of a
    /// plain agent and of one with --tls-cert, N clients each, beside the
    /// floor (one thread writing the frame to N sockets).
    Tls {
        /// Client counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        sizes: Vec<usize>,
        /// Broadcasts per server and size.
        #[arg(long, default_value_t = 200)]
        rounds: usize,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// What an idle agent (no client, no broadcast) costs: wake-ups and
    /// CPU per second over every thread, from the kernel's schedstat.
    Idle {
        /// Agent binaries to compare (default: the skewscope-agent beside
        /// this bench binary); sittings are interleaved.
        #[arg(long = "agent", value_name = "PATH")]
        agents: Vec<std::path::PathBuf>,
        /// Seconds per sitting.
        #[arg(long, default_value_t = 10)]
        secs: u64,
        /// Sittings per agent.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Kernel vs userspace receipt stamps, idle and under CPU stress.
    Stamps {
        /// Probe connections.
        #[arg(long, default_value_t = 200)]
        clients: u32,
        /// Test broadcasts per phase.
        #[arg(long, default_value_t = 50)]
        broadcasts: u32,
        /// Busy threads in the stressed phase (default: one per core).
        #[arg(long)]
        busy_threads: Option<usize>,
    },
    /// Fan-out span with and without probes' uploads arriving, and ingest
    /// throughput and CPU, on the release agent binary.
    Upload {
        /// Raw WebSocket clients of the hub.
        #[arg(long, default_value_t = 1000)]
        connections: usize,
        /// Uploading probe sessions (the connections' receipts split among them).
        #[arg(long, default_value_t = 10)]
        probes: usize,
        /// Broadcasts, every other one with an upload arriving.
        #[arg(long, default_value_t = 400)]
        rounds: usize,
        /// Seconds of ingest alone.
        #[arg(long, default_value_t = 5)]
        ingest_secs: u64,
    },
    /// The agent's tap beside a server it does not replace: copies captured
    /// against sent, its CPU against the server's, the server's span with
    /// the tap on and off (needs CAP_NET_RAW).
    Tap {
        /// Client counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        sizes: Vec<usize>,
        /// Broadcasts per size.
        #[arg(long, default_value_t = 200)]
        rounds: usize,
    },
    /// Last broadcast to verdict of `skewscope audit`, on the release
    /// binaries: one agent, real probes uploading.
    Verdict {
        /// Probe processes.
        #[arg(long, default_value_t = 10)]
        probes: usize,
        /// Connections per probe.
        #[arg(long, default_value_t = 100)]
        connections: usize,
        /// Broadcasts per audit.
        #[arg(long, default_value_t = 20)]
        broadcasts: u64,
        /// Audits; the median is printed.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// What a probe costs its device per receipt (CPU, peak memory per
    /// connection, delivery), for one or more probe builds side by side.
    ProbeCost {
        /// A probe binary to measure (repeatable, e.g. an older build beside
        /// this one); default this benchmark's sibling skewscope-probe.
        #[arg(long = "probe-bin", value_name = "PATH")]
        probe_bins: Vec<std::path::PathBuf>,
        /// Connections per probe.
        #[arg(long, default_value_t = 200)]
        connections: u32,
        /// Broadcasts per round.
        #[arg(long, default_value_t = 100)]
        broadcasts: u32,
        /// Pause between broadcasts, ms.
        #[arg(long, default_value_t = 20)]
        interval_ms: u64,
        /// Rounds (each runs every build once); medians are printed.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Leave the agent's permessage-deflate on (its default), so probes
        /// that offer it receive compressed frames and inflate them. Off:
        /// the agent runs with --no-deflate and every build gets plain
        /// frames, the receive path alone.
        #[arg(long)]
        agent_deflate: bool,
    },
    /// What the agent's live join (receive skew on /metrics) costs per
    /// receipt, beside the report's join of the same records.
    LiveCost {
        /// Uploading probes.
        #[arg(long, default_value_t = 10)]
        probes: usize,
        /// Connections per probe.
        #[arg(long, default_value_t = 100)]
        connections: usize,
        /// Broadcasts.
        #[arg(long, default_value_t = 1_000)]
        broadcasts: u64,
        /// Runs; the median is printed.
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// What `skewscope report` costs on a long run: time and peak memory as
    /// a process, on probe logs of two shapes (100 connections; one
    /// connection, a broadcast per receipt), beside the same report with
    /// every receipt held at once.
    ReportCost {
        /// Receipts per log.
        #[arg(long, default_value_t = 1_000_000)]
        receipts: u64,
        /// Time exchanges (one a second).
        #[arg(long, default_value_t = 100_000)]
        exchanges: u64,
        /// Runs; the medians are printed.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// The `skewscope` binary measured (default: the one beside this bench).
        #[arg(long, value_name = "PATH")]
        skewscope: Option<std::path::PathBuf>,
        /// Instead, write one synthetic log to FILE, of `--connections` ×
        /// `--broadcasts` receipts.
        #[arg(long, value_name = "FILE")]
        write: Option<std::path::PathBuf>,
        /// With `--write`: probe connections.
        #[arg(long, default_value_t = 100)]
        connections: u32,
        /// With `--write`: broadcasts.
        #[arg(long, default_value_t = 10_000)]
        broadcasts: u64,
        /// (Internal) the whole-run report of FILES, for the side-by-side.
        #[arg(long, value_name = "FILE", hide = true, num_args = 1..)]
        whole_run: Option<Vec<std::path::PathBuf>>,
        /// (Internal) run the rest of the line and print its time and peak memory.
        #[arg(long, hide = true, num_args = 1.., allow_hyphen_values = true)]
        peak_of: Option<Vec<std::ffi::OsString>>,
    },
}

/// Link profiles by name, as the command line gives them.
fn link_profiles(names: &[String]) -> anyhow::Result<Vec<skewscope_linkemu::Profile>> {
    names
        .iter()
        .map(|n| {
            skewscope_linkemu::Profile::named(n)
                .ok_or_else(|| anyhow::anyhow!("no link profile {n:?}"))
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Links {
            profiles,
            broadcasts,
            lead,
            warmup,
            json,
            save,
        } => {
            let profiles = link_profiles(&profiles)?;
            let figures = links::run(&profiles, broadcasts, lead, warmup)?;
            if let Some(path) = save {
                std::fs::write(path, serde_json::to_string_pretty(&figures)? + "\n")?;
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&figures)?);
            } else {
                links::print(&figures, lead, warmup);
            }
            Ok(())
        }
        Command::AutoLead {
            profiles,
            busy,
            act_realtime,
            broadcasts,
            json,
        } => {
            let paths = profiles
                .iter()
                .map(|n| {
                    auto_lead::Path::named(n)
                        .ok_or_else(|| anyhow::anyhow!("no link profile {n:?} (or loopback)"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let figures = auto_lead::run(&paths, broadcasts, busy, act_realtime)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&figures)?);
            } else {
                auto_lead::print(&figures);
            }
            Ok(())
        }
        Command::ActionTruth {
            data,
            from_ns,
            to_ns,
        } => {
            let truth = action_truth::run(&data, from_ns, to_ns)?;
            println!("{}", serde_json::to_string_pretty(&truth)?);
            Ok(())
        }
        Command::ActNotify {
            broadcasts,
            lead,
            json,
        } => {
            let figures = act_notify::run(broadcasts, lead)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&figures)?);
            } else {
                act_notify::print(&figures);
            }
            Ok(())
        }
        Command::ClockModels {
            profiles,
            runs,
            seconds,
            drift_ppm,
            seed,
            interval,
            days,
            device_clock,
            sleep_seen,
            threads,
            json,
            save,
        } => {
            let profiles = match (profiles.is_empty(), days.is_some()) {
                (false, _) => link_profiles(&profiles)?,
                (true, false) => {
                    use skewscope_linkemu::Profile;
                    vec![
                        Profile::WIRED,
                        Profile::GOOD_WIFI,
                        Profile::BUSY_WIFI,
                        Profile::ASYMMETRIC,
                    ]
                }
                (true, true) => skewscope_linkemu::Profile::ALL.to_vec(),
            };
            let interval_ns = interval.as_nanos() as u64;
            let figures = if let Some(days) = days {
                anyhow::ensure!(days > 0.0, "--days must be positive");
                let options = clock_models::days::Options {
                    days,
                    runs: runs.unwrap_or(4),
                    seed,
                    interval_ns,
                    device_clock,
                    sleep_seen,
                    threads: threads.unwrap_or_else(|| {
                        std::thread::available_parallelism().map_or(1, |n| n.get())
                    }),
                };
                let started = std::time::Instant::now();
                let figures = clock_models::days::run(&profiles, options);
                let taken = started.elapsed().as_secs_f64();
                if !json {
                    clock_models::days::print(&figures, &options, taken);
                }
                serde_json::to_value(serde_json::json!({
                    "options": options,
                    "seconds_taken": taken,
                    "profiles": figures,
                }))?
            } else {
                let runs = runs.unwrap_or(100);
                let figures =
                    clock_models::run(&profiles, runs, seconds, drift_ppm, seed, interval_ns);
                if !json {
                    clock_models::print(&figures, runs, seconds, drift_ppm);
                }
                serde_json::to_value(&figures)?
            };
            if let Some(path) = save {
                std::fs::write(path, serde_json::to_string_pretty(&figures)? + "\n")?;
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&figures)?);
            }
            Ok(())
        }
        Command::Fanout {
            sizes,
            rounds,
            pause_ms,
            json,
        } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(fanout::run(
                &sizes,
                rounds,
                Duration::from_millis(pause_ms),
                json,
            ))
        }
        Command::Floor {
            sizes,
            rounds,
            netns,
            addr,
            writer_core,
        } => {
            let placement = floor::Placement {
                netns,
                addr,
                writer_core,
            };
            let rows = floor::measure(&sizes, rounds, &placement, &fanout::test_frame())?;
            println!("{}", serde_json::to_string_pretty(&rows)?);
            Ok(())
        }
        Command::FloorServer {
            listen,
            staged,
            threaded,
        } => floor_server::serve(listen, staged, threaded),
        Command::ProbeCost {
            probe_bins,
            connections,
            broadcasts,
            interval_ms,
            rounds,
            agent_deflate,
        } => probe_cost::run(
            probe_bins,
            connections,
            broadcasts,
            Duration::from_millis(interval_ms),
            rounds,
            agent_deflate,
        ),
        Command::LiveCost {
            probes,
            connections,
            broadcasts,
            runs,
        } => live_cost::run(probes, connections, broadcasts, runs),
        Command::ReportCost {
            receipts,
            exchanges,
            runs,
            skewscope,
            write,
            connections,
            broadcasts,
            whole_run,
            peak_of,
        } => match (write, whole_run, peak_of) {
            (Some(path), _, _) => report_cost::write(&path, connections, broadcasts, exchanges),
            (_, Some(path), _) => report_cost::whole_run(&path),
            (_, _, Some(command)) => report_cost::peak_of(&command),
            (None, None, None) => report_cost::run(receipts, exchanges, runs, skewscope),
        },
        Command::Upload {
            connections,
            probes,
            rounds,
            ingest_secs,
        } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(upload::run(upload::Options {
                connections,
                probes,
                rounds,
                ingest_for: Duration::from_secs(ingest_secs),
            }))
        }
        Command::Tap { sizes, rounds } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(tap::run(&sizes, rounds))
        }
        Command::Verdict {
            probes,
            connections,
            broadcasts,
            runs,
        } => verdict::run(verdict::Options {
            probes,
            connections,
            broadcasts,
            runs,
        }),
        Command::Scrape {
            connections,
            cycles,
            per_block,
        } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(scrape::run(connections, cycles, per_block))
        }
        Command::Flood { secs } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(flood::run(secs))
        }
        Command::PublishFlood { rounds } => publish_flood::run(rounds),
        Command::Tls {
            sizes,
            rounds,
            json,
        } => tls::run(&sizes, rounds, json),
        Command::Idle {
            agents,
            secs,
            rounds,
            json,
        } => idle::run(agents, secs, rounds, json),
        Command::Stamps {
            clients,
            broadcasts,
            busy_threads,
        } => {
            let busy = busy_threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            runtime.block_on(stamps::run(clients, broadcasts, busy))
        }
    }
}
