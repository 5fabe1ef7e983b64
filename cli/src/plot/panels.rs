//! The panels of the figure (loss, accuracy, peak memory, phase times), laid out two per
//! row, each drawn from what the inputs hold.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::data::{Curve, Peaks, PhaseRun, Plots, PHASES};
use super::style::{
    above_legend, color, legend, padded, text_style, whole, width, Drawn, CAPTION, MIB,
};

/// One chart of the figure.
#[derive(Clone, Copy, Debug)]
pub(super) enum Panel {
    Loss,
    Accuracy,
    Memory,
    Phases,
}

impl Plots {
    /// The panels the inputs fill, in the order they are drawn.
    pub(super) fn panels(&self) -> Vec<Panel> {
        let mut p = Vec::new();
        if !self.curves.is_empty() {
            p.extend([Panel::Loss, Panel::Accuracy]);
        }
        if !self.peaks.is_empty() {
            p.push(Panel::Memory);
        }
        if !self.phases.is_empty() {
            p.push(Panel::Phases);
        }
        p
    }
}

fn draw_loss<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, curves: &[Curve]) -> Drawn {
    let epochs = curves.iter().map(|c| c.loss.len()).max().unwrap_or(1);
    let finite = curves
        .iter()
        .flat_map(|c| &c.loss)
        .filter(|l| l.is_finite());
    let lo = finite.clone().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.copied().fold(f64::NEG_INFINITY, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption("Training loss per epoch", ("sans-serif", CAPTION))
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(1f64..epochs.max(2) as f64, padded(lo, hi))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_labels(epochs.clamp(2, 12))
        .x_label_formatter(&whole)
        .x_desc("epoch")
        .y_desc("loss")
        .label_style(text_style())
        .axis_desc_style(text_style())
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, c) in curves.iter().enumerate() {
        let (col, w) = (color(i), width(i, curves.len()));
        let points = c.loss.iter().enumerate().map(|(e, &l)| ((e + 1) as f64, l));
        chart
            .draw_series(LineSeries::new(points, col.stroke_width(w)))
            .map_err(|e| e.to_string())?
            .label(c.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], col.stroke_width(3)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

fn draw_accuracy<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, curves: &[Curve]) -> Drawn {
    let epochs = curves.iter().map(|c| c.loss.len()).max().unwrap_or(1);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Accuracy per epoch (solid: train, dashed: validation)",
            ("sans-serif", CAPTION),
        )
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(1f64..epochs.max(2) as f64, 0f64..1.02)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_labels(epochs.clamp(2, 12))
        .x_label_formatter(&whole)
        .x_desc("epoch")
        .y_desc("accuracy")
        .label_style(text_style())
        .axis_desc_style(text_style())
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, c) in curves.iter().enumerate() {
        let (col, w) = (color(i), width(i, curves.len()));
        let train = c
            .train_acc
            .iter()
            .enumerate()
            .map(|(e, &a)| ((e + 1) as f64, a));
        chart
            .draw_series(LineSeries::new(train, col.stroke_width(w)))
            .map_err(|e| e.to_string())?
            .label(format!("{} train", c.label))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], col.stroke_width(3)));
        let valid: Vec<(f64, f64)> = c.valid_acc.iter().map(|&(e, a)| (e as f64, a)).collect();
        if valid.is_empty() {
            continue;
        }
        chart
            .draw_series(DashedLineSeries::new(
                valid.clone(),
                8,
                5,
                col.stroke_width(w.min(3)),
            ))
            .map_err(|e| e.to_string())?
            .label(format!("{} validation", c.label))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 10, y)], col.stroke_width(2)));
        chart
            .draw_series(
                valid
                    .into_iter()
                    .map(|p| Circle::new(p, 2 + w, col.filled())),
            )
            .map_err(|e| e.to_string())?;
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)
}

fn draw_memory<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, peaks: &[Peaks]) -> Drawn {
    let k = peaks.iter().map(|p| p.bars.len()).max().unwrap_or(1);
    let top = peaks
        .iter()
        .flat_map(|p| {
            p.bars
                .iter()
                .flat_map(|b| [b.measured.unwrap_or(0.0), b.estimated])
                .chain(p.budget)
        })
        .fold(0.0, f64::max)
        / MIB;
    // One legend row per run, its budget if any, and the estimate's mark.
    let rows = peaks.len() + peaks.iter().filter(|p| p.budget.is_some()).count() + 1;
    let y_top = above_legend(top, rows, area.dim_in_pixel().1);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Peak memory per micro-batch or chunk (last batch or epoch of each run)",
            ("sans-serif", CAPTION),
        )
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..k as f64 - 0.5, 0f64..y_top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(k.min(16) + 1)
        .x_label_formatter(&whole)
        .x_desc("micro-batch (or chunk run, in order)")
        .y_desc("peak MiB")
        .label_style(text_style())
        .axis_desc_style(text_style())
        .draw()
        .map_err(|e| e.to_string())?;
    let n = peaks.len();
    let slot = 0.8 / n as f64;
    for (r, p) in peaks.iter().enumerate() {
        let col = color(r);
        let x0 = |i: usize| i as f64 - 0.4 + r as f64 * slot;
        chart
            .draw_series(p.bars.iter().enumerate().map(|(i, b)| {
                let (y, style) = match b.measured {
                    Some(m) => (m, col.filled()),
                    None => (b.estimated, col.stroke_width(2)),
                };
                Rectangle::new([(x0(i), 0.0), (x0(i) + slot * 0.9, y / MIB)], style)
            }))
            .map_err(|e| e.to_string())?
            .label(format!("{} ({})", p.label, p.which))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], col.filled()));
        let ticks = chart
            .draw_series(p.bars.iter().enumerate().map(|(i, b)| {
                let y = b.estimated / MIB;
                PathElement::new(
                    vec![(x0(i), y), (x0(i) + slot * 0.9, y)],
                    BLACK.stroke_width(3),
                )
            }))
            .map_err(|e| e.to_string())?;
        if r == 0 {
            ticks.label("estimated peak").legend(|(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(3))
            });
        }
        if let Some(b) = p.budget {
            let y = b / MIB;
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(-0.5, y), (k as f64 - 0.5, y)],
                    10,
                    6,
                    col.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?
                .label(format!("{} memory budget", p.label))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 10, y)], col.stroke_width(2))
                });
        }
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

fn draw_phases<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, runs: &[PhaseRun]) -> Drawn {
    let n = runs.len();
    let top = runs
        .iter()
        .map(|r| r.seconds.iter().sum::<f64>() * 1e3)
        .fold(0.0, f64::max);
    let y_top = above_legend(top, PHASES.len(), area.dim_in_pixel().1);
    let mut chart = ChartBuilder::on(area)
        .caption("Time per phase (median epoch)", ("sans-serif", CAPTION))
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..y_top)
        .map_err(|e| e.to_string())?;
    // A run's label under its bar, at whole x; nothing between runs.
    let names = |v: &f64| match whole(v).parse::<usize>() {
        Ok(i) => runs.get(i).map_or(String::new(), |r| r.label.clone()),
        Err(_) => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * n + 1)
        .x_label_formatter(&names)
        .y_desc("milliseconds")
        .label_style(text_style())
        .axis_desc_style(text_style())
        .draw()
        .map_err(|e| e.to_string())?;
    for (p, phase) in PHASES.iter().enumerate() {
        let col = color(p);
        chart
            .draw_series(runs.iter().enumerate().map(|(i, r)| {
                let y0: f64 = r.seconds[..p].iter().sum::<f64>() * 1e3;
                let y1 = y0 + r.seconds[p] * 1e3;
                let x = i as f64;
                Rectangle::new([(x - 0.3, y0), (x + 0.3, y1)], col.filled())
            }))
            .map_err(|e| e.to_string())?
            .label(*phase)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], col.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// Draws every panel on `root`, two per row.
pub(super) fn render<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, plots: &Plots) -> Drawn {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = plots.panels();
    let cols = if panels.len() > 1 { 2 } else { 1 };
    let rows = panels.len().div_ceil(cols);
    for (area, panel) in root.split_evenly((rows, cols)).iter().zip(panels) {
        match panel {
            Panel::Loss => draw_loss(area, &plots.curves)?,
            Panel::Accuracy => draw_accuracy(area, &plots.curves)?,
            Panel::Memory => draw_memory(area, &plots.peaks)?,
            Panel::Phases => draw_phases(area, &plots.phases)?,
        }
    }
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::data::Bar;
    use crate::plot::style::register_font;

    /// The rectangles of an SVG drawn filled in a colour (not white): `(x, y, w, h)`.
    fn filled_rects(svg: &str) -> Vec<[i64; 4]> {
        svg.split("<rect ")
            .skip(1)
            .map(|r| r.split("/>").next().unwrap_or(r))
            .filter(|r| r.contains(r##"opacity="1" fill="#"##) && !r.contains("#FFFFFF"))
            .map(|r| {
                let attr = |k: &str| -> i64 {
                    let key = format!("{k}=\"");
                    let at = r.find(&format!(" {key}")).unwrap_or(0);
                    let rest = &r[at..];
                    let start = rest.find('"').unwrap() + 1;
                    let end = start + rest[start..].find('"').unwrap();
                    rest[start..end].parse().unwrap()
                };
                [attr("x"), attr("y"), attr("width"), attr("height")]
            })
            .collect()
    }

    /// The legend boxes of an SVG (white at 85% opacity).
    fn legend_boxes(svg: &str) -> Vec<[i64; 4]> {
        let boxes: Vec<String> = svg
            .split("<rect ")
            .filter(|r| r.contains(r#"opacity="0.85""#))
            .map(|r| {
                r.replace(
                    r##"opacity="0.85" fill="#FFFFFF""##,
                    r##"opacity="1" fill="#000001""##,
                )
            })
            .collect();
        filled_rects(&format!("<rect {}", boxes.join("<rect ")))
    }

    #[test]
    fn the_legend_hides_no_bar() {
        // Bars as tall as the budget, all alike: the tallest possible under the legend.
        let bars = |n: usize| {
            (0..n)
                .map(|_| Bar {
                    measured: Some(90.0 * MIB),
                    estimated: 90.0 * MIB,
                })
                .collect::<Vec<_>>()
        };
        let plots = Plots {
            peaks: ["a", "b", "c"]
                .iter()
                .map(|l| Peaks {
                    label: l.to_string(),
                    which: "epoch 1, batch 1, K 8".into(),
                    budget: Some(100.0 * MIB),
                    bars: bars(8),
                })
                .collect(),
            phases: (0..3)
                .map(|i| PhaseRun {
                    label: format!("run {i}"),
                    seconds: [0.1; 7],
                })
                .collect(),
            ..Plots::default()
        };
        register_font().unwrap();
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (1400, 450)).into_drawing_area();
            render(&root, &plots).unwrap();
        }
        let legends = legend_boxes(&svg);
        assert_eq!(legends.len(), 2, "{legends:?}");
        let overlaps = |a: &[i64; 4], b: &[i64; 4]| {
            a[0] < b[0] + b[2] && b[0] < a[0] + a[2] && a[1] < b[1] + b[3] && b[1] < a[1] + a[3]
        };
        let within = |a: &[i64; 4], b: &[i64; 4]| {
            a[0] >= b[0] && a[1] >= b[1] && a[0] + a[2] <= b[0] + b[2] && a[1] + a[3] <= b[1] + b[3]
        };
        for bar in filled_rects(&svg) {
            for l in &legends {
                // The legend's own colour samples lie inside it.
                assert!(
                    within(&bar, l) || !overlaps(&bar, l),
                    "bar {bar:?} under the legend {l:?}"
                );
            }
        }
    }
}
