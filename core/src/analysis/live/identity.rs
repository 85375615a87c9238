//! Who is who in the live join: the agent's connections and their labels,
//! the probe runs and their connections, their clocks, and what each
//! uploaded record changes of it.

use super::*;

impl LiveJoin {
    /// Takes in one of the agent's own records; returns the broadcasts
    /// whose fan-out it settled (for `/metrics`' span, as the report
    /// counts it).
    pub fn add_agent_record(&mut self, record: &AgentRecord) -> Vec<(u64, Fanout)> {
        let settled = self.fanouts.observe(record);
        match record {
            AgentRecord::Started(s) => {
                self.agent_started_wall_ns = s.at.wall_ns;
            }
            AgentRecord::Broadcast(b) => {
                self.agent_progress += 1;
                self.pending.insert(
                    b.id,
                    Pending {
                        id: b.id,
                        seq: b.seq,
                        hash: b.hash,
                        start: b.at,
                        targets: Targets::default(),
                        actions: Vec::new(),
                        placed_keys: Vec::new(),
                        first_receipt_wall_ns: None,
                    },
                );
                if let Some(seq) = b.seq {
                    self.by_seq.insert(seq, b.id);
                }
            }
            AgentRecord::ShardSends(s) => {
                self.agent_progress += 1;
                if let Some(p) = self.pending.get_mut(&s.broadcast) {
                    // Only probes' connections: memory follows the probes,
                    // not the audience.
                    let labelled = &self.labelled;
                    let probes = s
                        .slots
                        .iter()
                        .filter(|slot| labelled.contains_key(&slot.conn))
                        .map(|slot| slot.conn);
                    p.targets.extend(probes.clone());
                    if numbered_by_copy(p.seq) {
                        for conn in probes {
                            self.copies.sent(conn, p.hash, p.id);
                        }
                    }
                }
            }
            AgentRecord::ConnectionOpened(o) => {
                self.highest_conn = self.highest_conn.max(o.conn);
                if let Some(name) = &o.label {
                    if let Some(page) = parse_page_label(name) {
                        self.page_conns.insert(page, o.conn);
                        // Its run may have uploaded the opening already.
                        if let Some(run) = self.runs.get_mut(&page.0)
                            && run.unbound.remove(&page.1)
                        {
                            run.conns.insert(page.1, o.conn);
                            self.holder.insert(
                                o.conn,
                                Holder {
                                    run: page.0,
                                    closed_wall_ns: None,
                                },
                            );
                        }
                    }
                    let name = name.clone();
                    self.labelled.insert(
                        o.conn,
                        Labelled {
                            name,
                            closed: false,
                        },
                    );
                }
            }
            AgentRecord::ConnectionClosed(c) => {
                if let Some(l) = self.labelled.get_mut(&c.conn) {
                    l.closed = true;
                    if let Some(page) = parse_page_label(&l.name)
                        && self.page_conns.get(&page) == Some(&c.conn)
                    {
                        self.page_conns.remove(&page);
                    }
                }
            }
            _ => {}
        }
        settled
    }

    /// Takes in one record uploaded by probe run `run_id`, at agent wall
    /// time `now_wall_ns`.
    pub fn add_probe_record(&mut self, run_id: u128, record: &ProbeRecord, now_wall_ns: u64) {
        if !self.runs.contains_key(&run_id) {
            if self.runs.len() >= MAX_RUNS {
                self.counts.runs_refused += 1;
                return;
            }
            self.runs.insert(run_id, Run::default());
        }
        let started = self.agent_started_wall_ns;
        let run = self.runs.get_mut(&run_id).expect("inserted above");
        run.last_upload_wall_ns = now_wall_ns;
        if let Some(wall) = record.stamp().map(|s| s.wall_ns) {
            run.through_wall_ns = run.through_wall_ns.max(wall);
        }
        match record {
            ProbeRecord::Started(s) => run.name = s.name.clone(),
            // Connection ids restart with the agent: an earlier run's are not ours.
            ProbeRecord::ConnectionOpened(o) if !before_run(started, o.at.wall_ns) => {
                let by_label = self.page_conns.get(&(run_id, o.conn)).copied();
                match o.agent_conn.or(by_label) {
                    Some(agent_conn) => {
                        run.unbound.remove(&o.conn);
                        run.conns.insert(o.conn, agent_conn);
                        self.holder.insert(
                            agent_conn,
                            Holder {
                                run: run_id,
                                closed_wall_ns: None,
                            },
                        );
                    }
                    None => {
                        run.conns.remove(&o.conn);
                        run.unbound.insert(o.conn);
                    }
                }
            }
            ProbeRecord::ConnectionClosed(c) => {
                // Its receipts may be logged after its close record: the
                // map holds until the index opens again. The holder stays
                // until its broadcasts are judged (it may have missed one).
                if let Some(agent_conn) = run.conns.get(&c.conn)
                    && let Some(h) = self.holder.get_mut(agent_conn)
                {
                    h.closed_wall_ns = Some(c.at.wall_ns);
                }
            }
            ProbeRecord::TimeSample(t) => run.add_exchange(t),
            ProbeRecord::ClockState(c) => run.claim = Some((**c).clone()),
            // A probe that acts, or an app's own run (it records only what
            // it acted on): a receipt is complete with its action.
            ProbeRecord::ActPlan(_) | ProbeRecord::App(_) => run.acts = true,
            ProbeRecord::Action(a) => self.add_action(run_id, a, false),
            ProbeRecord::AppAction(a) => self.add_action(run_id, &a.action, true),
            ProbeRecord::Stopped(_) | ProbeRecord::LogFull(_) => run.stopped = true,
            ProbeRecord::Receipt(r) => {
                // A previous agent run's traffic (a probe uploading an old log).
                if before_run(started, r.at.wall_ns) {
                    self.counts.unmatched += 1;
                    return;
                }
                // A connection the agent did not name (another server's):
                // nothing here will ever match it.
                let Some(agent_conn) = run.conns.get(&r.conn).copied() else {
                    self.counts.unmatched += 1;
                    return;
                };
                // One the agent saw open without `?probe=` is never a target
                // here (ids only grow, so an id at most the highest seen
                // was seen).
                if agent_conn <= self.highest_conn && !self.labelled.contains_key(&agent_conn) {
                    self.counts.unmatched += 1;
                    return;
                }
                let early = Early {
                    key: r.key,
                    hash: r.hash,
                    agent_conn: Some(agent_conn),
                    arrival: Arrival {
                        run: run_id,
                        at: r.at,
                        kernel_delay_ns: r.kernel_delay_ns.unwrap_or(0),
                    },
                };
                if !self.place(early) {
                    // The agent's record of its broadcast may not be here yet.
                    if self.early.len() >= MAX_EARLY {
                        self.early.pop_front();
                        self.counts.unmatched += 1;
                    }
                    self.early.push_back(early);
                }
            }
            _ => {}
        }
    }

    /// An action of run `run_id` (of the app beside it when `by_app`) into
    /// the broadcast its connection's receipt was placed in.
    pub(super) fn add_action(&mut self, run_id: u128, a: &crate::record::Action, by_app: bool) {
        let Some(agent_conn) = self
            .runs
            .get(&run_id)
            .and_then(|r| r.conns.get(&a.conn))
            .copied()
        else {
            return;
        };
        match self
            .placed
            .get(&(agent_conn, a.key))
            .and_then(|id| self.pending.get_mut(id))
        {
            Some(p)
                if !p
                    .actions
                    .iter()
                    .any(|(c, x)| *c == agent_conn && x.by_app == by_app) =>
            {
                if let Some(first) = p.first_receipt_wall_ns {
                    self.lead_seen.add(first, a.done.wall_ns);
                }
                p.actions.push((
                    agent_conn,
                    Acted {
                        run: run_id,
                        by_app,
                        done: a.done,
                        late: a.late_ns > 0,
                        reaction_ns: crate::analysis::lead_rule::reaction_ns(
                            a.target.mono_ns,
                            a.late_ns,
                            a.done.mono_ns,
                        ),
                    },
                ));
            }
            // Its broadcast was judged, or a second action: counted.
            _ => self.counts.unmatched_actions += 1,
        }
    }

    /// Every probe followed, by name (of runs with one name, the latest to
    /// upload): its clock against the agent's now.
    pub fn probe_health(&mut self) -> Vec<ProbeHealth> {
        let mut out: Vec<ProbeHealth> = self
            .runs
            .values_mut()
            .map(|r| {
                let offset_ns = r
                    .latest_exchange
                    .and_then(|t| r.correction(t))
                    .map(|c| (-c.theta_ns, c.bound_ns));
                ProbeHealth {
                    name: r.name.clone(),
                    offset_ns,
                    synced: r.claim.as_ref().map(|c| c.claimed_bound_ns().is_some()),
                    last_upload_wall_ns: r.last_upload_wall_ns,
                }
            })
            .collect();
        // A restarted probe is a new run under the same name: one series.
        out.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then(b.last_upload_wall_ns.cmp(&a.last_upload_wall_ns))
        });
        out.dedup_by(|later, kept| later.name == kept.name);
        out
    }
}

/// Whether a probe stamp is from before the agent run that started at
/// `agent_started_wall_ns`, device clocks being off by up to
/// [`CLOCK_TOLERANCE_NS`].
fn before_run(agent_started_wall_ns: u64, probe_wall_ns: u64) -> bool {
    probe_wall_ns.saturating_add(CLOCK_TOLERANCE_NS) < agent_started_wall_ns
}
