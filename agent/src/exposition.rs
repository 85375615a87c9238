//! Which text `/metrics` answers in. Prometheus asks for OpenMetrics (its
//! `Accept` header names `application/openmetrics-text`) and gets it as
//! `prometheus-client` writes it. Everything else (`curl`, `promtool check
//! metrics`, older scrapers) gets Prometheus's classic text format 0.0.4,
//! which does not know OpenMetrics' `info` type, `# UNIT` or `# EOF`, and
//! names a counter's family after its `_total` sample.
//!
//! The classic text is derived from the OpenMetrics text line by line: the
//! registry has one definition of every metric, and this file only renames.

/// The two exposition formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    Classic,
}

impl Exposition {
    /// The format a client asked for with its `Accept` header: OpenMetrics
    /// only when it names it (with a weight above zero).
    pub fn negotiate(accept: Option<&str>) -> Exposition {
        let wants_openmetrics = accept.unwrap_or("").split(',').any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f64>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
        });
        if wants_openmetrics {
            Exposition::OpenMetrics
        } else {
            Exposition::Classic
        }
    }

    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Exposition::Classic => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// `openmetrics` (as `prometheus-client` encodes it) in this format.
    pub fn render(self, openmetrics: String) -> String {
        match self {
            Exposition::OpenMetrics => openmetrics,
            Exposition::Classic => to_classic(&openmetrics),
        }
    }
}

/// OpenMetrics text to the classic format: a counter family `x` (samples
/// `x_total`) becomes family `x_total`; an `info` family `x` (sample
/// `x_info`) becomes gauge `x_info`; `unknown` becomes `untyped`; `# UNIT`,
/// `# EOF` and counters' `_created` samples go. Gauges and histograms are
/// the same in both.
fn to_classic(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // `prometheus-client` writes HELP before TYPE; the HELP line's name
    // depends on the type, so it waits for it.
    let mut help: Option<(&str, &str)> = None;
    let mut created_suffix_family: Option<String> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (classic_name, classic_kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_owned(), "untyped"),
                other => (name.to_owned(), other),
            };
            created_suffix_family = (kind == "counter").then(|| format!("{name}_created"));
            if let Some((help_name, text)) = help.take()
                && help_name == name
            {
                out.push_str(&format!("# HELP {classic_name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {classic_name} {classic_kind}\n"));
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        if let Some(created) = &created_suffix_family
            && line.starts_with(created.as_str())
        {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::metrics::info::Info;
    use prometheus_client::registry::{Registry, Unit};

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_the_classic_text() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(
            Exposition::negotiate(Some(prometheus)),
            Exposition::OpenMetrics
        );
        assert_eq!(Exposition::negotiate(None), Exposition::Classic);
        assert_eq!(Exposition::negotiate(Some("*/*")), Exposition::Classic);
        assert_eq!(
            Exposition::negotiate(Some("text/plain;version=0.0.4")),
            Exposition::Classic
        );
        assert_eq!(
            Exposition::negotiate(Some("application/openmetrics-text;q=0")),
            Exposition::Classic
        );
    }

    #[test]
    fn every_kind_of_family_is_renamed_as_the_classic_format_wants() {
        let mut registry = Registry::default();
        let sent: Family<Vec<(String, String)>, Counter> = Family::default();
        sent.get_or_create(&vec![("result".into(), "ok".into())])
            .inc();
        registry.register("demo_sent", "Copies sent", sent);
        let clients: Gauge = Gauge::default();
        clients.set(3);
        registry.register("demo_clients", "Clients now", clients);
        let span = Histogram::new([0.001, 0.01]);
        span.observe(0.002);
        registry.register_with_unit("demo_span", "Span", Unit::Seconds, span);
        registry.register("demo_build", "Version", Info::new(vec![("version", "1")]));
        let mut openmetrics = String::new();
        prometheus_client::encoding::text::encode(&mut openmetrics, &registry).unwrap();

        let classic = Exposition::Classic.render(openmetrics.clone());
        assert!(classic.contains("# HELP demo_sent_total Copies sent.\n# TYPE demo_sent_total counter\ndemo_sent_total{result=\"ok\"} 1\n"), "{classic}");
        assert!(
            classic.contains("# TYPE demo_clients gauge\ndemo_clients 3\n"),
            "{classic}"
        );
        assert!(
            classic.contains("# TYPE demo_span_seconds histogram\n"),
            "{classic}"
        );
        assert!(
            classic.contains("demo_span_seconds_bucket{le=\"0.01\"} 1\n"),
            "{classic}"
        );
        assert!(classic.contains("# HELP demo_build_info Version.\n# TYPE demo_build_info gauge\ndemo_build_info{version=\"1\"} 1\n"), "{classic}");
        assert!(
            !classic.contains("# EOF") && !classic.contains("# UNIT"),
            "{classic}"
        );
        assert_eq!(
            Exposition::OpenMetrics.render(openmetrics.clone()),
            openmetrics
        );
    }
}
