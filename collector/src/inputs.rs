//! Reading the log files a report is built from.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use skewscope_core::analysis::figures::{Figures, FiguresBuilder};
use skewscope_core::analysis::join::{
    self, AgentSource, BroadcastSink, Joined, JoinedBroadcast, ProbeSource, Window,
};
use skewscope_core::analysis::report::{InputSummary, Report, ReportBuilder};
use skewscope_core::analysis::tapped;
use skewscope_core::analysis::triggers::TriggerLatencyBuilder;
use skewscope_core::log::LogKind;
use skewscope_core::page_ingest::parse_page_label;
use skewscope_core::record::{AgentRecord, ProbeRecord};
use skewscope_os::log_files::LogFileReader;

use crate::log_files::{AgentFiles, LogFiles, ProbeFiles};
use crate::matching::{Judged, Matcher, PayloadVerdicts};
use skewscope_core::analysis::report::MatchCounts;

/// The logs given, sorted by writer and run, as files the join reads as it
/// goes (a log can be far larger than memory should be).
pub struct Inputs {
    /// Each agent run's files (its segments in order), in the order given.
    pub agents: Vec<AgentFiles>,
    /// Each probe run's files (a rotated log's segments), in the order given.
    pub probes: Vec<ProbeFiles>,
    /// What each file contributed and what was lost reading it.
    pub summaries: Vec<InputSummary>,
    /// `--match`: the expression and its verdict on every payload the
    /// probes recorded; `None` judges every broadcast.
    pub matching: Option<Matching>,
}

/// `--match` applied to the payloads read.
#[derive(Debug)]
pub struct Matching {
    /// The expression, as given.
    pub expression: String,
    /// Its verdict on each recorded payload, by hash.
    pub verdicts: PayloadVerdicts,
}

/// The record logs a report reads, and the files it passed over.
#[derive(Debug, Default, PartialEq)]
pub struct Expanded {
    /// The logs to read, in order.
    pub files: Vec<PathBuf>,
    /// Empty `.sklog` files of a directory: a writer killed (or out of
    /// disk) before its header; nothing of a run is in them.
    pub empty: Vec<PathBuf>,
}

impl Expanded {
    /// The report's inputs table says each empty file passed over (as an
    /// `"empty"` input of no records), so no file named is left unsaid.
    pub fn note_in(&self, report: &mut skewscope_core::analysis::report::Report) {
        report.inputs.extend(self.empty.iter().map(|p| {
            skewscope_core::analysis::report::InputSummary {
                file: p.display().to_string(),
                kind: "empty",
                records: 0,
                skipped_bytes: 0,
                torn_tail: false,
            }
        }));
    }
}

/// The record logs named: files as given, and for a directory (an agent's
/// data directory) every `.sklog` in it and in its `probes/` (uploaded runs),
/// sorted by name; an empty file there is passed over ([`Expanded::empty`]).
pub fn expand(paths: &[PathBuf]) -> anyhow::Result<Expanded> {
    let mut files = Vec::new();
    let mut empty = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        let mut found = Vec::new();
        for dir in [path.clone(), path.join("probes")] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
                let p = entry.path();
                if !(p.extension().is_some_and(|x| x == "sklog") && p.is_file()) {
                    continue;
                }
                // A writer killed (or out of disk) between creating its file
                // and writing the header leaves an empty one: nothing of the
                // run is in it, and it must not refuse the whole directory.
                if std::fs::metadata(&p).is_ok_and(|m| m.len() == 0) {
                    empty.push(p);
                    continue;
                }
                found.push(p);
            }
        }
        if found.is_empty() && empty.is_empty() {
            bail!(
                "{}: a directory with no record logs (*.sklog) in it",
                path.display()
            );
        }
        found.sort();
        files.extend(found);
    }
    empty.sort();
    Ok(Expanded { files, empty })
}

/// Reads every file through once; damage inside a file is recovered and
/// counted, a foreign or unreadable file is an error naming it. Nothing is
/// kept but what the report's inputs table says and which run each file is.
pub fn read_inputs(files: &[PathBuf]) -> anyhow::Result<Inputs> {
    read_inputs_matching(files, None)
}

/// [`read_inputs`], judging every recorded payload with `--match`'s
/// `matcher` (given as `expression`) on the way.
pub fn read_inputs_matching(
    files: &[PathBuf],
    matcher: Option<(&str, &Matcher)>,
) -> anyhow::Result<Inputs> {
    let mut inputs = Inputs {
        agents: Vec::new(),
        probes: Vec::new(),
        summaries: Vec::new(),
        matching: matcher.map(|(expression, _)| Matching {
            expression: expression.to_owned(),
            verdicts: PayloadVerdicts::default(),
        }),
    };
    for path in files {
        let file = path.display().to_string();
        let mut reader = LogFileReader::open(path)?;
        let mut count = 0u64;
        let kind = match reader.kind() {
            LogKind::Agent => {
                let mut run = None;
                let mut tapped_port = None;
                let mut page_runs = std::collections::BTreeSet::new();
                while let Some(r) = reader.next_record::<AgentRecord>()? {
                    count += 1;
                    match r {
                        AgentRecord::Started(s) if run.is_none() => {
                            run = Some((s.host, s.at.wall_ns));
                        }
                        AgentRecord::TapStarted(t) => tapped_port = Some(t.port),
                        AgentRecord::ConnectionOpened(o) => {
                            if let Some((run_id, _)) = o.label.as_deref().and_then(parse_page_label)
                            {
                                page_runs.insert(run_id);
                            }
                        }
                        _ => {}
                    }
                }
                let mut log = AgentFiles {
                    files: LogFiles::default(),
                    run,
                    tapped_port,
                    page_runs,
                };
                log.files.push(path.clone(), reader.read_len(), count);
                // Another segment of a run already read (rotated by size or
                // SIGHUP) continues it; else it is another run (a restart).
                match inputs
                    .agents
                    .iter_mut()
                    .find(|a| log.run.is_some() && a.run == log.run)
                {
                    Some(earlier) => {
                        earlier.files.extend(log.files);
                        earlier.tapped_port = earlier.tapped_port.or(log.tapped_port);
                        earlier.page_runs.extend(log.page_runs);
                    }
                    None => inputs.agents.push(log),
                }
                "agent"
            }
            LogKind::Probe => {
                let mut log = ProbeFiles {
                    files: LogFiles::default(),
                    run: None,
                    run_id: None,
                    hub_side: false,
                    foreign_side: false,
                    foreign_ports: Default::default(),
                };
                let mut foreign_conns = std::collections::HashSet::new();
                let mut opened_conns = std::collections::HashSet::new();
                let mut app_run = false;
                while let Some(r) = reader.next_record::<ProbeRecord>()? {
                    count += 1;
                    match r {
                        ProbeRecord::Started(s) if log.run.is_none() => {
                            log.run = Some((s.name, s.host, s.at.wall_ns));
                        }
                        ProbeRecord::Identity(i) if log.run_id.is_none() => {
                            log.run_id = Some(i.run_id)
                        }
                        ProbeRecord::ConnectionOpened(o) => {
                            log.hub_side |= o.agent_conn.is_some();
                            log.foreign_side |= o.agent_conn.is_none();
                            opened_conns.insert(o.conn);
                            if o.agent_conn.is_none() {
                                foreign_conns.insert(o.conn);
                            }
                        }
                        // An app's own socket, which it never reports
                        // opening (it hands the module what it read): a
                        // server the agent did not name.
                        ProbeRecord::Receipt(r) if app_run && !opened_conns.contains(&r.conn) => {
                            log.foreign_side = true;
                        }
                        ProbeRecord::App(_) => app_run = true,
                        ProbeRecord::Payload(p) => {
                            if let (Some((_, m)), Some(matching)) = (matcher, &mut inputs.matching)
                            {
                                matching.verdicts.add(m, &p);
                            }
                        }
                        ProbeRecord::ConnectionAddresses(a) if foreign_conns.contains(&a.conn) => {
                            if let Some(port) =
                                a.remote.rsplit_once(':').and_then(|(_, p)| p.parse().ok())
                            {
                                log.foreign_ports.insert(port);
                            }
                        }
                        _ => {}
                    }
                }
                log.files.push(path.clone(), reader.read_len(), count);
                // A probe log reopened after rotation continues the same run.
                match inputs
                    .probes
                    .iter_mut()
                    .find(|p| log.run.is_some() && p.run == log.run)
                {
                    Some(earlier) => {
                        earlier.files.extend(log.files);
                        earlier.run_id = earlier.run_id.or(log.run_id);
                        earlier.hub_side |= log.hub_side;
                        earlier.foreign_side |= log.foreign_side;
                        earlier.foreign_ports.extend(log.foreign_ports);
                    }
                    None => inputs.probes.push(log),
                }
                "probe"
            }
        };
        inputs.summaries.push(InputSummary {
            file,
            kind,
            records: count,
            skipped_bytes: reader.skipped_bytes(),
            torn_tail: reader.torn_tail(),
        });
    }
    // A browser probe cannot name the hub in its records; the hub named it.
    for probe in &mut inputs.probes {
        if let Some(run_id) = probe.run_id
            && inputs.agents.iter().any(|a| a.page_runs.contains(&run_id))
        {
            probe.hub_side = true;
            probe.foreign_side = false;
        }
    }
    Ok(inputs)
}

pub use crate::reference::Scope;

/// The probe logs a join within `scope` reads: a window of the agent's
/// broadcasts joins only probes the agent named (connected to its hub); a
/// report of a foreign server only probes it did not: a data directory can
/// hold both. Without an agent log there is no hub to tell apart: a window
/// of first receipts (`--between`, a sweep's stage) keeps every probe, the
/// hub's own included.
fn probes_in(inputs: &Inputs, scope: Scope) -> Vec<&dyn ProbeSource> {
    inputs
        .probes
        .iter()
        .filter(|p| match (scope.agent_as_reference, scope.window) {
            (false, Some(Window::FirstReceiptBetween { .. })) if inputs.agents.is_empty() => true,
            (true, _) | (false, Some(Window::FirstReceiptBetween { .. })) => p.foreign_side,
            (false, Some(Window::AgentIds { .. })) => p.hub_side,
            // The hub's broadcasts: a run that only listened to another
            // server would match none of them ([`crate::reference`] says so).
            (false, None) => inputs.agents.is_empty() || p.hub_side || !p.foreign_side,
        })
        .map(|p| p as &dyn ProbeSource)
        .collect()
}

/// Joins the inputs within `scope`, every broadcast to `sink`.
fn join_into(
    inputs: &Inputs,
    scope: Scope,
    sink: &mut dyn BroadcastSink,
) -> anyhow::Result<(Joined, Option<MatchCounts>)> {
    let probes = probes_in(inputs, scope);
    let agents: Vec<&dyn AgentSource> = inputs
        .agents
        .iter()
        .map(|a| a as &dyn AgentSource)
        .collect();
    let latest = inputs
        .agents
        .iter()
        .max_by_key(|a| a.run.as_ref().map(|r| r.1))
        .map(|a| a as &dyn AgentSource);
    let mut within = Within {
        window: scope.window,
        matching: inputs.matching.as_ref().map(|m| {
            (
                &m.verdicts,
                MatchCounts {
                    expression: m.expression.clone(),
                    ..MatchCounts::default()
                },
            )
        }),
        inner: sink,
    };
    let joined = match (latest, scope.agent_as_reference) {
        (Some(agent), true) => tapped::join_sources_with_reference(agent, &probes, &mut within),
        _ => join::join_runs_sources(&agents, &probes, &mut within),
    };
    for files in inputs
        .probes
        .iter()
        .map(|p| &p.files)
        .chain(inputs.agents.iter().map(|a| &a.files))
    {
        files.check()?;
    }
    Ok((joined, within.matching.map(|(_, counts)| counts)))
}

/// Passes on the broadcasts inside a window that `--match` keeps, counting
/// what it leaves out.
struct Within<'a> {
    window: Option<Window>,
    matching: Option<(&'a PayloadVerdicts, MatchCounts)>,
    inner: &'a mut dyn BroadcastSink,
}

impl BroadcastSink for Within<'_> {
    fn broadcast(&mut self, run: &Joined, broadcast: JoinedBroadcast) {
        let latest = run.agent_runs.saturating_sub(1);
        if !self.window.is_none_or(|w| w.contains(&broadcast, latest)) {
            return;
        }
        if let Some((verdicts, counts)) = &mut self.matching {
            match broadcast.hash.and_then(|h| verdicts.of(h)) {
                Some(Judged::Matches) => counts.matched += 1,
                Some(Judged::Differs) => {
                    counts.left_out += 1;
                    return;
                }
                Some(Judged::Unknown) | None => {
                    counts.unknown += 1;
                    return;
                }
            }
        }
        self.inner.broadcast(run, broadcast);
    }
}

/// Joins the inputs within `scope`, every broadcast kept (the audit's
/// progress needs them; a report streams them instead).
pub fn join(inputs: &Inputs, scope: Scope) -> anyhow::Result<Joined> {
    let (scope, _) = crate::reference::infer(&inputs.agents, &inputs.probes, scope);
    let mut rows: Vec<JoinedBroadcast> = Vec::new();
    let (mut joined, _) = join_into(inputs, scope, &mut rows)?;
    joined.broadcasts = rows;
    Ok(joined)
}

/// Joins the inputs and computes the report; with trigger times (sorted), also
/// the latency from them.
pub fn report(inputs: Inputs, triggers: Option<&[u64]>) -> anyhow::Result<Report> {
    report_within(inputs, triggers, Scope::default())
}

/// [`report`] of the broadcasts in `scope` only.
pub fn report_within(
    inputs: Inputs,
    triggers: Option<&[u64]>,
    scope: Scope,
) -> anyhow::Result<Report> {
    Ok(analyse(inputs, triggers, scope, false)?.0)
}

/// The report, and the plot series when asked, built as the join hands
/// over each broadcast: neither holds the run's receipts.
struct Analysis<'t> {
    report: Option<ReportBuilder>,
    figures: Option<FiguresBuilder>,
    triggers: Option<TriggerLatencyBuilder<'t>>,
    want_figures: bool,
}

impl Analysis<'_> {
    /// The builders, made from the run's logs when the first broadcast (or
    /// the end) comes.
    fn started(&mut self, run: &Joined) -> &mut ReportBuilder {
        if self.report.is_none() {
            let report = ReportBuilder::new(run);
            if self.want_figures {
                let clocks = report.timing().clocks().to_vec();
                self.figures = Some(FiguresBuilder::new(run, clocks));
            }
            self.report = Some(report);
        }
        self.report.as_mut().expect("made above")
    }
}

impl BroadcastSink for Analysis<'_> {
    fn broadcast(&mut self, run: &Joined, broadcast: JoinedBroadcast) {
        self.started(run).add(run, &broadcast);
        if let Some(f) = &mut self.figures {
            f.add(run, &broadcast);
        }
        if let Some(t) = &mut self.triggers {
            let clocks = self
                .report
                .as_ref()
                .expect("started above")
                .timing()
                .clocks();
            t.add_corrected(run, &broadcast, clocks);
        }
    }
}

/// [`report_within`], and the series the HTML page plots when `figures`
/// (computed from the same join, so the page and the table agree).
pub fn analyse(
    inputs: Inputs,
    triggers: Option<&[u64]>,
    scope: Scope,
    figures: bool,
) -> anyhow::Result<(Report, Option<Figures>)> {
    let (scope, reference) = crate::reference::infer(&inputs.agents, &inputs.probes, scope);
    let mut analysis = Analysis {
        report: None,
        figures: None,
        triggers: triggers.map(TriggerLatencyBuilder::new),
        want_figures: figures,
    };
    let (joined, matched) = join_into(&inputs, scope, &mut analysis)?;
    analysis.started(&joined);
    let mut report = analysis
        .report
        .as_mut()
        .expect("started above")
        .finish(&joined, inputs.summaries);
    report.set_trigger_latency(analysis.triggers.as_ref().map(|t| t.finish()));
    if let (
        Some(Window::FirstReceiptBetween {
            from_wall_ns,
            to_wall_ns,
        }),
        Some(_),
    ) = (scope.window, &report.tap)
    {
        report.tap = tap_within(&inputs.agents, &joined, from_wall_ns, to_wall_ns);
    }
    report.reference = Some(reference);
    report.matched = matched;
    let figures = analysis.figures.map(|f| f.finish(&joined));
    Ok((report, figures))
}

/// The tap's summary of the broadcasts it saw between `from` and `to`
/// (the first byte of each, in the agent's clock) only: the window a
/// report of a foreign server judges. Without it the tap's section of an
/// audit of a long-running agent would tell of every client since the tap
/// started. Its counters (connections followed, segments) stay the
/// tap's totals, and say so.
fn tap_within(
    agents: &[AgentFiles],
    joined: &Joined,
    from: u64,
    to: u64,
) -> Option<tapped::TapSummary> {
    let latest = agents.iter().max_by_key(|a| a.run.as_ref().map(|r| r.1))?;
    let records = AgentSource::records(latest).filter(|r| match r {
        AgentRecord::TapBroadcast(b) => b
            .copies
            .iter()
            .map(|c| c.first_byte_wall_ns)
            .min()
            .is_some_and(|t| from <= t && t <= to),
        _ => true,
    });
    let tap = tapped::TapJoin::new(joined, records)?;
    Some(tap.finish(joined, &mut Vec::new()))
}

/// Reads a triggers file (see [`skewscope_core::analysis::triggers::parse`]); errors name the file
/// and line.
pub fn read_triggers(path: &Path) -> anyhow::Result<Vec<u64>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read triggers file {}", path.display()))?;
    let times = skewscope_core::analysis::triggers::parse(&text)
        .with_context(|| format!("{}", path.display()))?;
    if times.is_empty() {
        bail!("{}: no trigger times in it", path.display());
    }
    Ok(times)
}

/// `report --between FROM-TO` (or `FROM` alone: until now), each end a
/// wall-clock time as people have it: ns since 1970 (`date +%s%N`, what
/// an audit prints), an RFC 3339 time (`2026-12-06T17:00:00Z`, with a
/// fraction or an offset like `+01:00`), `now`, or a duration before now
/// (`-10m`, `-90s`). `now_ns` is the wall clock now.
pub fn parse_between(text: &str, now_ns: u64) -> Result<(u64, u64), String> {
    const HINT: &str = "give FROM-TO or FROM (until now), each as ns since 1970, an RFC 3339 time like 2026-12-06T17:00:00Z, now, or a time before now like -10m";
    let text = text.trim();
    let time = |t: &str| parse_wall_time(t, now_ns);
    // Dates and offsets hold dashes too: the split is the dash with a time
    // on either side.
    let split = text
        .char_indices()
        .filter(|&(i, c)| c == '-' && i > 0)
        .find_map(|(i, _)| Some((time(&text[..i]).ok()?, time(&text[i + 1..]).ok()?)));
    let (from, to) = match split {
        Some(range) => range,
        None => (
            time(text).map_err(|e| format!("--between {text}: {e}; {HINT}"))?,
            now_ns,
        ),
    };
    if from > to {
        return Err(format!("--between {text}: FROM is after TO; {HINT}"));
    }
    Ok((from, to))
}

/// One end of `--between`: see [`parse_between`].
fn parse_wall_time(text: &str, now_ns: u64) -> Result<u64, String> {
    let text = text.trim();
    if text == "now" {
        return Ok(now_ns);
    }
    if let Some(before) = text.strip_prefix('-') {
        let d = skewscope_core::units::parse_duration(before)?;
        return Ok(now_ns.saturating_sub(d.as_nanos() as u64));
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map_err(|_| format!("`{text}` is too large for ns since 1970"));
    }
    // RFC 3339: humantime reads UTC (`Z`, or none); an offset is applied here.
    let (local, offset_s) = match text.len().checked_sub(6).map(|i| text.split_at(i)) {
        Some((local, off))
            if (off.starts_with('+') || off.starts_with('-')) && off.as_bytes()[3] == b':' =>
        {
            let hours: i64 = off[1..3]
                .parse()
                .map_err(|_| format!("`{off}` is no offset"))?;
            let minutes: i64 = off[4..]
                .parse()
                .map_err(|_| format!("`{off}` is no offset"))?;
            let sign = if off.starts_with('-') { -1 } else { 1 };
            (local, sign * (hours * 3600 + minutes * 60))
        }
        _ => (text, 0),
    };
    let at = humantime::parse_rfc3339_weak(local)
        .map_err(|e| format!("`{text}` is not a time ({e})"))?;
    let ns = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("`{text}` is before 1970"))?
        .as_nanos() as i128
        - i128::from(offset_s) * 1_000_000_000;
    u64::try_from(ns).map_err(|_| format!("`{text}` is before 1970"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewscope_os::log_files::FileLogWriter;

    #[test]
    fn the_tap_section_of_a_window_is_of_that_window_only() {
        use skewscope_core::log::LogWriter;
        use skewscope_core::record::{AgentStarted, SendOrder, TapBroadcast, TapCopy, TapStarted};
        let second = 1_000_000_000u64;
        let t0 = 1_764_000_000 * second;
        let stamp = |ns: u64| skewscope_core::Stamp {
            wall_ns: t0 + ns,
            mono_ns: ns,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent-1-0000.sklog");
        let mut w = LogWriter::create(&path, LogKind::Agent).unwrap();
        w.append(&AgentRecord::Started(AgentStarted {
            host: "server".into(),
            version: "t".into(),
            at: stamp(0),
            shards: 1,
            order: SendOrder::Fixed,
            per_client_times: true,
        }))
        .unwrap();
        w.append(&AgentRecord::TapStarted(TapStarted {
            port: 8000,
            interface: None,
            at: stamp(1),
        }))
        .unwrap();
        // An earlier client at 1 s, this window's two at 2 s.
        for (id, at, clients) in [(1, 1, &["early:1"][..]), (2, 2, &["a:1", "b:1"][..])] {
            w.append(&AgentRecord::TapBroadcast(TapBroadcast {
                id,
                seq: None,
                hash: id,
                len: 10,
                copies: clients
                    .iter()
                    .map(|c| TapCopy {
                        client: (*c).into(),
                        first_byte_wall_ns: t0 + at * second,
                        last_byte_wall_ns: t0 + at * second + 1_000,
                    })
                    .collect(),
            }))
            .unwrap();
        }
        w.sync().unwrap();
        let scope = |window| Scope {
            window,
            agent_as_reference: true,
        };
        let all = analyse(
            read_inputs(std::slice::from_ref(&path)).unwrap(),
            None,
            scope(None),
            false,
        )
        .unwrap()
        .0;
        assert_eq!(all.tap.as_ref().unwrap().clients, 3);
        let window = Window::FirstReceiptBetween {
            from_wall_ns: t0 + 3 * second / 2,
            to_wall_ns: t0 + 3 * second,
        };
        let within = analyse(
            read_inputs(&[path]).unwrap(),
            None,
            scope(Some(window)),
            false,
        )
        .unwrap()
        .0;
        let tap = within.tap.unwrap();
        assert_eq!((tap.broadcasts, tap.clients), (1, 2), "{tap:?}");
        assert!(tap.per_client.iter().all(|c| c.client != "early:1"));
    }

    #[test]
    fn between_takes_times_as_people_have_them() {
        let now = 1_796_578_418_000_000_000;
        // What an audit prints: ns since 1970.
        assert_eq!(parse_between("5-9", now), Ok((5, 9)));
        // RFC 3339, with a fraction, an offset, or none.
        let z = "2026-12-06T17:15:00Z";
        let (from, to) = parse_between(&format!("{z}-now"), now).unwrap();
        assert_eq!(to, now);
        let stamp = |s: &str| parse_wall_time(s, now).unwrap();
        assert_eq!(from, stamp(z));
        assert_eq!(stamp("2026-12-06T18:15:00+01:00"), stamp(z));
        assert_eq!(stamp("2026-12-06T17:15:00.5Z"), stamp(z) + 500_000_000);
        let both = format!("{z}-2026-12-06T17:25:00Z");
        assert_eq!(
            parse_between(&both, now).unwrap(),
            (stamp(z), stamp(z) + 600_000_000_000)
        );
        // Before now: one end, or both.
        assert_eq!(parse_between("-10m", now), Ok((now - 600_000_000_000, now)));
        assert_eq!(
            parse_between("-10m--1m", now),
            Ok((now - 600_000_000_000, now - 60_000_000_000))
        );
        for bad in ["yesterday", "9-5", "-10", "2026-13-40T00:00:00Z"] {
            let e = parse_between(bad, now).unwrap_err();
            assert!(e.contains("give FROM-TO"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_empty_log_in_a_data_directory_is_skipped_not_fatal() {
        use skewscope_core::log::LogWriter;
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("agent-1.sklog");
        LogWriter::create(&kept, LogKind::Agent).unwrap();
        // What an agent killed (or out of disk) before its header leaves.
        std::fs::write(dir.path().join("agent-2.sklog"), b"").unwrap();
        let expanded = expand(&[dir.path().to_owned()]).unwrap();
        assert_eq!(expanded.files, vec![kept.clone()]);
        assert_eq!(expanded.empty, vec![dir.path().join("agent-2.sklog")]);
        // The report says so in its inputs.
        let inputs = read_inputs(&expanded.files).unwrap();
        let (mut report, _) = analyse(inputs, None, Scope::default(), false).unwrap();
        expanded.note_in(&mut report);
        let noted = report.inputs.iter().find(|i| i.kind == "empty").unwrap();
        assert!(noted.file.ends_with("agent-2.sklog"), "{noted:?}");
        // Named on its own, it is still an error that says what it is.
        let empty = dir.path().join("agent-2.sklog");
        assert!(read_inputs(&[empty]).is_err());
    }

    #[test]
    fn a_log_rewritten_between_reading_and_joining_is_an_error_not_a_wrong_report() {
        use skewscope_core::log::LogWriter;
        use skewscope_core::record::{MessageKey, Receipt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.sklog");
        let write = |n: u64| {
            let mut w = LogWriter::create(&path, LogKind::Probe).unwrap();
            for i in 0..n {
                w.append(&ProbeRecord::Receipt(Receipt {
                    conn: 0,
                    key: MessageKey::Seq(i),
                    hash: i,
                    len: 1,
                    at: skewscope_core::Stamp {
                        wall_ns: 1_700_000_000_000_000_000 + i,
                        mono_ns: i,
                    },
                    kernel_delay_ns: None,
                }))
                .unwrap();
            }
            w.sync().unwrap();
        };
        write(100);
        let inputs = read_inputs(std::slice::from_ref(&path)).unwrap();
        // Rotated by copytruncate and written again, shorter.
        write(40);
        let err = analyse(inputs, None, Scope::default(), false).unwrap_err();
        assert!(
            err.to_string().contains("changed while the report read it"),
            "{err}"
        );
    }

    #[test]
    fn a_data_directory_stands_for_its_logs_and_uploaded_runs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("probes")).unwrap();
        for name in ["agent-1-0000.sklog", "notes.txt", "probes/probe-ab.sklog"] {
            std::fs::write(dir.path().join(name), b"not empty").unwrap();
        }
        let files = expand(&[dir.path().to_owned()]).unwrap().files;
        assert_eq!(
            files,
            vec![
                dir.path().join("agent-1-0000.sklog"),
                dir.path().join("probes/probe-ab.sklog")
            ]
        );
        let empty = tempfile::tempdir().unwrap();
        let err = expand(&[empty.path().to_owned()]).unwrap_err();
        assert!(err.to_string().contains("no record logs"), "{err}");
    }
}
