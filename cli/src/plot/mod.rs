//! `espalier plot`: charts from the JSON that `espalier train --json`, `partition --json`
//! and `bench --json` write, as one SVG or PNG.
//!
//! Each file's kind is read from its keys: a training run (`epochs` and `micro_batches`)
//! gives loss and accuracy curves per epoch and the peak memory of its micro-batches; a
//! partition report (`micro_batches` alone) the peak memory; a benchmark (`runs`) one
//! stacked bar of phase times per run. Panels appear for what the files hold; runs are
//! overlaid with a legend from `--label` or the file names. Text is drawn with a font that
//! ships inside the binary, so no system font library is needed.

mod data;
mod panels;
mod style;

use std::path::{Path, PathBuf};

use clap::Args;
use plotters::prelude::*;

use espalier::error::{Error, Result};

use data::{read_into, Plots};
use panels::render;
use style::register_font;

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
}
