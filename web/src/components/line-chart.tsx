/**
 * A small line chart in plain SVG: one or more lines over the same steps, the highest value on the axis,
 * and the numbers in text beside it (a chart is read by its figures too, and by screen readers). Steps
 * without a value (null) break the line rather than draw a made-up zero.
 */
export interface Line {
  name: string;
  values: (number | null)[];
  /** A CSS colour. */
  color: string;
}

const WIDTH = 280;
const HEIGHT = 80;

/** The polyline segments of a line, broken where a value is missing. */
function segments(values: (number | null)[], max: number): string[] {
  const step = values.length > 1 ? WIDTH / (values.length - 1) : WIDTH;
  const parts: string[] = [];
  let current: string[] = [];
  values.forEach((v, i) => {
    if (v === null) {
      if (current.length > 0) parts.push(current.join(' '));
      current = [];
      return;
    }
    const y = max === 0 ? HEIGHT : HEIGHT - (v / max) * HEIGHT;
    current.push(`${(i * step).toFixed(1)},${y.toFixed(1)}`);
  });
  if (current.length > 0) parts.push(current.join(' '));
  // A lone point is drawn as a short dash, so it shows.
  return parts.map((p) => (p.includes(' ') ? p : `${p} ${p.replace(/^([\d.]+)/, (x) => String(Number(x) + 2))}`));
}

export function LineChart({
  title,
  lines,
  format,
  summary,
  name,
}: {
  title: string;
  lines: Line[];
  format: (value: number) => string;
  /** The figure shown beside the title (a total, the latest value). */
  summary: string;
  /** `data-chart`, for tests and styles. */
  name: string;
}) {
  const max = Math.max(0, ...lines.flatMap((l) => l.values.filter((v): v is number => v !== null)));
  const empty = lines.every((l) => l.values.every((v) => v === null));
  return (
    <figure class="chart" data-chart={name}>
      <figcaption>
        <span>{title}</span> <strong data-summary>{summary}</strong>
      </figcaption>
      <svg
        viewBox={`-2 -4 ${WIDTH + 4} ${HEIGHT + 8}`}
        preserveAspectRatio="none"
        role="img"
        aria-label={`${title}: ${summary}`}
      >
        <line class="chart-axis" x1="0" y1={HEIGHT} x2={WIDTH} y2={HEIGHT} />
        {lines.map((line) =>
          segments(line.values, max).map((points, i) => (
            <polyline
              key={`${line.name}-${i}`}
              data-line={line.name}
              points={points}
              fill="none"
              stroke={line.color}
              stroke-width="1.5"
              vector-effect="non-scaling-stroke"
            />
          )),
        )}
      </svg>
      <div class="chart-scale">
        <span>{empty ? 'no data' : `max ${format(max)}`}</span>
        {lines.length > 1 && (
          <span class="chart-legend">
            {lines.map((line) => (
              <span key={line.name}>
                <i style={{ background: line.color }} /> {line.name}
              </span>
            ))}
          </span>
        )}
      </div>
    </figure>
  );
}
