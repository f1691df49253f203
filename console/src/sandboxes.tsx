// The sandboxes page: a live list (polled while the tab is visible) with filters by project,
// state and metadata, the lifecycle buttons of each, and the form that creates one.

import { useEffect, useState } from 'preact/hooks';
import { type CreateSandboxRequest, type MetricSample, type SandboxInfo, type TemplateInfo, parseMetadata, query } from './api';
import { LifecycleButtons } from './lifecycle';
import type { Session } from './session';
import { Busy, Empty, ErrorBox, LIFETIMES, Select, StateBadge, age, mib, usePoll } from './ui';

/** The list asks for the latest sample of at most this many running sandboxes. */
const MAX_METRICS = 50;

/** `12% · 85 MiB`: a sample's CPU (of the limit) and memory; `–` without one. */
function nowText(s: MetricSample | undefined): string {
  if (!s) return '–';
  return `${Math.round(s.cpu_pct)}% · ${mib(Math.round(s.memory_bytes / (1 << 20)))}`;
}

/** The states a list can be filtered by. */
const STATES = ['running', 'paused', 'hibernated'] as const;

/** How often the list is fetched again while the page is shown. */
const POLL_MS = 3000;

interface Filters {
  project: string;
  state: string;
  metadata: string;
}

export function SandboxesPage({ session }: { session: Session }) {
  const { api } = session;
  const [filters, setFilters] = useState<Filters>({ project: '', state: '', metadata: '' });
  const [metadataDraft, setMetadataDraft] = useState('');
  const [list, setList] = useState<SandboxInfo[] | null>(null);
  const [listError, setListError] = useState<unknown>(null);
  const [actionError, setActionError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  const [now, setNow] = useState(Date.now());
  const [usageNow, setUsageNow] = useState(new Map<string, MetricSample>());

  usePoll(
    async (stopped) => {
      try {
        // A metadata filter that does not parse is the API's to refuse, with its own message.
        const q = query({ project: filters.project, state: filters.state, metadata: filters.metadata.replace(/\s+/g, '') });
        const l = await api.get<SandboxInfo[]>(`/v1/sandboxes${q}`);
        if (stopped()) return;
        setList(l);
        setListError(null);
        setNow(Date.now());
        // CPU and memory now: each running sandbox's latest sample (of the last 30 s).
        const from = Date.now() - 30_000;
        const latest = await Promise.all(
          l
            .filter((sb) => sb.state === 'running')
            .slice(0, MAX_METRICS)
            .map((sb) =>
              api
                .get<MetricSample[]>(`/v1/sandboxes/${encodeURIComponent(sb.sandbox_id)}/metrics${query({ from })}`)
                .then((s): [string, MetricSample | undefined] => [sb.sandbox_id, s[s.length - 1]])
                .catch((): [string, undefined] => [sb.sandbox_id, undefined]),
            ),
        );
        if (!stopped()) setUsageNow(new Map(latest.filter((e): e is [string, MetricSample] => e[1] !== undefined)));
      } catch (e) {
        if (!stopped()) setListError(e);
      }
    },
    POLL_MS,
    [api, filters.project, filters.state, filters.metadata, tick],
  );

  const refresh = () => setTick((t) => t + 1);
  const set = (k: keyof Filters) => (value: string) => setFilters({ ...filters, [k]: value });
  const filtered = filters.project !== '' || filters.state !== '' || filters.metadata.trim() !== '';

  return (
    <div class="page">
      <h1>Sandboxes</h1>
      <CreateSandbox session={session} />
      <form
        class="filters"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setFilters({ ...filters, metadata: metadataDraft });
        }}
      >
        {session.projects.length > 1 && (
          <Select label="Project" name="filter-project" value={filters.project} options={session.projects} first={['', 'all']} onChange={set('project')} />
        )}
        <Select label="State" name="filter-state" value={filters.state} options={STATES} first={['', 'all']} onChange={set('state')} />
        <label>
          Metadata
          <input
            name="filter-metadata"
            placeholder="key=value,… then Enter"
            value={metadataDraft}
            onInput={(e) => setMetadataDraft(e.currentTarget.value)}
            onChange={(e) => setFilters({ ...filters, metadata: e.currentTarget.value })}
          />
        </label>
      </form>
      <ErrorBox error={listError} />
      <ErrorBox error={actionError} onClose={() => setActionError(null)} />
      {list === null ? (
        listError ? null : <Busy>Loading sandboxes…</Busy>
      ) : list.length === 0 ? (
        filtered ? (
          <Empty title="No sandbox matches these filters.">Clear a filter to see more.</Empty>
        ) : (
          <Empty title="No sandboxes yet.">Create one above: it starts in a moment, then run code in it.</Empty>
        )
      ) : (
        <table class="list sandboxes">
          <thead>
            <tr>
              <th>Sandbox</th>
              <th>State</th>
              <th>Project</th>
              <th>Template</th>
              <th>Age</th>
              <th>CPU, memory now</th>
              <th>Limits</th>
              <th>Metadata</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {list.map((sb) => (
              <tr key={sb.sandbox_id} data-sandbox={sb.sandbox_id}>
                <td>
                  <a href={`#/sandboxes/${encodeURIComponent(sb.sandbox_id)}`} class="mono">
                    {sb.sandbox_id}
                  </a>
                </td>
                <td>
                  <StateBadge state={sb.state} />
                </td>
                <td>{sb.project}</td>
                <td>{sb.template}</td>
                <td title={new Date(sb.created_at_ms).toISOString()}>{age(sb.created_at_ms, now)}</td>
                <td class="now">{nowText(usageNow.get(sb.sandbox_id))}</td>
                <td class="dim">
                  {(sb.limits.cpu_millicores / 1000).toFixed(1)} CPU, {mib(sb.limits.memory_mb)}
                </td>
                <td class="mono dim">
                  {Object.entries(sb.metadata)
                    .map(([k, v]) => `${k}=${v}`)
                    .join(', ')}
                </td>
                <td>
                  <LifecycleButtons api={api} sb={sb} onDone={refresh} onError={setActionError} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

/** The create form: template (the ready ones the key may use), project (for a key that sees several), metadata. */
function CreateSandbox({ session }: { session: Session }) {
  const { api } = session;
  const [templates, setTemplates] = useState<TemplateInfo[]>([]);
  const [template, setTemplate] = useState('code-interpreter-v1');
  const [project, setProject] = useState(session.projects.length === 1 ? session.projects[0]! : '');
  const [metadata, setMetadata] = useState('');
  const [lifetime, setLifetime] = useState('30 min');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);

  useEffect(() => {
    api
      .get<{ templates: TemplateInfo[] }>('/v1/templates')
      .then((t) => setTemplates(t.templates.filter((x) => x.state === 'ready')))
      .catch(() => setTemplates([]));
  }, [api]);

  const submit = async (e: Event) => {
    e.preventDefault();
    setError(null);
    setBusy(true);
    try {
      const body: CreateSandboxRequest = { template, metadata: parseMetadata(metadata), timeout_ms: LIFETIMES[lifetime]! };
      if (project) body.project = project;
      const sb = await api.json<SandboxInfo>('POST', '/v1/sandboxes', body);
      location.hash = `#/sandboxes/${encodeURIComponent(sb.sandbox_id)}`;
    } catch (err) {
      setError(err);
      setBusy(false);
    }
  };

  const names = [...new Set(['code-interpreter-v1', ...templates.map((t) => t.name)])];
  return (
    <form class="card create" onSubmit={submit}>
      <Select label="Template" name="template" value={template} options={names} onChange={setTemplate} />
      {session.projects.length > 1 && (
        <Select label="Project" name="project" value={project} options={session.projects} first={['', 'default']} onChange={setProject} />
      )}
      <Select label="Timeout" name="lifetime" value={lifetime} options={Object.keys(LIFETIMES)} onChange={setLifetime} />
      <label>
        Metadata
        <input name="metadata" placeholder="key=value,…" value={metadata} onInput={(e) => setMetadata(e.currentTarget.value)} />
      </label>
      <button type="submit" disabled={busy}>
        {busy ? 'Starting sandbox…' : 'Create sandbox'}
      </button>
      {busy && <Busy>Starting a sandbox: its kernels come up in a moment.</Busy>}
      <ErrorBox error={error} />
    </form>
  );
}
