//! The look shared by every panel: colours, the embedded font, text sizes, axis ranges
//! and labels, line widths and the legend.

use plotters::prelude::*;

use espalier::error::{Error, Result};

/// Ten colours that stay apart on white (Tableau 10).
const COLORS: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

pub(super) fn color(i: usize) -> RGBColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b)
}

/// The font every label uses, registered once under plotters' default family.
pub(super) fn register_font() -> Result<()> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        [FontStyle::Normal, FontStyle::Bold, FontStyle::Italic]
            .into_iter()
            .all(|style| {
                plotters::style::register_font(
                    "sans-serif",
                    style,
                    epaint_default_fonts::UBUNTU_LIGHT,
                )
                .is_ok()
            })
    });
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "plot: the embedded font could not be loaded",
        ))
    }
}

pub(super) type Drawn = std::result::Result<(), String>;

pub(super) const MIB: f64 = (1u64 << 20) as f64;
pub(super) const CAPTION: u32 = 24;
pub(super) const LABEL: u32 = 16;

pub(super) fn text_style() -> TextStyle<'static> {
    ("sans-serif", LABEL).into_font().into()
}

/// A value range with some room above and below.
pub(super) fn padded(lo: f64, hi: f64) -> std::ops::Range<f64> {
    let (lo, hi) = if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    let pad = ((hi - lo) * 0.08).max(1e-3);
    (lo - pad).max(if lo >= 0.0 { 0.0 } else { f64::MIN })..hi + pad
}

/// Height in pixels of one legend row (a label's font and the space plotters puts
/// between rows), and of the legend box's padding and its distance from the top.
pub(super) const LEGEND_ROW: f64 = LABEL as f64 + 9.0;
pub(super) const LEGEND_PAD: f64 = 30.0;

/// The top of a bar chart's value axis on `area` (of height `area_h` pixels) such that its
/// tallest value, `top`, stays below a legend of `rows` rows at the upper right: the bars
/// get the plotting area less the legend's height, so the legend hides none of them.
pub(super) fn above_legend(top: f64, rows: usize, area_h: u32) -> f64 {
    // The caption, the x labels and the two margins take this much of the area.
    let plot_h = (area_h as f64 - (CAPTION as f64 + 10.0) - 45.0 - 32.0).max(1.0);
    let legend = (rows as f64 * LEGEND_ROW + LEGEND_PAD) / plot_h;
    top.max(1e-3) / (1.0 - legend.min(0.8)) * 1.05
}

/// An axis label only at whole numbers (epochs, micro-batch indices).
pub(super) fn whole(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-6 && *v >= 0.0 {
        format!("{}", v.round() as i64)
    } else {
        String::new()
    }
}

/// Line width of run `i` of `n`: earlier runs are drawn wider, so a run that retraces
/// another (K = 1 and K = 8 train the same model) still shows beneath it.
pub(super) fn width(i: usize, n: usize) -> u32 {
    2 + 2 * (n - 1 - i.min(n - 1)) as u32
}

pub(super) fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    at: SeriesLabelPosition,
) -> Drawn {
    chart
        .configure_series_labels()
        .position(at)
        .label_font(text_style())
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_ranges_hold_their_values() {
        let r = padded(0.5, 2.0);
        assert!(r.start <= 0.5 && r.end >= 2.0);
        assert!(r.start >= 0.0, "a non-negative range stays non-negative");
        let flat = padded(1.0, 1.0);
        assert!(flat.start < flat.end);
        let none = padded(f64::INFINITY, f64::NEG_INFINITY);
        assert!(none.start < none.end);
    }
}
