import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

/** One series of a chart: its label and values (null: no data in that bucket). */
export interface Series {
  label: string;
  values: (number | null)[];
  /** A CSS class-free colour: uPlot draws on a canvas. */
  stroke: string;
}

/** A small time chart drawn with uPlot from data the server aggregated. */
export function Chart({ title, t, series, testid }: { title: string; t: number[]; series: Series[]; testid: string }) {
  const el = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const at = el.current;
    if (!at) return;
    const plot = new uPlot(
      {
        title,
        width: Math.max(300, at.clientWidth || 480),
        height: 180,
        scales: { x: { time: true } },
        axes: [{}, { size: 50 }],
        series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.stroke, width: 1.5, spanGaps: false }))],
      },
      [t.map((x) => x / 1000), ...series.map((s) => s.values)] as uPlot.AlignedData,
      at,
    );
    return () => plot.destroy();
  }, [title, t, series]);
  return <div class="chart" data-testid={testid} ref={el} />;
}
