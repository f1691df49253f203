// Usage of a project over time, from `GET /v1/projects/{p}/usage?from=&to=` only: one call per
// bucket of the chosen range (the charts: CPU-seconds, memory GiB-hours, executions, volume
// GiB-hours, drawn with uPlot) and one for the whole range (the table per sandbox, and its CSV).

import { useEffect, useState } from 'preact/hooks';
import { type ProjectUsage, query } from './api';
import type { Session } from './session';
import { Chart, round } from './charts';
import { Busy, Empty, ErrorBox, Select, saveBlob } from './ui';

const RANGES: Record<string, { label: string; bucketMs: number; buckets: number }> = {
  hour: { label: 'last hour', bucketMs: 5 * 60_000, buckets: 12 },
  day: { label: 'last 24 hours', bucketMs: 3_600_000, buckets: 24 },
  week: { label: 'last 7 days', bucketMs: 6 * 3_600_000, buckets: 28 },
};

/** The charted measures: a name, its unit, and how to read it from a bucket's totals. */
const MEASURES: [string, (u: ProjectUsage) => number][] = [
  ['CPU-seconds', (u) => u.totals.cpu_seconds],
  ['Memory GiB-hours', (u) => u.totals.memory_gib_seconds / 3600],
  ['Executions', (u) => u.totals.executions],
  ['Volume GiB-hours', (u) => u.totals.volume_gib_hours],
];

interface Loaded {
  starts: number[];
  buckets: ProjectUsage[];
  whole: ProjectUsage;
}

export function UsagePage({ session }: { session: Session }) {
  const { api } = session;
  // Projects made since sign-in count too (an admin's `default` appears with its first sandbox).
  const [projects, setProjects] = useState(session.projects);
  const [project, setProject] = useState(session.projects[0] ?? '');
  useEffect(() => {
    api
      .get<string[]>('/v1/projects')
      .then((p) => {
        setProjects(p);
        setProject((cur) => (cur && p.includes(cur) ? cur : (p[0] ?? '')));
      })
      .catch(setError);
  }, [api]);
  const [range, setRange] = useState('hour');
  const [data, setData] = useState<Loaded | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);

  useEffect(() => {
    if (!project) return;
    let stop = false;
    setData(null);
    setError(null);
    const r = RANGES[range]!;
    // Buckets end at the next whole bucket, so the last one is the one now running.
    const end = Math.ceil(Date.now() / r.bucketMs) * r.bucketMs;
    const starts = Array.from({ length: r.buckets }, (_, i) => end - (r.buckets - i) * r.bucketMs);
    const path = (from: number, to: number) => `/v1/projects/${encodeURIComponent(project)}/usage${query({ from, to })}`;
    Promise.all([api.get<ProjectUsage>(path(starts[0]!, end)), ...starts.map((s) => api.get<ProjectUsage>(path(s, s + r.bucketMs)))])
      .then(([whole, ...buckets]) => !stop && setData({ starts, buckets, whole: whole! }))
      .catch((e) => !stop && setError(e));
    return () => {
      stop = true;
    };
  }, [api, project, range, tick]);

  if (projects.length === 0) {
    return (
      <div class="page">
        <h1>Usage</h1>
        <Empty title="No projects yet.">Usage is per project: create a sandbox (in the default project) or a project first.</Empty>
      </div>
    );
  }
  return (
    <div class="page">
      <h1>Usage</h1>
      <div class="filters">
        <Select label="Project" name="usage-project" value={project} options={projects} onChange={setProject} />
        <label>
          Range
          <select name="usage-range" value={range} onChange={(e) => setRange(e.currentTarget.value)}>
            {Object.entries(RANGES).map(([k, r]) => (
              <option key={k} value={k}>
                {r.label}
              </option>
            ))}
          </select>
        </label>
        <button type="button" class="secondary small" onClick={() => setTick((t) => t + 1)}>
          Refresh
        </button>
      </div>
      <ErrorBox error={error} />
      {!data ? (
        error ? null : <Busy>Loading usage…</Busy>
      ) : (
        <>
          <div class="charts">
            {MEASURES.map(([name, read]) => (
              <Chart key={name} title={name} xs={data.starts.map((s) => s / 1000)} ys={data.buckets.map(read)} bars total />
            ))}
          </div>
          <SandboxTable usage={data.whole} />
        </>
      )}
    </div>
  );
}

const COLUMNS: [string, (s: ProjectUsage['sandboxes'][number]) => number | string][] = [
  ['sandbox_id', (s) => s.sandbox_id],
  ['running_seconds', (s) => s.running_seconds],
  ['paused_seconds', (s) => s.paused_seconds],
  ['hibernated_seconds', (s) => s.hibernated_seconds ?? 0],
  ['cpu_seconds', (s) => s.cpu_seconds],
  ['memory_gib_hours', (s) => s.memory_gib_seconds / 3600],
  ['executions', (s) => s.executions],
  ['execution_cpu_seconds', (s) => s.execution_cpu_seconds],
  ['max_execution_peak_rss_bytes', (s) => s.max_execution_peak_rss_bytes],
];

function csvCell(v: number | string): string {
  const s = String(v);
  return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

function SandboxTable({ usage }: { usage: ProjectUsage }) {
  const rows = usage.sandboxes;
  const exportCsv = () => {
    const lines = [COLUMNS.map(([h]) => h).join(','), ...rows.map((s) => COLUMNS.map(([, f]) => csvCell(f(s))).join(','))];
    saveBlob(new Blob([`${lines.join('\n')}\n`], { type: 'text/csv' }), `usage-${usage.project}-${new Date(usage.from_ms).toISOString().slice(0, 16)}.csv`);
  };
  return (
    <section>
      <div class="section-head">
        <h2>Per sandbox</h2>
        <button type="button" class="secondary small" disabled={rows.length === 0} onClick={exportCsv}>
          Export CSV
        </button>
      </div>
      {rows.length === 0 ? (
        <Empty title="No sandbox ran in this project in this range.">Create one on the Sandboxes page.</Empty>
      ) : (
        <table class="list usage-table">
          <thead>
            <tr>
              {COLUMNS.map(([h]) => (
                <th key={h}>{h.replace(/_/g, ' ')}</th>
              ))}
            </tr>
          </thead>
          <tbody>
            {rows.map((s) => (
              <tr key={s.sandbox_id} data-sandbox={s.sandbox_id}>
                {COLUMNS.map(([h, f]) => {
                  const v = f(s);
                  return (
                    <td key={h} class={typeof v === 'string' ? 'mono' : ''}>
                      {typeof v === 'number' ? round(v) : v}
                    </td>
                  );
                })}
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
