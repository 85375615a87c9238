//! The plot series on the clock tests' shifted run (probe a 5 ms ahead,
//! probe b 3 ms behind, true arrivals known), and the bounds on their size.

use super::*;
use crate::Stamp;
use crate::analysis::clock_figures::tests::shifted_run;
use crate::analysis::join::join;

#[test]
fn each_broadcast_interval_holds_its_true_skew_while_raw_skew_carries_the_offsets() {
    let (agent, a, b, truth) = shifted_run();
    let f = figures(&join(Some(&agent), &[&a.records, &b.records]));
    assert_eq!(f.broadcasts.len(), 2);
    assert_eq!(f.broadcasts_total, 2);
    for (point, &true_skew) in f.broadcasts.iter().zip(&truth) {
        let (estimate, lo, hi) = point.corrected_ns.expect("both probes are bounded");
        let true_skew = true_skew as i64;
        assert!(
            lo <= true_skew && true_skew <= hi,
            "{point:?} vs {true_skew}"
        );
        assert!((estimate - true_skew).abs() <= 40_000, "{point:?}");
        // The raw figure includes the 8 ms between the two clocks.
        assert!(point.skew_ns.unwrap() > 7_000_000, "{point:?}");
        assert_eq!(point.missing, 0);
    }
    assert!(f.broadcasts[0].at_wall_ns < f.broadcasts[1].at_wall_ns);
    assert_eq!(f.broadcasts[0].label, "id 1");
}

#[test]
fn receipts_are_drawn_at_their_fan_out_position_with_corrected_latency() {
    let (agent, a, b, _) = shifted_run();
    let f = figures(&join(Some(&agent), &[&a.records, &b.records]));
    assert_eq!(f.receipts.len(), 8);
    assert_eq!(f.receipts_total, 8);
    assert!(f.receipts.iter().all(|r| r.corrected));
    // The agent wrote its four copies 10 µs apart.
    let mut positions: Vec<i64> = f.receipts.iter().map(|r| r.position_ns).collect();
    positions.sort_unstable();
    positions.dedup();
    assert_eq!(positions, vec![10_000, 20_000, 30_000, 40_000]);
    // Broadcast 1 started at 200 ms; dev-b's first connection got it 400 µs
    // later in true time. Corrected, that is within the 20 µs bound.
    let late = f
        .receipts
        .iter()
        .filter(|r| r.probe == 1)
        .map(|r| r.latency_ns)
        .max()
        .unwrap();
    assert!((late - 400_000).abs() <= 20_000, "{late}");
    for (p, truth) in f.probes.iter().zip([5_000_000i64, -3_000_000]) {
        let (offset, bound) = p.offset_ns.unwrap();
        assert!((offset - truth).unsigned_abs() <= bound, "{p:?}");
        assert!(bound < 20_010, "{p:?}");
    }
    assert_eq!(f.probes[0].claim_ns, Some(1_000_000));
}

#[test]
fn the_heatmap_shows_the_late_connection_of_each_broadcast() {
    let (agent, a, b, _) = shifted_run();
    let f = figures(&join(Some(&agent), &[&a.records, &b.records]));
    let h = &f.heatmap;
    assert_eq!((h.columns, h.broadcasts_per_column), (2, 1));
    assert_eq!(h.connections_total, 4);
    let labels: Vec<&str> = h.rows.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, vec!["dev-a #0", "dev-a #1", "dev-b #0", "dev-b #1"]);
    // Broadcast 1: dev-b #0 is 250 µs behind the first (dev-a #0, true 150 µs).
    let cell = |row: usize, col: usize| h.rows[row].cells[col].unwrap();
    assert_eq!(cell(0, 0), 0);
    assert!((cell(2, 0) - 250_000).abs() <= 40_000, "{}", cell(2, 0));
    // Broadcast 2: dev-a #1 is 800 µs behind dev-a #0, one clock: exact.
    assert!((cell(1, 1) - 800_000).abs() <= 40_000, "{}", cell(1, 1));
}

#[test]
fn thinning_keeps_the_first_and_last_and_at_most_the_cap() {
    let items: Vec<u32> = (0..10_001).collect();
    let thinned = thin(items, 1_000);
    assert!(thinned.len() <= 1_001, "{}", thinned.len());
    assert_eq!(thinned.first(), Some(&0));
    assert_eq!(thinned.last(), Some(&10_000));
    assert_eq!(thin(vec![1, 2, 3], 3), vec![1, 2, 3]);
}

#[test]
fn a_sample_taken_as_items_come_is_even_and_keeps_first_and_last() {
    for n in [0usize, 1, 3, 1_000, 1_999, 2_000, 2_001, 10_001, 123_457] {
        let mut sample = Sample::new(1_000);
        for i in 0..n {
            sample.offer(i);
        }
        let (kept, offered) = sample.finish();
        assert_eq!(offered, n);
        assert!(kept.len() <= 1_001, "{n}: {}", kept.len());
        assert_eq!(kept.first().copied(), (n > 0).then_some(0));
        assert_eq!(kept.last().copied(), n.checked_sub(1));
        assert!(kept.windows(2).all(|w| w[0] < w[1]), "{n}: in order");
        if n >= 1_000 {
            // Evenly: no gap more than four times the mean.
            let widest = kept.windows(2).map(|w| w[1] - w[0]).max().unwrap();
            assert!(widest <= 4 * n / kept.len() + 1, "{n}: gap {widest}");
            assert!(kept.len() >= 250, "{n}: only {}", kept.len());
        }
    }
}

#[test]
fn a_large_run_is_folded_to_the_caps_and_keeps_its_latest_connection() {
    use crate::record::*;
    // 200 connections on one probe, 500 broadcasts; connection 137 always
    // 5 ms late, the others 1 µs apart.
    let conns = 200u32;
    let mut records = vec![crate::fixtures::probe_started_on(
        "p",
        "h",
        conns,
        Stamp {
            wall_ns: 1,
            mono_ns: 1,
        },
    )];
    for c in 0..conns {
        records.push(crate::fixtures::connection_opened(
            c,
            None,
            Stamp {
                wall_ns: 2,
                mono_ns: 2,
            },
        ));
    }
    for seq in 0..500u64 {
        for c in 0..conns {
            let t = 1_000_000_000 + seq * 10_000_000 + u64::from(c) * 1_000;
            let t = if c == 137 { t + 5_000_000 } else { t };
            records.push(ProbeRecord::Receipt(Receipt {
                len: 10,
                ..crate::fixtures::receipt(
                    c,
                    MessageKey::Seq(seq),
                    seq,
                    Stamp {
                        wall_ns: t,
                        mono_ns: t,
                    },
                )
            }));
        }
    }
    let f = figures(&join(None, &[&records]));
    assert_eq!(f.broadcasts_total, 500);
    assert_eq!(f.broadcasts.len(), 500);
    let h = &f.heatmap;
    assert_eq!(h.rows.len(), MAX_HEATMAP_ROWS);
    assert!(h.columns <= MAX_HEATMAP_COLUMNS);
    assert!(h.columns * h.broadcasts_per_column >= 500);
    assert_eq!(h.connections_total, 200);
    let late = h.rows.iter().max_by_key(|r| r.mean_ns).unwrap();
    assert_eq!(late.label, "p #137");
    // No agent log: nothing to draw against a send time.
    assert!(f.receipts.is_empty());
}
