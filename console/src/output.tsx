// A cell's output as it arrived: stdout and stderr text, rich results (images, HTML, JSON, text)
// and errors with their traceback.
//
// HTML from a sandbox is shown only in an `<iframe sandbox>` without `allow-scripts` or
// `allow-same-origin`: nothing in it runs, and it has an opaque origin, so it can reach neither
// this page's DOM nor its session storage, where the API key is (docs/SECURITY.md, "Web console").
// SVG is shown as an `<img>`, where its scripts never run either.

import type { ExecutionResult } from './api';
import { ErrorBox } from './ui';

export type Output =
  | { kind: 'stdout' | 'stderr'; text: string }
  | { kind: 'result'; result: ExecutionResult }
  | { kind: 'error'; name: string; value: string; traceback: string }
  | { kind: 'failure'; error: unknown };

/** Add a streamed frame's output to `outputs` (consecutive text of one stream is joined). */
export function addFrame(outputs: Output[], frame: Record<string, unknown>): Output[] {
  switch (frame.type) {
    case 'stdout':
    case 'stderr': {
      const kind = frame.type;
      const text = String(frame.text ?? '');
      const last = outputs[outputs.length - 1];
      if (last && last.kind === kind) return [...outputs.slice(0, -1), { kind, text: last.text + text }];
      return [...outputs, { kind, text }];
    }
    case 'result':
      return [...outputs, { kind: 'result', result: frame as unknown as ExecutionResult }];
    case 'error':
      return [
        ...outputs,
        { kind: 'error', name: String(frame.name ?? ''), value: String(frame.value ?? ''), traceback: String(frame.traceback ?? '') },
      ];
    default:
      return outputs;
  }
}

export function Outputs({ outputs }: { outputs: Output[] }) {
  return (
    <div class="outputs">
      {outputs.map((o, i) => (
        <OutputView key={i} o={o} />
      ))}
    </div>
  );
}

function OutputView({ o }: { o: Output }) {
  switch (o.kind) {
    case 'stdout':
      return <pre class="stdout">{o.text}</pre>;
    case 'stderr':
      return <pre class="stderr">{o.text}</pre>;
    case 'error':
      return (
        <div class="cell-error">
          <strong>
            {o.name}
            {o.value ? `: ${o.value}` : ''}
          </strong>
          {o.traceback && <pre class="traceback">{o.traceback}</pre>}
        </div>
      );
    case 'failure':
      return <ErrorBox error={o.error} />;
    case 'result':
      return <ResultView r={o.result} />;
  }
}

function ResultView({ r }: { r: ExecutionResult }) {
  const d = r.data;
  const str = (mime: string) => (typeof d[mime] === 'string' ? (d[mime] as string) : null);
  const cls = r.is_main_result ? 'result main' : 'result';
  const png = str('image/png');
  if (png !== null) return <img class={cls} alt="image/png result" src={`data:image/png;base64,${png}`} />;
  const jpeg = str('image/jpeg');
  if (jpeg !== null) return <img class={cls} alt="image/jpeg result" src={`data:image/jpeg;base64,${jpeg}`} />;
  const svg = str('image/svg+xml');
  if (svg !== null) return <img class={cls} alt="image/svg+xml result" src={`data:image/svg+xml;charset=utf-8,${encodeURIComponent(svg)}`} />;
  const html = str('text/html');
  if (html !== null) return <HtmlResult html={html} main={r.is_main_result} />;
  if ('application/json' in d) return <pre class={`${cls} json`}>{JSON.stringify(d['application/json'], null, 2)}</pre>;
  const text = str('text/plain') ?? str('text/markdown') ?? str('text/latex');
  if (text !== null) return <pre class={cls}>{text}</pre>;
  return <pre class={`${cls} dim`}>{`(a result of type ${Object.keys(d).join(', ') || 'nothing'})`}</pre>;
}

/** Readable defaults for a result's HTML (a DataFrame's table), ahead of its own styles. */
const FRAME_STYLE =
  '<!doctype html><meta charset="utf-8"><style>body{margin:6px;font:13px system-ui,sans-serif;color:#1c2024}' +
  'table{border-collapse:collapse}th,td{border:1px solid #dde1e6;padding:3px 8px;text-align:right}' +
  'thead th{background:#f6f7f9}</style>';

/** HTML in an inert frame: no scripts, an opaque origin (see the top of this file). */
function HtmlResult({ html, main }: { html: string; main: boolean }) {
  // The frame cannot be measured from here (its origin is not ours): a height from its rows.
  const rows = (html.match(/<tr[\s>]/gi) ?? []).length;
  const height = Math.min(480, Math.max(80, rows * 26 + 40));
  return (
    <iframe
      class={main ? 'result main html' : 'result html'}
      title="HTML result"
      sandbox=""
      referrerpolicy="no-referrer"
      srcdoc={FRAME_STYLE + html}
      style={{ height: `${height}px` }}
    />
  );
}
