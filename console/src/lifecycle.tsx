// A sandbox's lifecycle buttons (pause, resume, hibernate, kill), shared by the list and the
// sandbox's own page: each is one call of the API, its progress shown on the button.

import { useState } from 'preact/hooks';
import type { Api, SandboxInfo } from './api';
import { ask } from './ui';

export type Action = 'pause' | 'resume' | 'hibernate' | 'kill';

const LABEL: Record<Action, [string, string]> = {
  pause: ['Pause', 'Pausing…'],
  resume: ['Resume', 'Resuming…'],
  hibernate: ['Hibernate', 'Hibernating…'],
  kill: ['Kill', 'Killing…'],
};

/** The actions that make sense in `state`. */
export function actionsFor(state: string): Action[] {
  switch (state) {
    case 'running':
      return ['pause', 'hibernate', 'kill'];
    case 'paused':
      return ['resume', 'hibernate', 'kill'];
    case 'hibernated':
      return ['resume', 'kill'];
    default:
      return [];
  }
}

export async function perform(api: Api, id: string, action: Action): Promise<SandboxInfo | null> {
  const path = `/v1/sandboxes/${encodeURIComponent(id)}`;
  if (action === 'kill') {
    await api.json('DELETE', path);
    return null;
  }
  return api.json<SandboxInfo>('POST', `${path}/${action}`);
}

/**
 * The buttons for `sb`. `onDone` gets the sandbox's new info (`null` once killed), `onError` what
 * the API said when it refused.
 */
export function LifecycleButtons({
  api,
  sb,
  onDone,
  onError,
}: {
  api: Api;
  sb: SandboxInfo;
  onDone: (info: SandboxInfo | null) => void;
  onError: (e: unknown) => void;
}) {
  const [running, setRunning] = useState<Action | null>(null);
  const run = async (action: Action) => {
    if (action === 'kill' && !(await ask(`Kill sandbox ${sb.sandbox_id}? Its processes and files are gone for good.`, 'Kill'))) return;
    setRunning(action);
    try {
      onDone(await perform(api, sb.sandbox_id, action));
    } catch (e) {
      onError(e);
    } finally {
      setRunning(null);
    }
  };
  return (
    <span class="actions">
      {actionsFor(sb.state).map((a) => (
        <button
          key={a}
          type="button"
          class={a === 'kill' ? 'danger small' : 'secondary small'}
          disabled={running !== null}
          onClick={() => run(a)}
        >
          {running === a ? LABEL[a][1] : LABEL[a][0]}
        </button>
      ))}
    </span>
  );
}
