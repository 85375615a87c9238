//! A small SVG chart writer: linear axes with round ticks, marks, bands,
//! lines, error bars and cells, all styled by CSS classes.
//!
//! Why not a plotting crate: the page must follow the reader's light or dark
//! theme, give every mark a native tooltip (`<title>`, no script) and let a
//! test count marks by class. plotters' SVG backend writes fixed colours
//! and no classes or titles, so each of those would be post-processing of its
//! output; the charts here need only axes and five kinds of shape.

use std::fmt::Write;

/// Text made safe for HTML and SVG: names in logs come from devices. A
/// line break or tab is text (in a paragraph it is a space, in the `why`
/// block a new line); any other control character becomes U+FFFD.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' | '\t' => out.push(c),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A unit for nanosecond values, chosen so an axis reads 1 to 999.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeUnit {
    /// Nanoseconds per unit.
    pub ns: f64,
    /// Its symbol.
    pub symbol: &'static str,
}

impl TimeUnit {
    /// The largest unit in which `largest_ns` is at least 1.
    pub fn for_range(largest_ns: f64) -> TimeUnit {
        let units = [(1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns")];
        let (ns, symbol) = units
            .into_iter()
            .find(|(ns, _)| largest_ns.abs() >= *ns)
            .unwrap_or((1.0, "ns"));
        TimeUnit { ns, symbol }
    }

    /// `ns` in this unit.
    pub fn of(&self, ns: f64) -> f64 {
        ns / self.ns
    }
}

/// A linear map from values to pixels.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    lo: f64,
    hi: f64,
    px_lo: f64,
    px_hi: f64,
}

impl Scale {
    /// Maps `lo..hi` (widened to round ticks; a point range gets a width)
    /// onto `px_lo..px_hi`.
    pub fn new(lo: f64, hi: f64, px_lo: f64, px_hi: f64) -> Scale {
        let (lo, hi) = if hi - lo > f64::EPSILON * hi.abs().max(1.0) {
            (lo, hi)
        } else {
            (lo - 0.5 - lo.abs() * 0.05, hi + 0.5 + hi.abs() * 0.05)
        };
        let step = tick_step(hi - lo);
        Scale {
            lo: (lo / step).floor() * step,
            hi: (hi / step).ceil() * step,
            px_lo,
            px_hi,
        }
    }

    /// The pixel of `v`.
    pub fn at(&self, v: f64) -> f64 {
        self.px_lo + (v - self.lo) / (self.hi - self.lo) * (self.px_hi - self.px_lo)
    }

    /// Round values to label, inside the range.
    pub fn ticks(&self) -> Vec<f64> {
        let step = tick_step(self.hi - self.lo);
        let first = (self.lo / step).ceil() as i64;
        let last = (self.hi / step).floor() as i64;
        (first..=last).map(|k| k as f64 * step).collect()
    }

    /// The range covered.
    pub fn range(&self) -> (f64, f64) {
        (self.lo, self.hi)
    }
}

/// 1, 2 or 5 × a power of ten, giving about five ticks over `span`.
fn tick_step(span: f64) -> f64 {
    let rough = span / 5.0;
    let power = 10f64.powf(rough.log10().floor());
    let fraction = rough / power;
    power
        * if fraction < 1.5 {
            1.0
        } else if fraction < 3.5 {
            2.0
        } else if fraction < 7.5 {
            5.0
        } else {
            10.0
        }
}

/// A tick label: as few decimals as the step needs.
fn label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    let text = format!("{v:.decimals$}");
    if text
        .trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        "0".to_owned()
    } else {
        text
    }
}

/// Where the plot area lies in the picture.
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 44.0;

/// One chart being drawn.
pub struct Chart {
    width: f64,
    height: f64,
    /// The horizontal scale.
    pub x: Scale,
    /// The vertical scale.
    pub y: Scale,
    x_label: String,
    y_label: String,
    /// Category names on the vertical axis instead of numbers (rows).
    y_categories: Option<Vec<String>>,
    /// Ticks on the horizontal axis at these values with these labels
    /// instead of round numbers ([`Chart::label_x_at`]).
    x_labels: Option<Vec<(f64, String)>>,
    /// The same for the vertical axis ([`Chart::label_y_at`]).
    y_labels: Option<Vec<(f64, String)>>,
    body: String,
    id: &'static str,
}

impl Chart {
    /// A chart `id` (the figure's class, for tests and styling) of
    /// `width`×`height` pixels over the value ranges given.
    pub fn new(
        id: &'static str,
        (width, height): (f64, f64),
        x: (f64, f64),
        y: (f64, f64),
        x_label: &str,
        y_label: &str,
    ) -> Chart {
        Chart {
            width,
            height,
            x: Scale::new(x.0, x.1, LEFT, width - RIGHT),
            y: Scale::new(y.0, y.1, height - BOTTOM, TOP),
            x_label: x_label.to_owned(),
            y_label: y_label.to_owned(),
            y_categories: None,
            x_labels: None,
            y_labels: None,
            body: String::new(),
            id,
        }
    }

    /// A chart whose rows are named categories (row 0 at the top), with a
    /// wider left margin for their names.
    pub fn with_rows(
        id: &'static str,
        width: f64,
        row_height: f64,
        x: (f64, f64),
        rows: Vec<String>,
        x_label: &str,
    ) -> Chart {
        let height = TOP + BOTTOM + row_height * rows.len().max(1) as f64;
        let mut chart = Chart::new(id, (width, height), x, (0.0, 1.0), x_label, "");
        let left = 150.0;
        chart.x = Scale::new(x.0, x.1, left, width - RIGHT);
        chart.y = Scale {
            lo: 0.0,
            hi: rows.len().max(1) as f64,
            px_lo: TOP,
            px_hi: height - BOTTOM,
        };
        chart.y_categories = Some(rows);
        chart
    }

    /// Labels the horizontal axis at `ticks` (value, text) instead of at
    /// round numbers: a logarithmic axis plots the logarithms and labels
    /// them with what they stand for (5, 100, 1000 connections).
    pub fn label_x_at(&mut self, ticks: Vec<(f64, String)>) {
        self.x_labels = Some(ticks);
    }

    /// Labels the vertical axis at `ticks` instead of at round numbers
    /// (see [`Chart::label_x_at`]).
    pub fn label_y_at(&mut self, ticks: Vec<(f64, String)>) {
        self.y_labels = Some(ticks);
    }

    /// A round mark at (x, y) with a tooltip.
    pub fn point(&mut self, x: f64, y: f64, class: &str, title: &str) {
        let _ = write!(
            self.body,
            r#"<circle class="mark {class}" cx="{:.1}" cy="{:.1}" r="3"><title>{}</title></circle>"#,
            self.x.at(x),
            self.y.at(y),
            escape(title)
        );
    }

    /// A filled band between `lo` and `hi` along x.
    pub fn band(&mut self, points: &[(f64, f64, f64)], class: &str) {
        if points.is_empty() {
            return;
        }
        let mut d = String::new();
        for (i, &(x, _, hi)) in points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1}",
                if i == 0 { "M" } else { "L" },
                self.x.at(x),
                self.y.at(hi)
            );
        }
        for &(x, lo, _) in points.iter().rev() {
            let _ = write!(d, "L{:.1},{:.1}", self.x.at(x), self.y.at(lo));
        }
        let _ = write!(self.body, r#"<path class="{class}" d="{d}Z"/>"#);
    }

    /// A polyline through `points`.
    pub fn line(&mut self, points: &[(f64, f64)], class: &str) {
        let mut d = String::new();
        for (i, &(x, y)) in points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1}",
                if i == 0 { "M" } else { "L" },
                self.x.at(x),
                self.y.at(y)
            );
        }
        if !d.is_empty() {
            let _ = write!(self.body, r#"<path class="{class}" d="{d}"/>"#);
        }
    }

    /// A horizontal error bar on row `row` from `lo` to `hi`, with a mark at
    /// `at` and a tooltip.
    pub fn error_bar(&mut self, row: usize, (lo, at, hi): (f64, f64, f64), title: &str) {
        let y = self.y.at(row as f64 + 0.5);
        let (x0, x, x1) = (self.x.at(lo), self.x.at(at), self.x.at(hi));
        let _ = write!(
            self.body,
            r#"<g class="mark offset"><title>{}</title><path class="bar" d="M{x0:.1},{y:.1}H{x1:.1}M{x0:.1},{:.1}V{:.1}M{x1:.1},{:.1}V{:.1}"/><circle cx="{x:.1}" cy="{y:.1}" r="3.5"/></g>"#,
            escape(title),
            y - 5.0,
            y + 5.0,
            y - 5.0,
            y + 5.0
        );
    }

    /// A span of row `row` from `lo` to `hi` (a claim), under the marks.
    pub fn row_span(&mut self, row: usize, lo: f64, hi: f64, class: &str, title: &str) {
        let y0 = self.y.at(row as f64 + 0.15);
        let y1 = self.y.at(row as f64 + 0.85);
        let (x0, x1) = (self.x.at(lo), self.x.at(hi));
        let _ = write!(
            self.body,
            r#"<rect class="{class}" x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}"><title>{}</title></rect>"#,
            (x1 - x0).max(1.0),
            y1 - y0,
            escape(title)
        );
    }

    /// A heatmap cell: column range `x0..x1` on row `row`, filled `fill`.
    pub fn cell(&mut self, row: usize, (x0, x1): (f64, f64), fill: &str, title: &str) {
        let (px0, px1) = (self.x.at(x0), self.x.at(x1));
        let (py0, py1) = (self.y.at(row as f64), self.y.at(row as f64 + 1.0));
        let _ = write!(
            self.body,
            r#"<rect class="cell" x="{px0:.1}" y="{py0:.1}" width="{:.1}" height="{:.1}" fill="{fill}"><title>{}</title></rect>"#,
            (px1 - px0).max(0.5),
            py1 - py0,
            escape(title)
        );
    }

    /// A vertical rule at x (e.g. zero offset).
    pub fn rule_x(&mut self, x: f64, class: &str) {
        let px = self.x.at(x);
        let _ = write!(
            self.body,
            r#"<path class="{class}" d="M{px:.1},{:.1}V{:.1}"/>"#,
            TOP,
            self.height - BOTTOM
        );
    }

    /// The finished `<svg>`, axes first, then what was drawn.
    pub fn finish(self, description: &str) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg class="chart {}" viewBox="0 0 {} {}" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">"#,
            self.id,
            self.width,
            self.height,
            escape(description)
        );
        let (plot_left, plot_right) = (self.x.px_lo, self.x.px_hi);
        let (plot_bottom, plot_top) = if self.y_categories.is_some() {
            (self.y.px_hi, self.y.px_lo)
        } else {
            (self.y.px_lo, self.y.px_hi)
        };
        let x_step = tick_step(self.x.hi - self.x.lo);
        let x_ticks: Vec<(f64, String)> = match &self.x_labels {
            Some(given) => given.clone(),
            None => self
                .x
                .ticks()
                .into_iter()
                .map(|t| (t, label(t, x_step)))
                .collect(),
        };
        for (t, text) in x_ticks {
            let px = self.x.at(t);
            let _ = write!(
                out,
                r#"<path class="grid" d="M{px:.1},{plot_top:.1}V{plot_bottom:.1}"/><text class="tick" x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                plot_bottom + 16.0,
                escape(&text)
            );
        }
        match &self.y_categories {
            Some(rows) => {
                for (i, name) in rows.iter().enumerate() {
                    let py = self.y.at(i as f64 + 0.5);
                    let _ = write!(
                        out,
                        r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                        plot_left - 6.0,
                        py + 4.0,
                        escape(name)
                    );
                }
            }
            None => {
                let y_step = tick_step(self.y.hi - self.y.lo);
                let y_ticks: Vec<(f64, String)> = match &self.y_labels {
                    Some(given) => given.clone(),
                    None => self
                        .y
                        .ticks()
                        .into_iter()
                        .map(|t| (t, label(t, y_step)))
                        .collect(),
                };
                for (t, text) in y_ticks {
                    let py = self.y.at(t);
                    let _ = write!(
                        out,
                        r#"<path class="grid" d="M{plot_left:.1},{py:.1}H{plot_right:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                        plot_left - 6.0,
                        py + 4.0,
                        escape(&text)
                    );
                }
            }
        }
        let _ = write!(
            out,
            r#"<path class="axis" d="M{plot_left:.1},{plot_top:.1}V{plot_bottom:.1}H{plot_right:.1}"/>"#
        );
        out.push_str(&self.body);
        let _ = write!(
            out,
            r#"<text class="axis-label" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            (plot_left + plot_right) / 2.0,
            self.height - 6.0,
            escape(&self.x_label)
        );
        if !self.y_label.is_empty() {
            let cy = (plot_top + plot_bottom) / 2.0;
            let _ = write!(
                out,
                r#"<text class="axis-label" transform="translate(14 {cy:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
                escape(&self.y_label)
            );
        }
        out.push_str("</svg>");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let s = Scale::new(0.3, 9.7, 0.0, 100.0);
        assert_eq!(s.range(), (0.0, 10.0));
        assert_eq!(s.ticks(), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(s.at(5.0), 50.0);
        // A single value still gets a range around it.
        let one = Scale::new(3.0, 3.0, 0.0, 100.0);
        let (lo, hi) = one.range();
        assert!(lo < 3.0 && 3.0 < hi, "{lo} {hi}");
    }

    #[test]
    fn labels_use_the_decimals_the_step_needs() {
        assert_eq!(label(0.25, 0.05), "0.25");
        assert_eq!(label(2.0, 1.0), "2");
        assert_eq!(label(-0.0, 0.1), "0");
    }

    #[test]
    fn units_make_axes_read_one_to_a_thousand() {
        assert_eq!(TimeUnit::for_range(2_500_000.0).symbol, "ms");
        assert_eq!(TimeUnit::for_range(800.0).symbol, "ns");
        assert_eq!(TimeUnit::for_range(-45_000.0).symbol, "µs");
        assert_eq!(TimeUnit::for_range(0.0).symbol, "ns");
    }

    #[test]
    fn names_from_devices_cannot_inject_markup() {
        assert_eq!(
            escape("<script>alert('x')</script>&\u{7}"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;\u{fffd}"
        );
    }

    #[test]
    fn line_breaks_stay_text() {
        assert_eq!(escape("one\n  two\tthree"), "one\n  two\tthree");
    }
}
