// The audit log (`GET /v1/audit?from=&limit=`, newest first; an admin key sees every project's
// events, a project key its own): the range is asked of the API, the other filters (action,
// project, outcome) narrow what it answered.

import { useEffect, useState } from 'preact/hooks';
import { type AuditEvent, query } from './api';
import type { Session } from './session';
import { Busy, Empty, ErrorBox, Select } from './ui';

const SINCE: Record<string, number> = { 'last hour': 3_600_000, 'last 24 hours': 86_400_000, 'last 7 days': 7 * 86_400_000 };
const OUTCOMES = ['succeeded', 'failed'] as const;

export function AuditPage({ session }: { session: Session }) {
  const { api } = session;
  const [since, setSince] = useState('last 24 hours');
  const [action, setAction] = useState('');
  const [project, setProject] = useState('');
  const [outcome, setOutcome] = useState('');
  const [events, setEvents] = useState<AuditEvent[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);

  useEffect(() => {
    let stop = false;
    setEvents(null);
    api
      .get<AuditEvent[]>(`/v1/audit${query({ from: Date.now() - SINCE[since]!, limit: 1000 })}`)
      .then((e) => {
        if (stop) return;
        setEvents(e);
        setError(null);
      })
      .catch((e) => !stop && setError(e));
    return () => {
      stop = true;
    };
  }, [api, since, tick]);

  const all = events ?? [];
  const actions = [...new Set(all.map((e) => e.action))].sort();
  const projects = [...new Set(all.map((e) => e.project ?? '').filter(Boolean))].sort();
  const shown = all.filter(
    (e) =>
      (!action || e.action === action) &&
      (!project || e.project === project) &&
      (!outcome || (outcome === 'failed') === e.status >= 400),
  );
  return (
    <div class="page">
      <h1>Audit log</h1>
      <div class="filters">
        <Select label="Since" name="audit-since" value={since} options={Object.keys(SINCE)} onChange={setSince} />
        <Select label="Action" name="audit-action" value={action} options={actions} first={['', 'all']} onChange={setAction} />
        <Select label="Project" name="audit-project" value={project} options={projects} first={['', 'all']} onChange={setProject} />
        <Select label="Outcome" name="audit-outcome" value={outcome} options={OUTCOMES} first={['', 'all']} onChange={setOutcome} />
        <button type="button" class="secondary small" onClick={() => setTick((t) => t + 1)}>
          Refresh
        </button>
      </div>
      <ErrorBox error={error} />
      {events === null ? (
        error ? null : <Busy>Loading the audit log…</Busy>
      ) : shown.length === 0 ? (
        <Empty title="No events match.">Lifecycle calls (creates, kills, pauses, …) and failed sign-ins are logged here.</Empty>
      ) : (
        <table class="list audit">
          <thead>
            <tr>
              <th>When</th>
              <th>Action</th>
              <th>Object</th>
              <th>Project</th>
              <th>Actor</th>
              <th>Status</th>
              <th>Client</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((e) => (
              <tr key={e.id} data-action={e.action}>
                <td class="dim">{new Date(e.at_ms).toLocaleString()}</td>
                <td class="mono">{e.action}</td>
                <td class="mono">{e.object ?? ''}</td>
                <td>{e.project ?? ''}</td>
                <td>
                  {e.actor}
                  {e.key_prefix ? <span class="mono dim"> {e.key_prefix}</span> : null}
                </td>
                <td class={e.status >= 400 ? 'failed' : ''}>{e.status}</td>
                <td class="mono dim">{e.client}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
