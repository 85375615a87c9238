//! `skewscope`: report on recorded runs, or run the embedded demo.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use collector::audit::progress::Progress;
use collector::audit::{self, AuditOptions};
#[cfg(feature = "demo")]
use collector::demo::{self, DemoOptions};
use collector::matching::Matcher;
use collector::sentences;
use collector::{inputs, joined, table, verdict_lines, window_args};
use skewscope_core::analysis::join::Window;
use skewscope_core::analysis::verdict::Thresholds;

/// skewscope: how far apart in time your WebSocket clients really receive each
/// broadcast, and why.
#[derive(Parser)]
#[command(name = "skewscope", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The help's sections, by what a person came to do.
mod heading {
    pub const READ: &str = "What to read";
    pub const WHICH: &str = "Which broadcasts to judge";
    pub const OUTPUT: &str = "Output";
    pub const AGENT: &str = "The agent to audit";
    pub const TRIGGER: &str = "What to trigger, or watch";
    pub const WAIT: &str = "Waiting for probes and receipts";
    pub const THRESHOLDS: &str = "Thresholds (the verdict)";
    #[cfg(feature = "demo")]
    pub const RUN: &str = "The run";
}

#[derive(Subcommand)]
enum Command {
    /// Join agent and probe logs and report skew, latency, fan-out and loss.
    Report {
        /// Record logs: one agent run's segments and any number of probe logs;
        /// a directory (an agent's data directory) stands for every log in it
        /// and in its probes/ (the runs probes uploaded).
        #[arg(required = true, help_heading = heading::READ)]
        files: Vec<PathBuf>,
        /// When each broadcast was triggered, for latency without an agent log:
        /// one wall-clock time in ns since 1970 per line (`date +%s%N`).
        #[arg(long, value_name = "FILE", help_heading = heading::READ)]
        triggers: Option<PathBuf>,
        /// Only the agent's broadcasts with these ids, `FIRST-LAST` (what an
        /// audit of the hub judged).
        #[arg(long, value_name = "FIRST-LAST", value_parser = parse_range, conflicts_with = "between", help_heading = heading::WHICH)]
        broadcasts: Option<(u64, u64)>,
        /// Only broadcasts first received between two wall-clock times,
        /// `FROM-TO`, or from `FROM` until now. Each is an RFC 3339 time
        /// (`2026-12-06T17:00:00Z`, or with an offset like `+01:00`), a
        /// time before now (`-10m`: ten minutes ago), `now`, or ns since
        /// 1970 (what an audit of a foreign server prints). `-10m`: the
        /// last ten minutes.
        #[arg(long, value_name = "FROM-TO", value_parser = parse_between_now, allow_hyphen_values = true, help_heading = heading::WHICH)]
        between: Option<(u64, u64)>,
        /// The probes listened to a server that is not the agent (FastAPI,
        /// Go, any app): the agent's log then serves only as the clock all
        /// receipts are corrected to (the probes measured their offsets to
        /// it), and as the sends of that server when the agent tapped it
        /// (--tap-port); its own hub's broadcasts are left out. The report
        /// tells this from the logs by itself and says which reference it
        /// used; give this flag when it guessed wrong.
        #[arg(long, help_heading = heading::WHICH)]
        agent_as_reference: bool,
        /// Judge only broadcasts whose payload matches: `/POINTER=VALUE` (a
        /// JSON pointer equal to a value, like `/type=start`) or
        /// `re:EXPRESSION` (a regular expression on text payloads). The
        /// report says how many were left out.
        #[arg(long = "match", value_name = "EXPR", value_parser = parse_matcher, help_heading = heading::WHICH)]
        matching: Option<(String, Matcher)>,
        /// Also write the report as JSON to this file (`-` for standard output).
        #[arg(long, value_name = "OUT", help_heading = heading::OUTPUT)]
        json: Option<PathBuf>,
        /// Also write the report as one self-contained HTML page with plots
        /// (no script, nothing fetched; light and dark).
        #[arg(long, value_name = "OUT", help_heading = heading::OUTPUT)]
        html: Option<PathBuf>,
    },
    /// Audit a running installation: trigger broadcasts, wait for the
    /// probes' uploaded receipts, print the report and a PASS/FAIL line per
    /// threshold.
    ///
    /// Exit status: 0 every threshold passes; 1 a threshold fails; 2 the
    /// audit could not run (agent unreachable, token refused, fewer probes
    /// uploading than --require-probes, a trigger refused, the agent
    /// restarted, or no broadcast reached two connections).
    ///
    /// Skew thresholds are judged on the upper bound of the skew corrected
    /// to the agent's clock (or on the measured skew when every receipt is
    /// on one clock): a pass holds for the truth, not only the estimate.
    ///
    /// Only this agent run and the probe runs that upload during the audit
    /// are judged; earlier runs the agent keeps are named and left out.
    #[command(verbatim_doc_comment)]
    Audit(Box<AuditArgs>),
    /// Print the JSON Schema of `report --json` (the committed copy is
    /// docs/report.schema.json).
    JsonSchema,
    /// Run an agent and probe connections on loopback, broadcast, and report:
    /// by default each broadcast carries a time to act and the probe acts
    /// on it, so the report shows how far apart the copies were received
    /// and how far apart the actions happened.
    #[cfg(feature = "demo")]
    Demo {
        /// Probe connections (two probes share them).
        #[arg(long, value_name = "N", default_value_t = 100, help_heading = heading::RUN)]
        clients: u32,
        /// Test broadcasts.
        #[arg(long, value_name = "K", default_value_t = 20, help_heading = heading::RUN)]
        broadcasts: u32,
        /// Pause between broadcasts (e.g. 100ms, 1s).
        #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = skewscope_core::units::parse_duration, help_heading = heading::RUN)]
        interval: Duration,
        /// The time to act, this long after each broadcast's start: 50ms is
        /// ample for 100 loopback connections on a loaded 2-core machine
        /// (their copies are read within a few ms); the report says how
        /// short it could have been. `auto`: the agent picks it from what
        /// the probes' uploads measure (the first broadcasts, before any
        /// is judged, get its allowance for an unmeasured network).
        #[arg(
            long,
            value_name = "DURATION|auto",
            default_value = "50ms",
            allow_hyphen_values = true,
            conflicts_with = "no_act",
            help_heading = heading::RUN
        )]
        lead: skewscope_core::lead::LeadChoice,
        /// Receive only: no time to act in the broadcasts, no actions.
        #[arg(long, help_heading = heading::RUN)]
        no_act: bool,
        /// Also write the report as JSON to this file (`-` for standard output).
        #[arg(long, value_name = "OUT", help_heading = heading::OUTPUT)]
        json: Option<PathBuf>,
        /// Also write the report as one self-contained HTML page with plots.
        #[arg(long, value_name = "OUT", help_heading = heading::OUTPUT)]
        html: Option<PathBuf>,
        /// Keep the agent and probe logs in this directory (default: a
        /// temporary one, removed), for `skewscope report` later.
        #[arg(long, value_name = "DIR", help_heading = heading::OUTPUT)]
        keep: Option<PathBuf>,
    },
    /// Load a server stage by stage and find up to how many clients it
    /// still reaches them together: at each stage (5, 100, 1,000, 5,000,
    /// 10,000 connections from this machine by default) K broadcasts, each
    /// asked for by --trigger; per stage the receive skew, the latency from
    /// the trigger, missing receipts, connections refused or dropped and
    /// the server's CPU (--server-pid); then the knee against
    /// --max-skew-p99. Any server: --protocol as the probe takes it.
    ///
    ///   skewscope sweep --url ws://127.0.0.1:8000/ws \
    ///       --trigger http://127.0.0.1:8000/start_test --server-pid 4242 \
    ///       --json fastapi.json --html fastapi.html
    ///
    /// Exit status: 0 a stage was measured (whatever the knee); 2 none
    /// was (a flag, the trigger or the server pid wrong, the trigger made
    /// no broadcast): the result still says why.
    #[cfg(feature = "demo")]
    #[command(verbatim_doc_comment)]
    Sweep(Box<collector::sweep::args::SweepArgs>),
    /// Open connections for a sweep run from another machine
    /// (`skewscope sweep --workers N --agent URL`): waits on that agent's
    /// board, opens its share of each stage as the sweep says, exchanges
    /// time with the agent and uploads every record to it. Stop it with
    /// SIGINT or SIGTERM (it closes what it holds first), or give --once.
    ///
    ///   skewscope sweep-worker --agent http://10.0.0.2:8080 \
    ///       --token-file /etc/skewscope/agent.token --name rack-2
    #[cfg(feature = "demo")]
    #[command(verbatim_doc_comment)]
    SweepWorker(Box<collector::sweep::worker::WorkerArgs>),
    /// Put saved sweeps (`skewscope sweep --json`) side by side: one table
    /// of skew and latency per stage with a column each, their knees, and
    /// what differed between the runs besides the server.
    #[cfg(feature = "demo")]
    SweepCompare {
        /// The results, as `skewscope sweep --json` wrote them.
        #[arg(required = true, num_args = 1.., value_name = "RESULT.json", help_heading = heading::READ)]
        files: Vec<PathBuf>,
        /// Also write them as one HTML page with a curve each.
        #[arg(long, value_name = "OUT", help_heading = heading::OUTPUT)]
        html: Option<PathBuf>,
    },
}

/// `skewscope audit`'s options.
#[derive(clap::Args)]
struct AuditArgs {
    /// The agent's address, http://HOST:PORT (https:// when it has
    /// --tls-cert): the port it listens on (--listen). A bare HOST:PORT
    /// means http://.
    #[arg(long, value_name = "URL", help_heading = heading::AGENT)]
    agent: String,
    /// File holding the agent's bearer token: the file the agent was given
    /// with its --token-file (/etc/skewscope/agent.token where its package
    /// installed it).
    #[arg(long, value_name = "FILE", help_heading = heading::AGENT)]
    token_file: Option<PathBuf>,
    /// For an https:// agent (--tls-cert): trust only the CA certificates
    /// in this PEM file (a site's own CA), instead of the system's roots.
    #[arg(long, value_name = "PEM", help_heading = heading::AGENT)]
    ca_file: Option<PathBuf>,
    /// Broadcasts to trigger; with --passive, stop watching once this many
    /// were seen (without it a passive audit watches all of --window).
    #[arg(long, value_name = "K", default_value_t = 20, help_heading = heading::TRIGGER)]
    broadcasts: u64,
    /// Pause between broadcasts.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = skewscope_core::units::parse_duration, help_heading = heading::TRIGGER)]
    interval: Duration,
    /// Trigger broadcasts here instead of the agent's /start_test: a server
    /// that is not the agent (e.g. FastAPI's /start_test); the agent stays
    /// the clock reference and collector.
    #[arg(long, value_name = "URL", help_heading = heading::TRIGGER)]
    trigger: Option<String>,
    /// HTTP method for --trigger.
    #[arg(long, default_value = "GET", value_parser = ["GET", "POST"], help_heading = heading::TRIGGER)]
    trigger_method: String,
    /// The time to act the hub's test broadcasts carry, this long after
    /// each is sent (`/start_test?lead=`, at `/at_ns` in the message):
    /// probes run with `--act-at /at_ns` act then, and the verdict can
    /// judge their actions. A foreign server (`--trigger`) puts its own
    /// time to act in its messages: give the lead in its trigger URL if it
    /// takes one. `auto`: the agent picks each from what the probes'
    /// uploads measure (`lead=auto`), and the report says what it chose
    /// and how many actions were late.
    #[arg(
        long,
        value_name = "DURATION|auto",
        allow_hyphen_values = true,
        conflicts_with = "trigger",
        help_heading = heading::TRIGGER
    )]
    lead: Option<skewscope_core::lead::LeadChoice>,
    /// Trigger nothing: watch the site's own broadcasts for --window (or
    /// until --broadcasts were seen) and judge those, for an audit where
    /// real people watch the screens. Exit codes as for any audit.
    #[arg(long, conflicts_with_all = ["trigger", "lead", "interval"], help_heading = heading::TRIGGER)]
    passive: bool,
    /// How long a passive audit watches.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = skewscope_core::units::parse_duration, requires = "passive", help_heading = heading::TRIGGER)]
    window: Duration,
    /// Judge only broadcasts whose payload matches: `/POINTER=VALUE` or
    /// `re:EXPRESSION`, as for `report`.
    #[arg(long = "match", value_name = "EXPR", value_parser = parse_matcher, help_heading = heading::TRIGGER)]
    matching: Option<(String, Matcher)>,
    /// Longest wait for probes before the first broadcast, and for receipts
    /// after the last; receipts still absent then count missing.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = skewscope_core::units::parse_duration, help_heading = heading::WAIT)]
    settle: Duration,
    /// Probes that must be uploading to the agent before the audit begins
    /// (at least 1: the audit judges what probes upload, and with none there
    /// is nothing to judge).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..), help_heading = heading::WAIT)]
    require_probes: usize,
    /// Most median skew per broadcast allowed.
    #[arg(long, value_name = "DURATION", value_parser = parse_ns, help_heading = heading::THRESHOLDS)]
    max_skew_p50: Option<u64>,
    /// Most 99th-percentile skew allowed.
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_ns, help_heading = heading::THRESHOLDS)]
    max_skew_p99: Option<u64>,
    /// Most skew of any one broadcast allowed.
    #[arg(long, value_name = "DURATION", value_parser = parse_ns, help_heading = heading::THRESHOLDS)]
    max_skew_max: Option<u64>,
    /// Most receipts missing allowed (broadcast × connection).
    #[arg(long, value_name = "N", default_value_t = 0, help_heading = heading::THRESHOLDS)]
    max_missing: u64,
    /// Most error bound of any probe's clock offset to the agent.
    #[arg(long, value_name = "DURATION", value_parser = parse_ns, help_heading = heading::THRESHOLDS)]
    max_offset_bound: Option<u64>,
    /// Most 99th-percentile action skew per broadcast allowed (judged on its
    /// upper bound across clocks, as skew is); needs probes with --act-at.
    #[arg(long, value_name = "DURATION", value_parser = parse_ns, help_heading = heading::THRESHOLDS)]
    max_action_skew_p99: Option<u64>,
    /// Most late actions allowed (a message that came after its time to
    /// act); needs probes with --act-at.
    #[arg(long, value_name = "N", help_heading = heading::THRESHOLDS)]
    max_late: Option<u64>,
    /// Every clock (probes' and server's) must claim to be synchronised.
    #[arg(long, help_heading = heading::THRESHOLDS)]
    require_synced_clocks: bool,
    /// Also write the audit (facts, verdict, report) as JSON here (`-` for
    /// standard output).
    #[arg(long, value_name = "OUT", help_heading = heading::OUTPUT)]
    json: Option<PathBuf>,
    /// Also write the verdict and the report as one self-contained HTML
    /// page with plots, to hand over (no script, nothing fetched).
    #[arg(long, value_name = "OUT", help_heading = heading::OUTPUT)]
    html: Option<PathBuf>,
    /// Keep the copy of the agent's logs in this directory (reused by the
    /// next audit, which then fetches only what is new).
    #[arg(long, value_name = "DIR", help_heading = heading::OUTPUT)]
    keep: Option<PathBuf>,
    /// Whether --broadcasts was given (not a flag: read from the command
    /// line, for --passive).
    #[arg(skip)]
    broadcasts_given: bool,
}

/// `--match`'s argument, kept as given for the report.
fn parse_matcher(s: &str) -> Result<(String, Matcher), String> {
    s.parse::<Matcher>()
        .map(|m| (s.to_owned(), m))
        .map_err(|e| e.to_string())
}

fn main() -> std::process::ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Command::Audit(args), Some(("audit", audit))) = (&mut cli.command, matches.subcommand())
    {
        args.broadcasts_given =
            audit.value_source("broadcasts") == Some(clap::parser::ValueSource::CommandLine);
    }
    match run(cli.command) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("skewscope: {}", said_once(&e));
            // Every failure before a verdict: for an audit, it could not run.
            std::process::ExitCode::from(audit::exit::CANNOT_AUDIT)
        }
    }
}

fn run(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Report {
            files,
            json,
            triggers,
            broadcasts,
            between,
            agent_as_reference,
            html,
            matching,
        } => {
            let triggers = triggers
                .as_deref()
                .map(window_args::read_triggers)
                .transpose()?;
            let expanded = inputs::expand(&files)?;
            let window = match (broadcasts, between) {
                (Some((first, last)), _) => Some(Window::AgentIds { first, last }),
                (None, Some((from_wall_ns, to_wall_ns))) => Some(Window::FirstReceiptBetween {
                    from_wall_ns,
                    to_wall_ns,
                }),
                (None, None) => None,
            };
            let scope = joined::Scope {
                window,
                agent_as_reference,
            };
            let matcher = matching.as_ref().map(|(e, m)| (e.as_str(), m));
            let (mut report, figures) = joined::analyse(
                inputs::read_inputs_matching(&expanded.files, matcher)?,
                triggers.as_deref(),
                scope,
                html.is_some(),
            )?;
            expanded.note_in(&mut report);
            print!("{}", table::render(&report));
            write_json(&report, json.as_deref())?;
            if let (Some(out), Some(figures)) = (&html, &figures) {
                let title = format!("skewscope report of {} log(s)", report.inputs.len());
                write_html(out, &title, &report, figures, None)?;
            }
            Ok(0)
        }
        Command::Audit(args) => audit(*args),
        #[cfg(feature = "demo")]
        Command::Sweep(args) => sweep(*args),
        #[cfg(feature = "demo")]
        Command::SweepWorker(args) => sweep_worker(&args),
        #[cfg(feature = "demo")]
        Command::SweepCompare { files, html } => sweep_compare(&files, html.as_deref()),
        Command::JsonSchema => {
            print!("{}", collector::report_schema());
            Ok(0)
        }
        #[cfg(feature = "demo")]
        Command::Demo {
            clients,
            broadcasts,
            interval,
            json,
            keep,
            html,
            lead,
            no_act,
        } => {
            let options = DemoOptions {
                clients,
                broadcasts,
                interval,
                keep,
                lead: (!no_act).then_some(lead),
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            let (agent_log, probe_logs, _temp) =
                runtime.block_on(demo::run(&options, &|line| eprintln!("{line}")))?;
            let mut logs = vec![agent_log];
            logs.extend(probe_logs);
            let (mut report, figures) = joined::analyse(
                inputs::read_inputs(&logs)?,
                None,
                joined::Scope::default(),
                html.is_some(),
            )?;
            if options.keep.is_none() {
                // Its temporary directory is gone once the demo ends: name
                // the files as what they were, not as paths to look for.
                for input in &mut report.inputs {
                    let name = Path::new(&input.file)
                        .file_name()
                        .map_or_else(|| input.file.clone(), |n| n.to_string_lossy().into_owned());
                    input.file = format!("{name} (removed with the demo; --keep DIR keeps it)");
                }
            }
            print!("{}", table::render(&report));
            if let (Some(out), Some(figures)) = (&html, &figures) {
                let title = format!("skewscope demo: {clients} connections on loopback");
                write_html(out, &title, &report, figures, None)?;
            }
            if options.keep.is_some() {
                let names: Vec<String> = logs.iter().map(|l| l.display().to_string()).collect();
                println!(
                    "\nlogs kept; report again with:\n  skewscope report {}",
                    names.join(" ")
                );
            }
            write_json(&report, json.as_deref())?;
            Ok(0)
        }
    }
}

fn audit(args: AuditArgs) -> anyhow::Result<u8> {
    // Every value is checked before the agent is asked anything.
    let agent = audit::options::agent_url(&args.agent).map_err(anyhow::Error::msg)?;
    let token = args
        .token_file
        .as_deref()
        .map(audit::options::read_token_file)
        .transpose()?;
    let options = AuditOptions {
        agent,
        token,
        token_file: args.token_file.clone(),
        ca_file: args.ca_file,
        broadcasts: args.broadcasts.max(1),
        interval: args.interval,
        settle: args.settle,
        require_probes: args.require_probes,
        trigger: args.trigger,
        trigger_method: args.trigger_method,
        lead: args.lead,
        thresholds: Thresholds {
            max_skew_p50_ns: args.max_skew_p50,
            max_skew_p99_ns: args.max_skew_p99,
            max_skew_max_ns: args.max_skew_max,
            max_missing: Some(args.max_missing),
            max_offset_bound_ns: args.max_offset_bound,
            require_synced_clocks: args.require_synced_clocks,
            max_action_skew_p99_ns: args.max_action_skew_p99,
            max_late: args.max_late,
        },
        keep: args.keep,
        figures: args.html.is_some(),
        matching: args.matching,
        passive: args.passive.then_some(audit::Passive {
            window: args.window,
            broadcasts: args.broadcasts_given.then_some(args.broadcasts),
        }),
    };
    let mut progress = Progress::new(options.broadcasts);
    let outcome = audit::run(&options, &mut progress);
    progress.finish();
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            eprintln!("skewscope audit: cannot audit: {e}");
            return Ok(audit::exit::CANNOT_AUDIT);
        }
    };
    print!("{}", table::render_live(&outcome.report));
    println!();
    print!("{}", verdict_lines::render(&outcome.verdict));
    let a = &outcome.audit;
    if !a.complete {
        println!(
            "  (not every receipt had arrived {} after the last broadcast: those count missing)",
            sentences::duration(options.settle.as_nanos() as i64)
        );
    }
    println!(
        "  verdict {} after the last broadcast; reproduce: skewscope {}",
        sentences::duration(a.last_broadcast_to_verdict_ms as i64 * 1_000_000),
        a.reproduce.replace(
            "DIR",
            match a.kept.as_deref() {
                Some(kept) => kept,
                // The logs are named one by one: each in the agent's directory.
                None if a.reproduce.contains("DIR/") => "AGENT_DATA_DIR",
                None => "AGENT_DATA_DIR (or --keep DIR)",
            }
        )
    );
    if let Some(out) = &args.json {
        write_text(&serde_json::to_string_pretty(&outcome)?, out)?;
    }
    if let (Some(out), Some(figures)) = (&args.html, &outcome.figures) {
        let title = format!("skewscope audit of {}", options.agent);
        write_html(
            out,
            &title,
            &outcome.report,
            figures,
            Some(&outcome.verdict),
        )?;
    }
    if let Some(why) = outcome.nothing_to_judge() {
        eprintln!("skewscope audit: cannot audit: {why}");
    }
    Ok(outcome.exit_code())
}

/// `skewscope sweep`: the result as text on stdout, progress on stderr.
#[cfg(feature = "demo")]
fn sweep(args: collector::sweep::args::SweepArgs) -> anyhow::Result<u8> {
    let command: Vec<String> = std::env::args().collect();
    let (json, html) = (args.json.clone(), args.html.clone());
    let options = args.into_options(&command)?;
    let result = collector::sweep::run(&options, &|line| eprintln!("{line}"))?;
    print!("{}", collector::sweep::text::render(&result));
    if let Some(out) = &json {
        write_text(&serde_json::to_string_pretty(&result)?, out)?;
    }
    if let Some(out) = &html {
        let made = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        std::fs::write(out, collector::sweep::html::page(&result, &made))
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    // Nothing measured: the sweep could not do what it is for.
    let measured = result.stages.iter().any(|s| s.figures.is_some());
    Ok(if measured { 0 } else { 2 })
}

/// `skewscope sweep-worker`: what it does on stderr, until stopped.
#[cfg(feature = "demo")]
fn sweep_worker(args: &collector::sweep::worker::WorkerArgs) -> anyhow::Result<u8> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    collector::sweep::worker::stop_on_signals(stop.clone())?;
    // A stderr nobody reads any more must not stop the worker (eprintln!
    // would panic on it): its lines are said, or lost, never fatal.
    let say = |line: &str| {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{line}");
    };
    collector::sweep::worker::run(args, &stop, &say)?;
    Ok(0)
}

/// `skewscope sweep-compare`: saved results side by side.
#[cfg(feature = "demo")]
fn sweep_compare(files: &[PathBuf], html: Option<&Path>) -> anyhow::Result<u8> {
    let results = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("cannot read {}", f.display()))?;
            collector::sweep::result::SweepResult::from_json(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    print!("{}", collector::sweep::compare::render(&results));
    if let Some(out) = html {
        let made = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        std::fs::write(out, collector::sweep::html::compare_page(&results, &made))
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    Ok(0)
}

/// `e` and its causes, each said once: a cause whose text the error
/// before it already includes (`{path}: {source}`) is not said again.
fn said_once(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

fn parse_ns(s: &str) -> Result<u64, String> {
    skewscope_core::units::parse_duration(s)
        .map(|d| d.as_nanos() as u64)
        .map_err(|e| e.to_string())
}

/// `--between`, read against the wall clock now. The portable clock of
/// std, not the OS layer's (Linux only): `report` runs on any laptop, and
/// a window given in minutes needs no better than a millisecond.
fn parse_between_now(s: &str) -> Result<(u64, u64), String> {
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "this machine's clock is before 1970".to_string())?
        .as_nanos();
    let now_ns =
        u64::try_from(now_ns).map_err(|_| "this machine's clock is past 2554".to_string())?;
    window_args::parse_between(s, now_ns)
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("{s:?}: give FIRST-LAST"))?;
    let a = a
        .trim()
        .parse()
        .map_err(|_| format!("{a:?} is not a number"))?;
    let b = b
        .trim()
        .parse()
        .map_err(|_| format!("{b:?} is not a number"))?;
    if a > b {
        return Err(format!("{s:?}: FIRST is after LAST"));
    }
    Ok((a, b))
}

fn write_json(
    report: &skewscope_core::analysis::report::Report,
    out: Option<&Path>,
) -> anyhow::Result<()> {
    let Some(out) = out else { return Ok(()) };
    write_text(&serde_json::to_string_pretty(report)?, out)
}

fn write_html(
    out: &Path,
    title: &str,
    report: &skewscope_core::analysis::report::Report,
    figures: &skewscope_core::analysis::figures::Figures,
    verdict: Option<&skewscope_core::analysis::verdict::Verdict>,
) -> anyhow::Result<()> {
    let made = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let page = collector::html::render(&collector::html::Page {
        title,
        made: &made,
        report,
        figures,
        verdict,
        // An audit's page (it has a verdict) read a running agent's logs.
        live: verdict.is_some(),
    });
    std::fs::write(out, page).with_context(|| format!("cannot write {}", out.display()))
}

fn write_text(text: &str, out: &Path) -> anyhow::Result<()> {
    let text = format!("{text}\n");
    if out == Path::new("-") {
        print!("{text}");
        Ok(())
    } else {
        std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))
    }
}
