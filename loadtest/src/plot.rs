//! The report's picture: Applications Ready over time during convergence, one line per replica
//! and one for all, as SVG.

use std::collections::BTreeMap;

use plotters::prelude::*;

/// Colours of the replicas' lines, in turn (the total is black).
const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// The cumulative count of `times` (seconds, any order): `(t, n)` steps starting at `(0, 0)`.
pub fn steps(times: &[f64]) -> Vec<(f64, f64)> {
    let mut sorted: Vec<f64> = times.iter().copied().filter(|t| t.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let mut out = vec![(0.0, 0.0)];
    for (i, t) in sorted.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let (before, after) = (i as f64, (i + 1) as f64);
        out.push((*t, before));
        out.push((*t, after));
    }
    out
}

/// The SVG of `ready` (by replica: when each of its Applications first converged, seconds after
/// the first create), titled `title`.
pub fn ready_svg(title: &str, ready: &BTreeMap<String, Vec<f64>>) -> Result<String, String> {
    let all: Vec<f64> = ready.values().flatten().copied().collect();
    let end = all.iter().copied().fold(1.0_f64, f64::max) * 1.05;
    #[allow(clippy::cast_precision_loss)]
    let top = (all.len().max(1) as f64) * 1.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..end, 0.0..top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("seconds after the first create")
            .y_desc("Applications Synced, Healthy and Ready")
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(LineSeries::new(steps(&all), BLACK.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(format!("all ({})", all.len()))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
        for (i, (replica, times)) in ready.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(steps(times), colour.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(format!("{replica} ({})", times.len()))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_count_up_at_each_time() {
        assert_eq!(steps(&[2.0, 1.0]), [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (2.0, 1.0), (2.0, 2.0)]);
        assert_eq!(steps(&[]), [(0.0, 0.0)]);
    }

    #[test]
    fn the_svg_has_a_line_and_a_legend_entry_per_replica_and_for_all() {
        let ready: BTreeMap<String, Vec<f64>> =
            [("ksync-0".to_string(), vec![1.0, 2.5]), ("ksync-1".to_string(), vec![1.5])].into();
        let svg = ready_svg("Ready over time", &ready).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        for label in ["Ready over time", "all (3)", "ksync-0 (2)", "ksync-1 (1)", "seconds after the first create"] {
            assert!(svg.contains(label), "no {label:?}");
        }
        // Each replica's colour draws its line and its legend mark; the total is black.
        let svg = svg.to_ascii_uppercase();
        for c in &COLOURS[..2] {
            let stroke = format!("STROKE=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
            assert_eq!(svg.matches(&stroke).count(), 2, "{stroke}");
        }
        assert!(!svg.contains(&format!("#{:02X}{:02X}{:02X}", COLOURS[2].0, COLOURS[2].1, COLOURS[2].2)));
    }
}
