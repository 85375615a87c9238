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
use collector::{inputs, table, verdict_lines};
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

#[derive(Subcommand)]
enum Command {
    /// Join agent and probe logs and report skew, latency, fan-out and loss.
    Report {
        /// Record logs: one agent run's segments and any number of probe logs;
        /// a directory (an agent's data directory) stands for every log in it
        /// and in its probes/ (the runs probes uploaded).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also write the report as JSON to this file (`-` for standard output).
        #[arg(long)]
        json: Option<PathBuf>,
        /// When each broadcast was triggered, for latency without an agent log:
        /// one wall-clock time in ns since 1970 per line (`date +%s%N`).
        #[arg(long)]
        triggers: Option<PathBuf>,
        /// Only the agent's broadcasts with these ids, `FIRST-LAST` (what an
        /// audit of the hub judged).
        #[arg(long, value_parser = parse_range, conflicts_with = "between")]
        broadcasts: Option<(u64, u64)>,
        /// Only broadcasts first received between these wall-clock times, in
        /// ns since 1970, `FROM-TO` (what an audit of a foreign server judged).
        #[arg(long, value_parser = parse_range)]
        between: Option<(u64, u64)>,
        /// The probes listened to a server that is not the agent: use the
        /// agent's log as the clock reference only.
        #[arg(long)]
        agent_as_reference: bool,
        /// Also write the report as one self-contained HTML page with plots
        /// (no script, nothing fetched; light and dark).
        #[arg(long, value_name = "OUT")]
        html: Option<PathBuf>,
        /// Judge only broadcasts whose payload matches: `/POINTER=VALUE` (a
        /// JSON pointer equal to a value, like `/type=start`) or
        /// `re:EXPRESSION` (a regular expression on text payloads). The
        /// report says how many were left out.
        #[arg(long = "match", value_name = "EXPR", value_parser = parse_matcher)]
        matching: Option<(String, Matcher)>,
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
        /// Probe connections.
        #[arg(long, default_value_t = 100)]
        clients: u32,
        /// Test broadcasts.
        #[arg(long, default_value_t = 20)]
        broadcasts: u32,
        /// Pause between broadcasts (e.g. 100ms, 1s).
        #[arg(long, default_value = "100ms", value_parser = skewscope_core::units::parse_duration)]
        interval: Duration,
        /// Also write the report as JSON to this file (`-` for standard output).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Keep the agent and probe logs in this directory (default: a temporary one, removed).
        #[arg(long)]
        keep: Option<PathBuf>,
        /// Also write the report as one self-contained HTML page with plots.
        #[arg(long, value_name = "OUT")]
        html: Option<PathBuf>,
        /// The time to act, this long after each broadcast's start: 50ms is
        /// ample for 100 loopback connections on a loaded 2-core machine
        /// (their copies are read within a few ms); the report says how
        /// short it could have been. `auto`: the agent picks it from what
        /// the probes' uploads measure (the first broadcasts, before any
        /// is judged, get its allowance for an unmeasured network).
        #[arg(
            long,
            default_value = "50ms",
            allow_hyphen_values = true,
            conflicts_with = "no_act"
        )]
        lead: skewscope_core::lead::LeadChoice,
        /// Receive only: no time to act in the broadcasts, no actions.
        #[arg(long)]
        no_act: bool,
    },
}

/// `skewscope audit`'s options.
#[derive(clap::Args)]
struct AuditArgs {
    /// The agent's base URL.
    #[arg(long, value_name = "URL")]
    agent: String,
    /// File holding the agent's bearer token.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// For an https:// agent (--tls-cert): trust only the CA certificates
    /// in this PEM file (a site's own CA), instead of the system's roots.
    #[arg(long, value_name = "PEM")]
    ca_file: Option<PathBuf>,
    /// Broadcasts to trigger (20 if not given); with --passive, stop
    /// watching once this many were seen.
    #[arg(long)]
    broadcasts: Option<u64>,
    /// Trigger nothing: watch the site's own broadcasts for --window (or
    /// until --broadcasts were seen) and judge those, for an audit where
    /// real people watch the screens. Exit codes as for any audit.
    #[arg(long, conflicts_with_all = ["trigger", "lead", "interval"])]
    passive: bool,
    /// How long a passive audit watches.
    #[arg(long, default_value = "10m", value_parser = skewscope_core::units::parse_duration, requires = "passive")]
    window: Duration,
    /// Pause between broadcasts.
    #[arg(long, default_value = "1s", value_parser = skewscope_core::units::parse_duration)]
    interval: Duration,
    /// Longest wait for probes before the first broadcast, and for receipts
    /// after the last; receipts still absent then count missing.
    #[arg(long, default_value = "5s", value_parser = skewscope_core::units::parse_duration)]
    settle: Duration,
    /// Probes that must be uploading to the agent.
    #[arg(long, default_value_t = 1, value_name = "N")]
    require_probes: usize,
    /// Trigger broadcasts here instead of the agent's /start_test: a server
    /// that is not the agent (e.g. FastAPI's /start_test); the agent stays
    /// the clock reference and collector.
    #[arg(long, value_name = "URL")]
    trigger: Option<String>,
    /// HTTP method for --trigger.
    #[arg(long, default_value = "GET", value_parser = ["GET", "POST"])]
    trigger_method: String,
    /// Most median skew per broadcast allowed.
    #[arg(long, value_name = "D", value_parser = parse_ns)]
    max_skew_p50: Option<u64>,
    /// Most 99th-percentile skew allowed.
    #[arg(long, value_name = "D", default_value = "10ms", value_parser = parse_ns)]
    max_skew_p99: Option<u64>,
    /// Most skew of any one broadcast allowed.
    #[arg(long, value_name = "D", value_parser = parse_ns)]
    max_skew_max: Option<u64>,
    /// Most receipts missing allowed (broadcast × connection).
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_missing: u64,
    /// Most error bound of any probe's clock offset to the agent.
    #[arg(long, value_name = "D", value_parser = parse_ns)]
    max_offset_bound: Option<u64>,
    /// The time to act the hub's test broadcasts carry, this long after
    /// each is sent (`/start_test?lead=`): probes run with `--act-at /at_ns`
    /// act then, and the verdict can judge their actions. A foreign server
    /// (`--trigger`) puts its own time to act in its messages: give the
    /// lead in its trigger URL if it takes one. `auto`: the agent picks
    /// each from what the probes' uploads measure (`lead=auto`), and the
    /// report says what it chose and how many actions were late.
    #[arg(
        long,
        value_name = "D|auto",
        allow_hyphen_values = true,
        conflicts_with = "trigger"
    )]
    lead: Option<skewscope_core::lead::LeadChoice>,

    /// Most 99th-percentile action skew per broadcast allowed (judged on its
    /// upper bound across clocks, as skew is); needs probes with --act-at.
    #[arg(long, value_name = "D", value_parser = parse_ns)]
    max_action_skew_p99: Option<u64>,

    /// Most late actions allowed (a message that came after its time to
    /// act); needs probes with --act-at.
    #[arg(long, value_name = "N")]
    max_late: Option<u64>,

    /// Every clock (probes' and server's) must claim to be synchronised.
    #[arg(long)]
    require_synced_clocks: bool,
    /// Judge only broadcasts whose payload matches: `/POINTER=VALUE` or
    /// `re:EXPRESSION`, as for `report`.
    #[arg(long = "match", value_name = "EXPR", value_parser = parse_matcher)]
    matching: Option<(String, Matcher)>,
    /// Also write the audit (facts, verdict, report) as JSON here (`-` for
    /// standard output).
    #[arg(long, value_name = "OUT")]
    json: Option<PathBuf>,
    /// Keep the copy of the agent's logs in this directory (reused by the
    /// next audit, which then fetches only what is new).
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Also write the verdict and the report as one self-contained HTML
    /// page with plots, to hand over (no script, nothing fetched).
    #[arg(long, value_name = "OUT")]
    html: Option<PathBuf>,
}

/// `--match`'s argument, kept as given for the report.
fn parse_matcher(s: &str) -> Result<(String, Matcher), String> {
    s.parse::<Matcher>()
        .map(|m| (s.to_owned(), m))
        .map_err(|e| e.to_string())
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse().command) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("skewscope: {e:#}");
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
            let triggers = triggers.as_deref().map(inputs::read_triggers).transpose()?;
            let expanded = inputs::expand(&files)?;
            let window = match (broadcasts, between) {
                (Some((first, last)), _) => Some(Window::AgentIds { first, last }),
                (None, Some((from_wall_ns, to_wall_ns))) => Some(Window::FirstReceiptBetween {
                    from_wall_ns,
                    to_wall_ns,
                }),
                (None, None) => None,
            };
            let scope = inputs::Scope {
                window,
                agent_as_reference,
            };
            let matcher = matching.as_ref().map(|(e, m)| (e.as_str(), m));
            let (mut report, figures) = inputs::analyse(
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
            let (report, figures) = inputs::analyse(
                inputs::read_inputs(&logs)?,
                None,
                inputs::Scope::default(),
                html.is_some(),
            )?;
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
    let token = args
        .token_file
        .as_deref()
        .map(|p| {
            std::fs::read_to_string(p)
                .map(|t| t.trim().to_owned())
                .with_context(|| format!("cannot read --token-file {}", p.display()))
        })
        .transpose()?;
    let options = AuditOptions {
        agent: args.agent,
        token,
        ca_file: args.ca_file,
        broadcasts: args.broadcasts.unwrap_or(20).max(1),
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
            broadcasts: args.broadcasts,
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
    print!("{}", table::render(&outcome.report));
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
            a.kept
                .as_deref()
                .unwrap_or("AGENT_DATA_DIR (or --keep DIR)")
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

fn parse_ns(s: &str) -> Result<u64, String> {
    skewscope_core::units::parse_duration(s)
        .map(|d| d.as_nanos() as u64)
        .map_err(|e| e.to_string())
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
