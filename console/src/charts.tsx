// Charts of the console (uPlot): one measure over time, as bars (usage per bucket) or a line
// (a sandbox's samples).

import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

/** A measure for reading: whole numbers as they are, small ones with two significant digits. */
export function round(n: number): string {
  if (Number.isInteger(n)) return String(n);
  if (Math.abs(n) >= 100) return n.toFixed(0);
  if (Math.abs(n) >= 1) return n.toFixed(2);
  return String(Number(n.toPrecision(2)));
}

/** A minute at least: uPlot spreads one point, or a few seconds of them, over years. */
function xRange(xs: number[]): { range?: [number, number] } {
  if (xs.length === 0) return {};
  const lo = xs[0]!;
  const hi = xs[xs.length - 1]!;
  return hi - lo < 60 ? { range: [hi - 60, hi + 5] } : {};
}

/**
 * `ys` at the times `xs` (seconds since the epoch). `bars`: one bar a point (else a line);
 * `total`: the caption gives the sum (else the last value); `max`: the y axis's top, when fixed.
 */
export function Chart({
  title,
  xs,
  ys,
  bars = false,
  total = false,
  max,
}: {
  title: string;
  xs: number[];
  ys: number[];
  bars?: boolean;
  total?: boolean;
  max?: number;
}) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (!box.current) return;
    const plot = new uPlot(
      {
        title,
        width: 560,
        height: 200,
        legend: { show: false },
        scales: { x: { time: true, ...xRange(xs) }, y: { range: (_u, _min, top) => [0, max ?? (top > 0 ? top * 1.1 : 1)] } },
        series: [
          {},
          {
            label: title,
            stroke: '#2f7d4f',
            fill: 'rgba(47,125,79,0.35)',
            ...(bars ? { paths: uPlot.paths.bars!({ size: [0.7, 40] }) } : {}),
          },
        ],
        axes: [{}, { size: 70, values: (_u, vals) => vals.map(round) }],
      },
      [xs, ys],
      box.current,
    );
    return () => plot.destroy();
  }, [title, bars, max, xs.join(), ys.join()]);
  const caption = total ? `${round(ys.reduce((a, b) => a + b, 0))} in the range` : ys.length ? `${round(ys[ys.length - 1]!)} now` : 'no samples yet';
  return (
    <figure class="card chart" data-measure={title}>
      <div ref={box} />
      <figcaption class="dim">
        {title}: {caption}
      </figcaption>
    </figure>
  );
}
