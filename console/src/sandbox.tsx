// One sandbox: its state and lifecycle buttons (kept current by polling `GET /v1/sandboxes/{id}`),
// and the cell runner on its contexts while it is running.

import { useEffect, useState } from 'preact/hooks';
import { type Api, ApiError, type SandboxInfo } from './api';
import { LifecycleButtons } from './lifecycle';
import { FileBrowser } from './files';
import { MetricsPanel } from './metrics';
import { CellRunner } from './notebook';
import { TerminalPanel } from './terminal';
import type { Session } from './session';
import { Busy, Empty, ErrorBox, LIFETIMES, StateBadge, age, mib, usePoll } from './ui';

const POLL_MS = 3000;

const TABS = [
  ['code', 'Code'],
  ['files', 'Files'],
  ['terminal', 'Terminal'],
  ['metrics', 'Metrics'],
] as const;
type Tab = (typeof TABS)[number][0];

/** Set the timeout to a lifetime from now (`POST /v1/sandboxes/{id}/timeout`). */
function ExtendTimeout({
  api,
  id,
  onDone,
  onError,
}: {
  api: Api;
  id: string;
  onDone: (sb: SandboxInfo) => void;
  onError: (e: unknown) => void;
}) {
  const [lifetime, setLifetime] = useState('30 min');
  const [busy, setBusy] = useState(false);
  const set = async () => {
    setBusy(true);
    try {
      onDone(await api.json<SandboxInfo>('POST', `/v1/sandboxes/${encodeURIComponent(id)}/timeout`, { timeout_ms: LIFETIMES[lifetime]! }));
    } catch (e) {
      onError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <span class="extend">
      <select name="extend" aria-label="New timeout" value={lifetime} onChange={(e) => setLifetime(e.currentTarget.value)}>
        {Object.keys(LIFETIMES).map((l) => (
          <option key={l} value={l}>
            {l} from now
          </option>
        ))}
      </select>
      <button type="button" class="secondary small" disabled={busy} onClick={set}>
        Set timeout
      </button>
    </span>
  );
}

export function SandboxPage({ session, id, tab = 'code' }: { session: Session; id: string; tab?: string }) {
  const { api } = session;
  const path = `/v1/sandboxes/${encodeURIComponent(id)}`;
  const [sb, setSb] = useState<SandboxInfo | null>(null);
  const [gone, setGone] = useState<unknown>(null);
  const [error, setError] = useState<unknown>(null);
  const shown: Tab = TABS.some(([t]) => t === tab) ? (tab as Tab) : 'code';
  // The files tab lists its folder once it was first shown.
  const [visited, setVisited] = useState<Set<Tab>>(new Set());
  useEffect(() => {
    if (!visited.has(shown)) setVisited(new Set([...visited, shown]));
  }, [shown]);

  usePoll(
    async (stopped) => {
      try {
        const info = await api.get<SandboxInfo>(path);
        if (!stopped()) setSb(info);
      } catch (e) {
        if (stopped()) return;
        if (e instanceof ApiError && e.status === 404) {
          setGone(e);
          return false;
        }
        setError(e);
      }
    },
    POLL_MS,
    [api, path],
  );

  if (gone) {
    return (
      <div class="page">
        <ErrorBox error={gone} />
        <Empty title="This sandbox is not there.">
          It was killed, or it belongs to a project this key does not see. <a href="#/sandboxes">Back to the sandboxes</a>.
        </Empty>
      </div>
    );
  }
  if (!sb) {
    return <div class="page">{error ? <ErrorBox error={error} /> : <Busy>Loading the sandbox…</Busy>}</div>;
  }
  return (
    <div class="page">
      <div class="sandbox-head">
        <h1 class="mono">{sb.sandbox_id}</h1>
        <StateBadge state={sb.state} />
        <LifecycleButtons
          api={api}
          sb={sb}
          onDone={(info) => {
            if (info) setSb(info);
            else location.hash = '#/sandboxes';
          }}
          onError={setError}
        />
      </div>
      <dl class="facts">
        <dt>Project</dt>
        <dd>{sb.project}</dd>
        <dt>Template</dt>
        <dd>{sb.template}</dd>
        <dt>Age</dt>
        <dd>{age(sb.created_at_ms)}</dd>
        <dt>Limits</dt>
        <dd>
          {(sb.limits.cpu_millicores / 1000).toFixed(1)} CPU, {mib(sb.limits.memory_mb)} memory, {mib(sb.limits.disk_mb)} disk
        </dd>
        <dt>Timeout</dt>
        <dd>
          {sb.state === 'running' ? `in ${age(Date.now(), sb.timeout_at_ms)} (then ${sb.on_timeout})` : 'not counting'}
          {sb.state === 'running' && <ExtendTimeout api={api} id={sb.sandbox_id} onDone={setSb} onError={setError} />}
        </dd>
      </dl>
      <ErrorBox error={error} onClose={() => setError(null)} />
      {sb.state !== 'running' && (
        <Empty title={`This sandbox is ${sb.state}.`}>Resume it to run code.</Empty>
      )}
      {sb.state === 'running' && (
        <>
          <nav class="tabs">
            {TABS.map(([t, label]) => (
              <a key={t} href={`#/sandboxes/${encodeURIComponent(sb.sandbox_id)}${t === 'code' ? '' : `/${t}`}`} class={shown === t ? 'active' : ''}>
                {label}
              </a>
            ))}
          </nav>
          {/* Every tab stays mounted while the page is shown: a running cell, the folder and the terminal survive a switch. */}
          <div hidden={shown !== 'code'}>
            <CellRunner api={api} sandbox={sb.sandbox_id} canRun />
          </div>
          <div hidden={shown !== 'files'}>{visited.has('files') && <FileBrowser api={api} sandbox={sb.sandbox_id} />}</div>
          <div hidden={shown !== 'terminal'}>
            <TerminalPanel api={api} sandbox={sb.sandbox_id} visible={shown === 'terminal'} />
          </div>
          <div hidden={shown !== 'metrics'}>
            <MetricsPanel api={api} sandbox={sb.sandbox_id} visible={shown === 'metrics'} />
          </div>
        </>
      )}
    </div>
  );
}
