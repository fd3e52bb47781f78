//! `herd eval compare --plot FILE.png`: per-chunk accuracy of both runs (top) and their latency
//! distributions (bottom: each run's total durations sorted, i.e. its quantile curve). A in blue,
//! B in red. No text is drawn, so no font (fontconfig, TTF) is needed on headless machines; the
//! printed table carries the numbers.

use anyhow::anyhow;
use plotters::prelude::*;

use super::compare::Report;
use super::record::Record;

/// Chunks the scored items are split into for the accuracy curve.
const CHUNKS: usize = 10;

/// Accuracy per chunk of scored verdicts, in item order, for side A (`true`) or B.
pub fn chunk_accuracy(rep: &Report, side_a: bool) -> Vec<f64> {
    let scored: Vec<bool> = rep
        .verdicts
        .iter()
        .filter_map(|v| if side_a { v.a } else { v.b })
        .collect();
    if scored.is_empty() {
        return Vec::new();
    }
    let size = scored.len().div_ceil(CHUNKS);
    scored
        .chunks(size)
        .map(|c| c.iter().filter(|x| **x).count() as f64 / c.len() as f64)
        .collect()
}

/// Total durations in ms of the rows without error, sorted.
pub fn latencies(rows: &[Record]) -> Vec<f64> {
    let mut v: Vec<f64> = rows
        .iter()
        .filter(|r| r.error.is_none())
        .map(|r| r.total_duration as f64 / 1e6)
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

pub fn draw(
    path: &std::path::Path,
    rep: &Report,
    a: &[Record],
    b: &[Record],
) -> anyhow::Result<()> {
    let e = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let root = BitMapBackend::new(path, (800, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (top, bottom) = root.split_vertically(300);

    let (acc_a, acc_b) = (chunk_accuracy(rep, true), chunk_accuracy(rep, false));
    let n = acc_a.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&top)
        .margin(10)
        .build_cartesian_2d(0f64..(n - 1.0).max(1.0), 0f64..1f64)
        .map_err(|x| e(&x))?;
    for (acc, color) in [(&acc_a, BLUE), (&acc_b, RED)] {
        let pts = acc.iter().enumerate().map(|(i, y)| (i as f64, *y));
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(|x| e(&x))?;
    }

    let (lat_a, lat_b) = (latencies(a), latencies(b));
    let max = lat_a.iter().chain(&lat_b).cloned().fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&bottom)
        .margin(10)
        .build_cartesian_2d(0f64..1f64, 0f64..max)
        .map_err(|x| e(&x))?;
    for (lat, color) in [(&lat_a, BLUE), (&lat_b, RED)] {
        let len = (lat.len().max(2) - 1) as f64;
        let pts = lat.iter().enumerate().map(|(i, y)| (i as f64 / len, *y));
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(|x| e(&x))?;
    }
    for area in [&top, &bottom] {
        let (w, h) = area.dim_in_pixel();
        area.draw(&Rectangle::new(
            [(5, 5), (w as i32 - 5, h as i32 - 5)],
            BLACK,
        ))
        .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::compare::Verdict;

    fn report(verdicts: &[(Option<bool>, Option<bool>)]) -> Report {
        let r: Report = serde_json::from_value(serde_json::json!({
            "items": 0, "scored": 0, "errors_a": 0, "errors_b": 0, "empty_a": 0, "empty_b": 0,
            "correct_a": 0, "correct_b": 0, "both_correct": 0, "both_wrong": 0, "a_only": 0,
            "b_only": 0, "mcnemar_p": 1.0, "predictions_identical": 0, "responses_identical": 0,
            "sources_a": [], "sources_b": [], "verdicts": []
        }))
        .unwrap();
        Report {
            verdicts: verdicts
                .iter()
                .enumerate()
                .map(|(i, (a, b))| Verdict {
                    id: i.into(),
                    repeat: 0,
                    a: *a,
                    b: *b,
                    identical: false,
                })
                .collect(),
            ..r
        }
    }

    #[test]
    fn chunks_and_png_without_fonts() {
        let mut v = vec![(Some(true), Some(false)); 20];
        v.push((None, None));
        v[0] = (Some(false), Some(true));
        let rep = report(&v);
        let acc = chunk_accuracy(&rep, true);
        assert_eq!(acc.len(), 10);
        assert_eq!((acc[0], acc[1]), (0.5, 1.0));
        assert_eq!(chunk_accuracy(&rep, false)[0], 0.5);
        assert!(chunk_accuracy(&report(&[]), true).is_empty());

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.png");
        draw(&p, &rep, &[], &[]).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // Blue (A) and red (B) curves are in the picture.
        let img = image_pixels(&bytes);
        assert!(img.contains(&[0, 0, 255]) && img.contains(&[255, 0, 0]));
    }

    /// RGB triples of a PNG (plotters' encoder writes 8-bit RGB).
    fn image_pixels(png: &[u8]) -> Vec<[u8; 3]> {
        let img = image::load_from_memory(png).unwrap().to_rgb8();
        img.pixels().map(|p| p.0).collect()
    }
}
