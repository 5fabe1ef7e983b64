//! `espalier plot`: charts from the JSON that `espalier train --json`, `partition --json`
//! and `bench --json` write, as one SVG or PNG.
//!
//! Each file's kind is read from its keys: a training run (`epochs` and `micro_batches`)
//! gives loss and accuracy curves per epoch and the peak memory of its micro-batches; a
//! partition report (`micro_batches` alone) the peak memory; a benchmark (`runs`) one
//! stacked bar of phase times per run. Panels appear for what the files hold; runs are
//! overlaid with a legend from `--label` or the file names. Text is drawn with a font that
//! ships inside the binary, so no system font library is needed.

use std::path::{Path, PathBuf};

use clap::Args;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

use espalier::error::{Error, Result};

/// Flags of `espalier plot`.
#[derive(Args, Debug, Clone)]
pub struct PlotArgs {
    /// JSON files from `espalier train --json`, `partition --json` or `bench --json` (the
    /// kind of each is detected; several runs are overlaid).
    #[arg(required = true, value_name = "JSON")]
    pub inputs: Vec<PathBuf>,
    /// The image to write: a name ending in .svg or .png.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Legend labels, one per JSON file, comma-separated (default: the file names without
    /// their extension), e.g. `--label K=1,K=8`.
    #[arg(long, value_delimiter = ',')]
    pub label: Vec<String>,
    /// Image width in pixels; each row of two panels adds 450 pixels of height.
    #[arg(long, default_value_t = 1400)]
    pub width: u32,
}

/// Loss and accuracy of one training run, per epoch.
#[derive(Debug)]
struct Curve {
    label: String,
    loss: Vec<f64>,
    train_acc: Vec<f64>,
    /// `(epoch, accuracy)` where the run evaluated.
    valid_acc: Vec<(usize, f64)>,
}

/// One micro-batch's peak device bytes.
#[derive(Debug)]
struct Bar {
    measured: Option<f64>,
    estimated: f64,
}

/// The micro-batches of one batch of a run, against its budget.
#[derive(Debug)]
struct Peaks {
    label: String,
    /// Which batch: `epoch 3, batch 0, K 8`.
    which: String,
    budget: Option<f64>,
    bars: Vec<Bar>,
}

/// The phases of `espalier bench`, in the order an epoch runs them.
const PHASES: [&str; 7] = [
    "sample",
    "partition",
    "slice",
    "gather",
    "forward",
    "backward",
    "optimizer",
];

/// Median seconds per phase of one benchmark run.
#[derive(Debug)]
struct PhaseRun {
    label: String,
    seconds: [f64; 7],
}

/// Everything the inputs hold, by panel.
#[derive(Debug, Default)]
struct Plots {
    curves: Vec<Curve>,
    peaks: Vec<Peaks>,
    phases: Vec<PhaseRun>,
}

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

fn color(i: usize) -> RGBColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b)
}

/// The font every label uses, registered once under plotters' default family.
fn register_font() -> Result<()> {
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

/// A malformed file: the error names it.
fn bad(path: &Path, msg: impl Into<String>) -> Error {
    Error::parse(path, 0, msg)
}

fn num(v: &Value, key: &str, path: &Path) -> Result<f64> {
    v.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| bad(path, format!("`{key}` is missing or not a number")))
}

fn array<'a>(v: &'a Value, key: &str, path: &Path) -> Result<&'a Vec<Value>> {
    v.get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| bad(path, format!("`{key}` is missing or not a list")))
}

/// The memory budget of a run's `config` (`null` or absent: none).
fn budget(v: &Value) -> Option<f64> {
    v.get("config")?
        .get("micro")?
        .get("memory_budget")?
        .as_f64()
}

fn parse_curve(v: &Value, label: &str, path: &Path) -> Result<Curve> {
    let epochs = array(v, "epochs", path)?;
    if epochs.is_empty() {
        return Err(bad(path, "`epochs` is empty: nothing to plot"));
    }
    let mut c = Curve {
        label: label.to_string(),
        loss: Vec::new(),
        train_acc: Vec::new(),
        valid_acc: Vec::new(),
    };
    for (i, e) in epochs.iter().enumerate() {
        c.loss.push(num(e, "loss", path)?);
        c.train_acc.push(num(e, "train_acc", path)?);
        if let Some(a) = e.get("valid_acc").and_then(Value::as_f64) {
            c.valid_acc.push((i + 1, a));
        }
    }
    Ok(c)
}

/// The bars of list `key` of `v`: each entry's `est_peak_bytes` and `peak_bytes` (absent
/// when it did not run).
fn bars(v: &Value, key: &str, path: &Path) -> Result<Vec<Bar>> {
    array(v, key, path)?
        .iter()
        .map(|m| {
            Ok(Bar {
                measured: m.get("peak_bytes").and_then(Value::as_f64),
                estimated: num(m, "est_peak_bytes", path)?,
            })
        })
        .collect()
}

/// Per partitioner in `micro_batches` (one for a training run, every one for `partition
/// --compare`), its last batch (the steady state of a budget search), in the order the
/// partitioners first appear.
fn parse_peaks(v: &Value, label: &str, path: &Path) -> Result<Vec<Peaks>> {
    let batches = array(v, "micro_batches", path)?;
    let partitioner = |b: &Value| {
        b.get("partitioner")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let mut last: Vec<(Option<String>, &Value)> = Vec::new();
    for b in batches {
        let name = partitioner(b);
        match last.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = b,
            None => last.push((name, b)),
        }
    }
    let mut out = Vec::new();
    for (name, b) in last {
        let bars = bars(b, "batches", path)?;
        if bars.is_empty() {
            continue;
        }
        out.push(Peaks {
            label: label.to_string(),
            // `epoch` is 1-based in the JSON, as on the console; `batch` an index.
            which: format!(
                "epoch {}, batch {}, K {}{}",
                num(b, "epoch", path)? as u64,
                num(b, "batch", path)? as u64 + 1,
                bars.len(),
                name.map_or(String::new(), |p| format!(", {p}"))
            ),
            budget: budget(v),
            bars,
        });
    }
    Ok(out)
}

/// The chunks of a full-graph run's last epoch (`epochs[].full_graph.chunk_runs`), every
/// chunk as it ran (layer, pass), if the run trained the full graph.
fn parse_chunks(v: &Value, label: &str, path: &Path) -> Result<Option<Peaks>> {
    let Some(last) = array(v, "epochs", path)?
        .iter()
        .rev()
        .find(|e| e.get("full_graph").is_some_and(|f| !f.is_null()))
    else {
        return Ok(None);
    };
    let fg = &last["full_graph"];
    let bars = bars(fg, "chunk_runs", path)?;
    if bars.is_empty() {
        return Ok(None);
    }
    Ok(Some(Peaks {
        label: label.to_string(),
        which: format!(
            "epoch {}, full graph, {} chunks per layer, {} chunk runs",
            num(last, "epoch", path)? as u64,
            num(fg, "chunks", path)? as u64,
            bars.len()
        ),
        budget: budget(v),
        bars,
    }))
}

fn parse_bench(v: &Value, label: &str, path: &Path) -> Result<Vec<PhaseRun>> {
    let runs = array(v, "runs", path)?;
    if runs.is_empty() {
        return Err(bad(path, "`runs` is empty: nothing to plot"));
    }
    runs.iter()
        .map(|r| {
            let p = r
                .get("phase_median_s")
                .ok_or_else(|| bad(path, "a run has no `phase_median_s`"))?;
            let mut seconds = [0.0; 7];
            for (s, name) in seconds.iter_mut().zip(PHASES) {
                *s = num(p, name, path)?;
            }
            let label = match (runs.len(), r.get("k").and_then(Value::as_u64)) {
                (n, Some(k)) if n > 1 => format!("{label} K={k}"),
                _ => label.to_string(),
            };
            Ok(PhaseRun { label, seconds })
        })
        .collect()
}

/// Reads one file into `plots`, detecting its kind.
fn read_into(plots: &mut Plots, path: &Path, label: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| Error::parse(path, e.line() as u64, format!("not valid JSON: {e}")))?;
    let has = |k: &str| v.get(k).is_some();
    if has("runs") {
        plots.phases.extend(parse_bench(&v, label, path)?);
    } else if has("epochs") {
        plots.curves.push(parse_curve(&v, label, path)?);
        if has("micro_batches") {
            plots.peaks.extend(parse_peaks(&v, label, path)?);
        }
        plots.peaks.extend(parse_chunks(&v, label, path)?);
    } else if has("micro_batches") {
        let peaks = parse_peaks(&v, label, path)?;
        if peaks.is_empty() {
            return Err(bad(
                path,
                "`micro_batches` holds no micro-batch: nothing to plot",
            ));
        }
        plots.peaks.extend(peaks);
    } else {
        return Err(bad(
            path,
            "not an espalier JSON: expected `epochs` (train --json), `micro_batches` \
             (partition --json) or `runs` (bench --json)",
        ));
    }
    Ok(())
}

/// One chart of the figure.
#[derive(Clone, Copy, Debug)]
enum Panel {
    Loss,
    Accuracy,
    Memory,
    Phases,
}

impl Plots {
    fn panels(&self) -> Vec<Panel> {
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

type Drawn = std::result::Result<(), String>;

const MIB: f64 = (1u64 << 20) as f64;
const CAPTION: u32 = 24;
const LABEL: u32 = 16;

fn text_style() -> TextStyle<'static> {
    ("sans-serif", LABEL).into_font().into()
}

/// A value range with some room above and below.
fn padded(lo: f64, hi: f64) -> std::ops::Range<f64> {
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
const LEGEND_ROW: f64 = LABEL as f64 + 9.0;
const LEGEND_PAD: f64 = 30.0;

/// The top of a bar chart's value axis on `area` (of height `area_h` pixels) such that its
/// tallest value, `top`, stays below a legend of `rows` rows at the upper right: the bars
/// get the plotting area less the legend's height, so the legend hides none of them.
fn above_legend(top: f64, rows: usize, area_h: u32) -> f64 {
    // The caption, the x labels and the two margins take this much of the area.
    let plot_h = (area_h as f64 - (CAPTION as f64 + 10.0) - 45.0 - 32.0).max(1.0);
    let legend = (rows as f64 * LEGEND_ROW + LEGEND_PAD) / plot_h;
    top.max(1e-3) / (1.0 - legend.min(0.8)) * 1.05
}

/// An axis label only at whole numbers (epochs, micro-batch indices).
fn whole(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-6 && *v >= 0.0 {
        format!("{}", v.round() as i64)
    } else {
        String::new()
    }
}

/// Line width of run `i` of `n`: earlier runs are drawn wider, so a run that retraces
/// another (K = 1 and K = 8 train the same model) still shows beneath it.
fn width(i: usize, n: usize) -> u32 {
    2 + 2 * (n - 1 - i.min(n - 1)) as u32
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

fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
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

/// Draws every panel on `root`, two per row.
fn render<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, plots: &Plots) -> Drawn {
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

/// The image's format, from the name of `--out`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

fn format_of(out: &Path) -> Result<Format> {
    match out
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => Err(Error::flag(
            "--out",
            format!("--out {}: the name must end in .svg or .png", out.display()),
        )),
    }
}

fn encode_png(rgb: &[u8], (w, h): (u32, u32), out: &Path) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut enc = png::Encoder::new(&mut bytes, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let fail = |e: png::EncodingError| Error::invalid(format!("{}: {e}", out.display()));
    let mut writer = enc.write_header().map_err(fail)?;
    writer.write_image_data(rgb).map_err(fail)?;
    writer.finish().map_err(fail)?;
    Ok(bytes)
}

pub fn run(a: &PlotArgs) -> Result<()> {
    let format = format_of(&a.out)?;
    if !a.label.is_empty() && a.label.len() != a.inputs.len() {
        return Err(Error::flag(
            "--label",
            format!(
                "--label has {} labels for {} JSON files: give one per file",
                a.label.len(),
                a.inputs.len()
            ),
        ));
    }
    if !(200..=10_000).contains(&a.width) {
        return Err(Error::flag(
            "--width",
            format!("--width {} must be between 200 and 10000 pixels", a.width),
        ));
    }
    espalier::atomic::check_writable(&a.out)?;
    let mut plots = Plots::default();
    for (i, path) in a.inputs.iter().enumerate() {
        let label = match a.label.get(i) {
            Some(l) => l.clone(),
            None => path.file_stem().map_or_else(
                || path.display().to_string(),
                |s| s.to_string_lossy().into_owned(),
            ),
        };
        read_into(&mut plots, path, &label)?;
    }
    register_font()?;
    let panels = plots.panels().len();
    let rows = panels.div_ceil(if panels > 1 { 2 } else { 1 }) as u32;
    let size = (a.width, 450 * rows);
    let fail = |e: String| Error::invalid(format!("plot {}: {e}", a.out.display()));
    let bytes = match format {
        Format::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                render(&root, &plots).map_err(fail)?;
            }
            svg.into_bytes()
        }
        Format::Png => {
            let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
                render(&root, &plots).map_err(fail)?;
            }
            encode_png(&rgb, size, &a.out)?
        }
    };
    espalier::atomic::write(&a.out, &bytes)?;
    eprintln!(
        "wrote {} ({} panel{}, {} file{})",
        a.out.display(),
        panels,
        if panels == 1 { "" } else { "s" },
        a.inputs.len(),
        if a.inputs.len() == 1 { "" } else { "s" }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_names_pick_the_format() {
        assert_eq!(format_of(Path::new("a.svg")).unwrap(), Format::Svg);
        assert_eq!(format_of(Path::new("a.PNG")).unwrap(), Format::Png);
        assert!(format_of(Path::new("a.jpg")).is_err());
        assert!(format_of(Path::new("a")).is_err());
    }

    fn value(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    /// One batch's entry of `micro_batches`: its epoch, batch, partitioner and bars.
    fn batch(epoch: u64, b: u64, partitioner: &str, peaks: &[u64]) -> String {
        let bars: Vec<String> = peaks
            .iter()
            .map(|p| format!(r#"{{"est_peak_bytes": {p}, "peak_bytes": {p}}}"#))
            .collect();
        format!(
            r#"{{"epoch": {epoch}, "batch": {b}, "partitioner": "{partitioner}", "batches": [{}]}}"#,
            bars.join(",")
        )
    }

    #[test]
    fn a_partition_compare_json_gives_every_partitioner_its_last_batch() {
        let path = Path::new("cmp.json");
        let entries: Vec<String> = ["random", "metis", "betty"]
            .iter()
            .flat_map(|p| [batch(1, 0, p, &[5, 6]), batch(2, 0, p, &[7, 8, 9])])
            .collect();
        let v = value(&format!(r#"{{"micro_batches": [{}]}}"#, entries.join(",")));
        let peaks = parse_peaks(&v, "cmp", path).unwrap();
        let which: Vec<&str> = peaks.iter().map(|p| p.which.as_str()).collect();
        assert_eq!(
            which,
            [
                "epoch 2, batch 1, K 3, random",
                "epoch 2, batch 1, K 3, metis",
                "epoch 2, batch 1, K 3, betty"
            ]
        );
    }

    #[test]
    fn a_full_graph_run_gets_its_chunks_peaks() {
        let chunk = |layer: u64, pass: &str, c: u64| {
            format!(
                r#"{{"layer": {layer}, "pass": "{pass}", "chunk": {c}, "est_peak_bytes": 100, "peak_bytes": 90}}"#
            )
        };
        let runs = [
            chunk(0, "forward", 0),
            chunk(0, "forward", 1),
            chunk(1, "loss", 0),
        ];
        let epoch = |e: u64| {
            format!(
                r#"{{"epoch": {e}, "loss": 1.0, "train_acc": 0.5, "full_graph": {{"chunks": 2, "chunk_runs": [{}]}}}}"#,
                runs.join(",")
            )
        };
        let v = value(&format!(
            r#"{{"epochs": [{}, {}], "micro_batches": []}}"#,
            epoch(1),
            epoch(2)
        ));
        let p = parse_chunks(&v, "fg", Path::new("fg.json"))
            .unwrap()
            .expect("a chunk panel");
        assert_eq!(p.bars.len(), 3);
        assert_eq!(
            p.which,
            "epoch 2, full graph, 2 chunks per layer, 3 chunk runs"
        );
        assert!(parse_peaks(&v, "fg", Path::new("fg.json"))
            .unwrap()
            .is_empty());
    }

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
