// A sandbox's own metrics: `GET /v1/sandboxes/{id}/metrics` (the usage sampler's samples of the
// last hour: CPU in percent of its limit, memory, disk), charted and fetched again every few
// seconds while the tab is shown.

import { useState } from 'preact/hooks';
import type { Api, MetricSample } from './api';
import { Chart } from './charts';
import { Busy, ErrorBox, usePoll } from './ui';

const POLL_MS = 5000;
const MIB = 1 << 20;

export function MetricsPanel({ api, sandbox, visible }: { api: Api; sandbox: string; visible: boolean }) {
  const [samples, setSamples] = useState<MetricSample[] | null>(null);
  const [error, setError] = useState<unknown>(null);

  usePoll(
    async (stopped) => {
      if (!visible) return false;
      try {
        const s = await api.get<MetricSample[]>(`/v1/sandboxes/${encodeURIComponent(sandbox)}/metrics`);
        if (stopped()) return;
        setSamples(s);
        setError(null);
      } catch (e) {
        if (!stopped()) setError(e);
      }
    },
    POLL_MS,
    [api, sandbox, visible],
  );

  if (!samples) return error ? <ErrorBox error={error} /> : <Busy>Loading metrics…</Busy>;
  const xs = samples.map((s) => s.at_ms / 1000);
  return (
    <section>
      <ErrorBox error={error} />
      <div class="charts">
        <Chart title="CPU (% of its limit)" xs={xs} ys={samples.map((s) => s.cpu_pct)} max={100} />
        <Chart title="Memory (MiB)" xs={xs} ys={samples.map((s) => s.memory_bytes / MIB)} />
        <Chart title="Disk used (MiB)" xs={xs} ys={samples.map((s) => (s.disk_used_bytes ?? 0) / MIB)} />
      </div>
      <p class="hint">
        Sampled every few seconds (<code>lizard serve --sample-interval-s</code>); the last hour is kept.
      </p>
    </section>
  );
}
