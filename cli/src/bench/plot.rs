//! An SVG of each job, drawn with plotters: latency by percentile on a
//! "nines" axis (50%, 90%, 99%, 99.9%, ... evenly spaced, so the tail is
//! as wide as the median) against latency on a log axis, and reads and
//! writes per second over time; one line per engine (and one per engine's
//! syncs), the legend beside the charts, not over them.

use anyhow::anyhow;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::JobResult;
use super::sample::Sample;

const ROW: u32 = 300;
const CHART: u32 = 440;
const LEGEND: u32 = 230;
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// The percentile at position `x` of the nines axis, as a label. The
/// axis puts percentile p at -log10(1 - p/100): 90% at 1, 99% at 2.
fn nines_label(x: f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-x));
    let text = format!("{p:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}%")
}

/// One line of the latency chart: (nines position, microseconds).
struct Curve {
    label: String,
    points: Vec<(f64, f64)>,
}

/// Points of a latency histogram on the nines axis, up to the last nine
/// the sample can resolve (1 in `n`), in steps of a twentieth of a nine.
fn curve(label: String, h: &hdrhistogram::Histogram<u64>) -> Option<Curve> {
    if h.is_empty() {
        return None;
    }
    let last = (h.len() as f64).log10().min(6.0);
    let steps = (last * 20.0).floor() as u32;
    let points = (0..=steps)
        .map(|i| {
            let x = f64::from(i) / 20.0;
            let q = 1.0 - 10f64.powf(-x);
            (x, h.value_at_quantile(q).max(1) as f64 / 1000.0)
        })
        .collect();
    Some(Curve { label, points })
}

fn curves(samples: &[Sample]) -> Vec<Curve> {
    let mut out: Vec<Curve> = samples
        .iter()
        .filter_map(|s| curve(s.engine.clone(), &s.hist))
        .collect();
    out.extend(
        samples
            .iter()
            .filter_map(|s| curve(format!("{} syncs", s.engine), &s.sync.hist)),
    );
    out
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn e<E: std::fmt::Debug>(err: E) -> anyhow::Error {
    anyhow!("plot: {err:?}")
}

fn latency_chart(area: &Area<'_>, title: &str, curves: &[Curve]) -> anyhow::Result<()> {
    let xmax = curves
        .iter()
        .flat_map(|c| c.points.last().map(|p| p.0))
        .fold(1.0f64, f64::max)
        .ceil();
    let ys = curves.iter().flat_map(|c| c.points.iter().map(|p| p.1));
    let (lo, hi) = ys.fold((f64::MAX, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (lo, hi) = if hi > 0.0 {
        (lo / 1.5, hi * 1.5)
    } else {
        (0.1, 10.0)
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..xmax, (lo..hi).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("percentile (nines: each step 10x rarer)")
        .y_desc("latency (µs, log)")
        .x_labels(xmax as usize + 1)
        .x_label_formatter(&|x| nines_label(*x))
        .y_label_formatter(&|y| short(*y))
        .draw()
        .map_err(e)?;
    for (i, c) in curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(c.points.clone(), color.stroke_width(2)))
            .map_err(e)?;
    }
    Ok(())
}

fn throughput_chart(area: &Area<'_>, title: &str, samples: &[Sample]) -> anyhow::Result<()> {
    let tick = super::sample::TICK.as_secs_f64();
    let xmax = samples
        .iter()
        .map(|s| s.iops_over_time.len() as f64 * tick)
        .fold(tick, f64::max);
    let ymax = samples
        .iter()
        .flat_map(|s| s.iops_over_time.iter().copied())
        .fold(1.0f64, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("seconds measured")
        .y_desc("reads + writes per second")
        .y_label_formatter(&|y| short(*y))
        .draw()
        .map_err(e)?;
    for (i, s) in samples.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        // Each rate is drawn at the middle of its tick.
        let points = s
            .iops_over_time
            .iter()
            .enumerate()
            .map(|(k, &v)| ((k as f64 + 0.5) * tick, v));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(e)?;
    }
    Ok(())
}

fn legend(area: &Area<'_>, labels: &[String]) -> anyhow::Result<()> {
    for (i, label) in labels.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let y = 50 + 20 * i as i32;
        area.draw(&PathElement::new(
            vec![(8, y), (34, y)],
            color.stroke_width(3),
        ))
        .map_err(e)?;
        area.draw(&Text::new(
            label.clone(),
            (42, y - 7),
            ("sans-serif", 13).into_font(),
        ))
        .map_err(e)?;
    }
    Ok(())
}

/// Renders every job as a row: the latency chart, the throughput chart
/// and the legend.
pub fn svg(results: &[JobResult]) -> anyhow::Result<String> {
    let rows = results.len().max(1) as u32;
    let mut out = String::new();
    {
        let root =
            SVGBackend::with_string(&mut out, (2 * CHART + LEGEND, rows * ROW)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        for (area, r) in root.split_evenly((rows as usize, 1)).iter().zip(results) {
            let (charts, side) = area.split_horizontally(2 * CHART);
            let (left, right) = charts.split_horizontally(CHART);
            let lat = curves(&r.samples);
            latency_chart(
                &left,
                &format!("{}: latency by percentile", r.job.name),
                &lat,
            )?;
            throughput_chart(&right, &format!("{}: throughput", r.job.name), &r.samples)?;
            // The latency chart's lines are the engines, then their
            // syncs; the throughput chart's are the engines, in the same
            // colours.
            let labels: Vec<String> = lat.into_iter().map(|c| c.label).collect();
            legend(&side, &labels)?;
        }
        root.present().map_err(e)?;
    }
    Ok(out)
}

/// A number in a few characters: 1.5k, 2M, 0.25.
fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let t = format!("{v:.2}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nines_axis_spaces_each_nine_evenly() {
        assert_eq!(nines_label(0.0), "0%");
        assert_eq!(nines_label(1.0), "90%");
        assert_eq!(nines_label(2.0), "99%");
        assert_eq!(nines_label(4.0), "99.99%");
        assert_eq!(short(1500.0), "1.5k");
        assert_eq!(short(0.25), "0.25");
    }

    #[test]
    fn a_curve_stops_at_the_last_nine_its_samples_resolve() {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1_000_000, 3).unwrap();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let c = curve("x".into(), &h).unwrap();
        // 1000 samples resolve 99.9%: three nines, no further.
        assert_eq!(c.points.last().unwrap().0, 3.0);
        assert!(c.points.windows(2).all(|w| w[0].1 <= w[1].1));
        assert!(curve("x".into(), &hdrhistogram::Histogram::<u64>::new(3).unwrap()).is_none());
    }
}
