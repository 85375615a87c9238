//! The report's plots, each from the [`Figures`] series: skew over time
//! with its interval, the CDF of skew, action skew beside receive skew
//! (when probes acted), latency against fan-out position, lateness per
//! connection × broadcast, and each probe's offset beside its clock's claim.

use skewscope_core::analysis::figures::Figures;

use super::svg::{Chart, TimeUnit};
use crate::sentences::duration;

/// Colours for probes, by index (CSS classes `s0`…`s7`).
pub const PROBE_COLOURS: usize = 8;

const WIDE: (f64, f64) = (900.0, 300.0);

/// Skew per broadcast over time: corrected estimates with their interval
/// as a band when `use_corrected` (every clock was bounded, and there is
/// more than one), else the raw skew.
pub fn skew_over_time(f: &Figures, use_corrected: bool) -> Option<String> {
    let drawn: Vec<_> = f
        .broadcasts
        .iter()
        .filter(|b| b.skew_ns.is_some() || b.corrected_ns.is_some())
        .collect();
    let t0 = drawn.first()?.at_wall_ns;
    let corrected = use_corrected && drawn.iter().all(|b| b.corrected_ns.is_some());
    let value = |b: &&skewscope_core::analysis::figures::BroadcastPoint| match b.corrected_ns {
        Some((e, lo, hi)) if corrected => (e as f64, lo as f64, hi as f64),
        _ => {
            let s = b.skew_ns.unwrap_or(0) as f64;
            (s, s, s)
        }
    };
    let top = drawn.iter().map(|b| value(b).2).fold(0.0, f64::max);
    let unit = TimeUnit::for_range(top);
    let secs = |b: &&skewscope_core::analysis::figures::BroadcastPoint| {
        (b.at_wall_ns.saturating_sub(t0)) as f64 / 1e9
    };
    let last = drawn.iter().map(secs).fold(0.0, f64::max);
    let mut chart = Chart::new(
        "skew-time",
        WIDE,
        (0.0, last),
        (0.0, unit.of(top)),
        "time since the first broadcast (s)",
        &format!("skew ({})", unit.symbol),
    );
    if corrected {
        let band: Vec<(f64, f64, f64)> = drawn
            .iter()
            .map(|b| {
                let (_, lo, hi) = value(b);
                (secs(b), unit.of(lo), unit.of(hi))
            })
            .collect();
        chart.band(&band, "band");
    }
    for b in &drawn {
        let (e, lo, hi) = value(b);
        let title = if corrected {
            format!(
                "{}: skew {} (interval {} to {}), {} missing",
                b.label,
                duration(e as i64),
                duration(lo as i64),
                duration(hi as i64),
                b.missing
            )
        } else {
            format!(
                "{}: skew {} (device clocks as they are), {} missing",
                b.label,
                duration(e as i64),
                b.missing
            )
        };
        let class = if b.missing > 0 { "skew missed" } else { "skew" };
        chart.point(secs(b), unit.of(e), class, &title);
    }
    Some(chart.finish("skew per broadcast over time"))
}

/// Per broadcast acted on: its receive skew and its action skew, over time
/// on one axis, so the page shows what scheduling bought. Each is the upper
/// bound of its interval when `use_corrected` (what an audit judges), else
/// the figure on the devices' clocks.
pub fn actions_over_time(f: &Figures, use_corrected: bool) -> Option<String> {
    let drawn: Vec<_> = f
        .broadcasts
        .iter()
        .filter(|b| b.actions.is_some_and(|a| a.skew_ns.is_some()))
        .collect();
    let t0 = drawn.first()?.at_wall_ns;
    let received = |b: &skewscope_core::analysis::figures::BroadcastPoint| -> f64 {
        match b.corrected_ns {
            Some((_, _, hi)) if use_corrected => hi as f64,
            _ => b.skew_ns.unwrap_or(0) as f64,
        }
    };
    let acted = |b: &skewscope_core::analysis::figures::BroadcastPoint| -> f64 {
        let a = b.actions.expect("filtered above");
        match a.corrected_ns {
            Some((_, _, hi)) if use_corrected => hi as f64,
            _ => a.skew_ns.unwrap_or(0) as f64,
        }
    };
    let top = drawn
        .iter()
        .map(|b| received(b).max(acted(b)))
        .fold(0.0, f64::max);
    let unit = TimeUnit::for_range(top);
    let secs = |b: &skewscope_core::analysis::figures::BroadcastPoint| {
        (b.at_wall_ns.saturating_sub(t0)) as f64 / 1e9
    };
    let last = drawn.iter().map(|b| secs(b)).fold(0.0, f64::max);
    let mut chart = Chart::new(
        "actions-time",
        WIDE,
        (0.0, last),
        (0.0, unit.of(top)),
        "time since the first broadcast (s)",
        &format!("skew ({})", unit.symbol),
    );
    for b in &drawn {
        let a = b.actions.expect("filtered above");
        let (r, x) = (received(b), acted(b));
        chart.point(
            secs(b),
            unit.of(r),
            "received",
            &format!("{}: receive skew {}", b.label, duration(r as i64)),
        );
        let class = if a.late > 0 { "acted late" } else { "acted" };
        chart.point(
            secs(b),
            unit.of(x),
            class,
            &format!(
                "{}: action skew {} over {} actions, {} late",
                b.label,
                duration(x as i64),
                a.actions,
                a.late
            ),
        );
    }
    Some(chart.finish("receive skew and action skew per broadcast over time"))
}

/// The CDF of skew per broadcast: the estimate, and the upper bounds when
/// `use_corrected`.
pub fn skew_cdf(f: &Figures, use_corrected: bool) -> Option<String> {
    let corrected: Vec<(i64, i64)> = f
        .broadcasts
        .iter()
        .filter_map(|b| b.corrected_ns.map(|(e, _, hi)| (e, hi)))
        .collect();
    let use_corrected = use_corrected
        && !corrected.is_empty()
        && corrected.len() == f.broadcasts.iter().filter(|b| b.skew_ns.is_some()).count();
    let (mut estimates, mut uppers): (Vec<i64>, Vec<i64>) = if use_corrected {
        corrected.into_iter().unzip()
    } else {
        let raw: Vec<i64> = f
            .broadcasts
            .iter()
            .filter_map(|b| b.skew_ns.map(|s| s as i64))
            .collect();
        (raw, Vec::new())
    };
    if estimates.is_empty() {
        return None;
    }
    estimates.sort_unstable();
    uppers.sort_unstable();
    let top = estimates.iter().chain(&uppers).copied().max().unwrap_or(0) as f64;
    let unit = TimeUnit::for_range(top);
    let mut chart = Chart::new(
        "skew-cdf",
        WIDE,
        (0.0, unit.of(top)),
        (0.0, 1.0),
        &format!("skew ({})", unit.symbol),
        "fraction of broadcasts",
    );
    for (values, class) in [(&estimates, "cdf"), (&uppers, "cdf upper")] {
        if values.is_empty() {
            continue;
        }
        let n = values.len() as f64;
        let mut steps = vec![(unit.of(values[0] as f64), 0.0)];
        for (i, &v) in values.iter().enumerate() {
            let x = unit.of(v as f64);
            steps.push((x, i as f64 / n));
            steps.push((x, (i + 1) as f64 / n));
        }
        chart.line(&steps, class);
    }
    Some(chart.finish("cumulative distribution of skew"))
}

/// Latency from the broadcast's start against the position of the
/// agent's write of that copy, one mark per receipt, coloured by probe.
pub fn latency_by_position(f: &Figures) -> Option<String> {
    if f.receipts.is_empty() {
        return None;
    }
    let x_top = f.receipts.iter().map(|r| r.position_ns).max()? as f64;
    let y_lo = f.receipts.iter().map(|r| r.latency_ns).min()?.min(0) as f64;
    let y_top = f.receipts.iter().map(|r| r.latency_ns).max()? as f64;
    let (xu, yu) = (
        TimeUnit::for_range(x_top),
        TimeUnit::for_range(y_top.max(-y_lo)),
    );
    let mut chart = Chart::new(
        "latency-position",
        WIDE,
        (0.0, xu.of(x_top)),
        (yu.of(y_lo), yu.of(y_top)),
        &format!("agent's write of the copy, after the start ({})", xu.symbol),
        &format!("receipt after the start ({})", yu.symbol),
    );
    for r in &f.receipts {
        let probe = f.probes.get(r.probe).map_or("?", |p| p.name.as_str());
        let title = format!(
            "{probe}: written at {}, received at {}{}",
            duration(r.position_ns),
            duration(r.latency_ns),
            if r.corrected {
                ""
            } else {
                " (device clock uncorrected)"
            }
        );
        chart.point(
            xu.of(r.position_ns as f64),
            yu.of(r.latency_ns as f64),
            &format!("receipt s{}", r.probe % PROBE_COLOURS),
            &title,
        );
    }
    Some(chart.finish("latency against fan-out position"))
}

/// A colour on a dark-to-light ramp (readable on both themes) for
/// `fraction` in 0..=1.
fn ramp(fraction: f64) -> String {
    const STOPS: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let f = fraction.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (f.floor() as usize).min(STOPS.len() - 2);
    let t = f - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |x: f64, y: f64| (x + (y - x) * t).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

/// Lateness per connection × broadcast: a device that is always late is a
/// bright row.
pub fn lateness_heatmap(f: &Figures) -> Option<(String, i64)> {
    let h = &f.heatmap;
    if h.rows.is_empty() || h.columns == 0 {
        return None;
    }
    let top = h
        .rows
        .iter()
        .flat_map(|r| r.cells.iter().flatten())
        .copied()
        .max()
        .unwrap_or(0)
        .max(1);
    let rows: Vec<String> = h.rows.iter().map(|r| r.label.clone()).collect();
    let per = h.broadcasts_per_column;
    let mut chart = Chart::with_rows(
        "lateness",
        900.0,
        12.0,
        (0.0, (h.columns * per) as f64),
        rows,
        "broadcast (in order)",
    );
    for (row, r) in h.rows.iter().enumerate() {
        for (col, cell) in r.cells.iter().enumerate() {
            let span = ((col * per) as f64, ((col + 1) * per) as f64);
            match cell {
                Some(late) => chart.cell(
                    row,
                    span,
                    &ramp(*late as f64 / top as f64),
                    &format!(
                        "{}: {} behind the first receipt{}",
                        r.label,
                        duration(*late),
                        if per > 1 {
                            format!(" (mean of {per} broadcasts)")
                        } else {
                            String::new()
                        }
                    ),
                ),
                None => chart.cell(row, span, "none", &format!("{}: nothing received", r.label)),
            }
        }
    }
    Some((chart.finish("lateness per connection and broadcast"), top))
}

/// The colour ramp's key, `0` to `top`.
pub fn ramp_key(top: i64) -> String {
    let stops: String = (0..=10)
        .map(|i| {
            format!(
                r#"<stop offset="{}%" stop-color="{}"/>"#,
                i * 10,
                ramp(i as f64 / 10.0)
            )
        })
        .collect();
    format!(
        r#"<svg class="key" viewBox="0 0 340 34" xmlns="http://www.w3.org/2000/svg"><defs><linearGradient id="ramp">{stops}</linearGradient></defs><rect x="20" y="4" width="220" height="12" fill="url(#ramp)"/><text class="tick" x="16" y="14" text-anchor="end">0</text><text class="tick" x="244" y="14">{}</text><text class="tick" x="130" y="30" text-anchor="middle">behind the broadcast's first receipt</text></svg>"#,
        duration(top)
    )
}

/// Each probe's offset to the agent with its error bar, over the span the
/// two clocks' claims allow.
pub fn probe_offsets(f: &Figures) -> Option<String> {
    if f.probes.is_empty() {
        return None;
    }
    let allowed = |claim: Option<u64>| claim.zip(f.agent_claim_ns).map(|(d, a)| (d + a) as f64);
    let extent = f
        .probes
        .iter()
        .map(|p| {
            let bar = p
                .offset_ns
                .map_or(0.0, |(o, b)| o.unsigned_abs() as f64 + b as f64);
            bar.max(allowed(p.claim_ns).unwrap_or(0.0))
        })
        .fold(1.0, f64::max);
    let unit = TimeUnit::for_range(extent);
    let rows = f.probes.iter().map(|p| p.name.clone()).collect();
    let mut chart = Chart::with_rows(
        "offsets",
        900.0,
        28.0,
        (-unit.of(extent), unit.of(extent)),
        rows,
        &format!("device clock − agent clock ({})", unit.symbol),
    );
    chart.rule_x(0.0, "zero");
    for (row, p) in f.probes.iter().enumerate() {
        if let Some(a) = allowed(p.claim_ns) {
            chart.row_span(
                row,
                -unit.of(a),
                unit.of(a),
                "claim",
                &format!(
                    "{}: the two clocks claim to be within ±{} of each other",
                    p.name,
                    duration(a as i64)
                ),
            );
        }
        match p.offset_ns {
            Some((o, b)) => chart.error_bar(
                row,
                (
                    unit.of((o - b as i64) as f64),
                    unit.of(o as f64),
                    unit.of((o + b as i64) as f64),
                ),
                &format!(
                    "{}: offset {} ± {}",
                    p.name,
                    duration(o),
                    duration(b as i64)
                ),
            ),
            None => chart.row_span(
                row,
                -unit.of(extent),
                unit.of(extent),
                "unknown",
                &format!("{}: no offset measured (no time exchange)", p.name),
            ),
        }
    }
    Some(chart.finish("probe clock offsets and their claims"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ramp_runs_from_dark_to_light() {
        assert_eq!(ramp(0.0), "#440154");
        assert_eq!(ramp(1.0), "#fde725");
        assert_eq!(ramp(7.0), "#fde725");
    }
}
