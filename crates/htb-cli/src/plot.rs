//! Minimal SVG line charts (no dependencies): per-class rate over time, ns/packet curves.

use std::fmt::Write;

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points in data units.
    pub points: Vec<(f64, f64)>,
    /// Draw dashed (e.g. inner classes, or a reference).
    pub dashed: bool,
}

/// A line chart.
#[derive(Clone, Debug)]
pub struct LineChart {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis (base 10).
    pub x_log: bool,
    /// The lines.
    pub series: Vec<Series>,
}

const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f", "#bcbd22",
];

/// Round tick steps: 1, 2, 5 × 10^k covering `span` in about `target` steps.
fn nice_step(span: f64, target: f64) -> f64 {
    let raw = (span / target).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    let residual = raw / magnitude;
    let nice = if residual <= 1.0 {
        1.0
    } else if residual <= 2.0 {
        2.0
    } else if residual <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn label(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e4 || v.abs() < 1e-2 {
        format!("{v:.0e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl LineChart {
    /// Renders the chart as a standalone SVG document.
    #[must_use]
    pub fn to_svg(&self) -> String {
        let (width, height) = (900.0, 520.0);
        let (left, right, top, bottom) = (80.0, 200.0, 40.0, 60.0);
        let (plot_w, plot_h) = (width - left - right, height - top - bottom);
        let points = self.series.iter().flat_map(|s| s.points.iter().copied());
        let fx = |x: f64| if self.x_log { x.max(1e-12).log10() } else { x };
        let (mut x_min, mut x_max, mut y_max) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
        for (x, y) in points {
            x_min = x_min.min(fx(x));
            x_max = x_max.max(fx(x));
            y_max = y_max.max(y);
        }
        if !x_min.is_finite() {
            (x_min, x_max) = (0.0, 1.0);
        }
        if x_max <= x_min {
            x_max = x_min + 1.0;
        }
        let y_step = nice_step(y_max.max(1e-9) * 1.05, 6.0);
        let y_top = (y_max * 1.05 / y_step).ceil().max(1.0) * y_step;
        let sx = |x: f64| left + (fx(x) - x_min) / (x_max - x_min) * plot_w;
        let sy = |y: f64| top + plot_h - y / y_top * plot_h;

        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
            left + plot_w / 2.0,
            escape(&self.title)
        );
        // Grid and y ticks.
        let mut y = 0.0;
        while y <= y_top + y_step / 2.0 {
            let py = sy(y);
            let _ = writeln!(
                svg,
                r##"<line x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e5e5e5"/>"##,
                left + plot_w
            );
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                left - 6.0,
                py + 4.0,
                label(y)
            );
            y += y_step;
        }
        // X ticks: decades on a log axis, round steps on a linear one.
        let mut x_ticks = Vec::new();
        if self.x_log {
            let mut decade = x_min.floor();
            while decade <= x_max.ceil() {
                let px = left + (decade - x_min) / (x_max - x_min) * plot_w;
                if (left - 0.5..=left + plot_w + 0.5).contains(&px) {
                    x_ticks.push((px, 10f64.powf(decade)));
                }
                decade += 1.0;
            }
        } else {
            let step = nice_step(x_max - x_min, 8.0);
            let mut x = (x_min / step).ceil() * step;
            while x <= x_max + step / 1e6 {
                x_ticks.push((sx(x), x));
                x += step;
            }
        }
        for (px, x) in x_ticks {
            let _ = writeln!(
                svg,
                r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{:.1}" stroke="#e5e5e5"/>"##,
                top + plot_h
            );
            let _ = writeln!(
                svg,
                r#"<text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                top + plot_h + 18.0,
                label(x)
            );
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            left + plot_w / 2.0,
            height - 18.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            svg,
            r#"<text x="18" y="{0}" text-anchor="middle" transform="rotate(-90 18 {0})">{1}</text>"#,
            top + plot_h / 2.0,
            escape(&self.y_label)
        );
        // Lines and legend.
        for (i, series) in self.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let dash = if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let path: Vec<String> = series
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
                .collect();
            if !path.is_empty() {
                let _ = writeln!(
                    svg,
                    r#"<polyline fill="none" stroke="{color}" stroke-width="1.8"{dash} points="{}"/>"#,
                    path.join(" ")
                );
            }
            let ly = top + 10.0 + i as f64 * 18.0;
            let lx = left + plot_w + 14.0;
            let _ = writeln!(
                svg,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2.5"{dash}/>"#,
                lx + 24.0
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}">{}</text>"#,
                lx + 30.0,
                ly + 4.0,
                escape(&series.name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_lines_legend_and_axes() {
        let chart = LineChart {
            title: "rate <per> class".into(),
            x_label: "time (s)".into(),
            y_label: "Mbit/s".into(),
            x_log: false,
            series: vec![
                Series {
                    name: "1:10".into(),
                    points: vec![(0.0, 1.0), (1.0, 30.0)],
                    dashed: false,
                },
                Series {
                    name: "1:1".into(),
                    points: vec![(0.0, 2.0), (1.0, 100.0)],
                    dashed: true,
                },
            ],
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("rate &lt;per&gt; class"));
        assert!(svg.contains(">1:10<") && svg.contains("stroke-dasharray"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!((nice_step(97.0, 6.0) - 20.0).abs() < 1e-9);
    }
}
