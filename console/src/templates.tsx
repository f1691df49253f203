// Templates: the list (`GET /v1/templates`: the built-ins, the key's project's own and the public
// ones), delete, and a build from a Dockerfile (`POST /v1/templates` with
// `Accept: application/x-ndjson`) and the files picked or dropped as its build context: its steps
// and output shown as the build goes.

import { useEffect, useState } from 'preact/hooks';
import { ApiError, type TemplateInfo } from './api';
import { type ContextFile, MAX_CONTEXT_BYTES, dropped, merge, pack, picked, totalSize } from './buildcontext';
import type { Session } from './session';
import { Busy, Empty, ErrorBox, Select, StateBadge, age, ask, size } from './ui';

const EXAMPLE = 'FROM code-interpreter-v1\nRUN pip list > /opt/packages.txt\n';

export function TemplatesPage({ session }: { session: Session }) {
  const { api } = session;
  const [list, setList] = useState<TemplateInfo[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);

  useEffect(() => {
    let stop = false;
    api
      .get<{ templates: TemplateInfo[] }>('/v1/templates')
      .then((t) => !stop && setList(t.templates))
      .catch((e) => !stop && setError(e));
    return () => {
      stop = true;
    };
  }, [api, tick]);

  const remove = async (t: TemplateInfo) => {
    if (!(await ask(`Delete template ${t.name}?`, 'Delete'))) return;
    setError(null);
    try {
      const q = t.project ? `?project=${encodeURIComponent(t.project)}` : '';
      await api.json('DELETE', `/v1/templates/${encodeURIComponent(t.name)}${q}`);
    } catch (e) {
      setError(e);
    }
    setTick((n) => n + 1);
  };

  return (
    <div class="page">
      <h1>Templates</h1>
      <BuildTemplate session={session} onBuilt={() => setTick((n) => n + 1)} />
      <ErrorBox error={error} onClose={() => setError(null)} />
      {list === null ? (
        error ? null : <Busy>Loading templates…</Busy>
      ) : list.length === 0 ? (
        <Empty title="No templates.">Build one from a Dockerfile above.</Empty>
      ) : (
        <table class="list templates">
          <thead>
            <tr>
              <th>Name</th>
              <th>State</th>
              <th>Base</th>
              <th>Project</th>
              <th>Size</th>
              <th>Updated</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {list.map((t) => (
              <tr key={`${t.project ?? ''}/${t.name}`} data-template={t.name}>
                <td class="mono">{t.name}</td>
                <td>
                  <StateBadge state={t.state} />
                </td>
                <td class="mono dim">{t.base ?? (t.builtin ? 'built-in' : '')}</td>
                <td>{t.project ?? (t.public ? 'public' : '')}</td>
                <td class="dim">{(t.size_bytes / (1 << 20)).toFixed(1)} MiB</td>
                <td class="dim">{age(t.updated_at)} ago</td>
                <td>
                  {!t.builtin && (
                    <button type="button" class="danger small" onClick={() => remove(t)}>
                      Delete
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

interface Progress {
  step?: { index: number; total: number; name: string };
  log: string;
  done?: TemplateInfo;
  error?: unknown;
}

function BuildTemplate({ session, onBuilt }: { session: Session; onBuilt: () => void }) {
  const { api } = session;
  const [name, setName] = useState('');
  const [dockerfile, setDockerfile] = useState(EXAMPLE);
  const [project, setProject] = useState(session.projects.length === 1 ? session.projects[0]! : '');
  const [context, setContext] = useState<ContextFile[]>([]);
  const [contextError, setContextError] = useState<unknown>(null);
  const [dragging, setDragging] = useState(false);
  const [building, setBuilding] = useState(false);
  const [progress, setProgress] = useState<Progress | null>(null);

  const add = (more: ContextFile[]) => setContext((files) => merge(files, more));
  const pick = (e: Event) => {
    const input = e.currentTarget as HTMLInputElement;
    if (input.files) add(picked(input.files));
    input.value = '';
  };
  // Files dropped anywhere on the form (text dropped in the Dockerfile is left to the browser).
  const withFiles = (e: DragEvent) => !building && !!e.dataTransfer?.types.includes('Files');
  const drop = (e: DragEvent) => {
    if (!withFiles(e)) return;
    e.preventDefault();
    setDragging(false);
    setContextError(null);
    dropped(e.dataTransfer!).then(add, setContextError);
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    setBuilding(true);
    let p: Progress = { log: '' };
    setProgress(p);
    const update = (change: Partial<Progress>) => setProgress((p = { ...p, ...change }));
    try {
      const body: Record<string, unknown> = { name: name.trim(), dockerfile };
      if (project) body.project = project;
      if (context.length > 0) body.context = await pack(context);
      await api.stream('/v1/templates', body, (f) => {
        if (f.type === 'step') update({ step: { index: Number(f.index), total: Number(f.total), name: String(f.name) } });
        else if (f.type === 'log') update({ log: p.log + String(f.text ?? '') });
        else if (f.type === 'done') update({ done: f.template as TemplateInfo });
        else if (f.type === 'error') {
          const err = f.error as { code?: string; message?: string } | undefined;
          update({ error: new ApiError(400, err?.code ?? 'build_failed', err?.message ?? 'the build failed') });
        }
      });
    } catch (err) {
      update({ error: err });
    } finally {
      setBuilding(false);
      onBuilt();
    }
  };

  const pct = progress?.step ? Math.round((100 * (progress.step.index - (progress.done ? 0 : 1))) / Math.max(1, progress.step.total)) : 0;
  return (
    <form
      class={`card build${dragging ? ' dragging' : ''}`}
      onSubmit={submit}
      onDragOver={(e) => {
        if (!withFiles(e)) return;
        e.preventDefault();
        setDragging(true);
      }}
      onDragLeave={(e) => !e.currentTarget.contains(e.relatedTarget as Node | null) && setDragging(false)}
      onDrop={drop}
    >
      <div class="build-fields">
        <label>
          Name
          <input name="template-name" required placeholder="my-template" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </label>
        {session.projects.length > 1 && (
          <Select label="Project" name="template-project" value={project} options={session.projects} first={['', 'default']} onChange={setProject} />
        )}
        <button type="submit" disabled={building || !name.trim()}>
          {building ? 'Building…' : 'Build template'}
        </button>
      </div>
      <label class="dockerfile">
        <span>
          Dockerfile (<code>FROM</code> a template or <code>debian:bookworm</code>, then <code>RUN</code>, <code>ENV</code>, <code>WORKDIR</code>,{' '}
          <code>USER</code>, <code>COPY</code>…)
        </span>
        <textarea name="dockerfile" class="mono" rows={6} value={dockerfile} onInput={(e) => setDockerfile(e.currentTarget.value)} />
      </label>
      <div class="build-context">
        <span>
          Build context: the files <code>COPY</code> and <code>ADD</code> take, by their path in it (a folder's files by their path in the folder);
          pick them or drop them on this form. At most {MAX_CONTEXT_BYTES >> 20} MiB as a tar.gz.
        </span>
        <div class="context-bar">
          <label class="upload">
            Add files
            <input type="file" name="context-files" multiple disabled={building} onChange={pick} />
          </label>
          <label class="upload">
            Add a folder
            <input type="file" name="context-folder" multiple disabled={building} onChange={pick} {...{ webkitdirectory: true }} />
          </label>
          {context.length > 0 && (
            <>
              <span class="context-total">
                {context.length} {context.length === 1 ? 'file' : 'files'}, {size(totalSize(context))}
              </span>
              <button type="button" class="secondary small" disabled={building} onClick={() => setContext([])}>
                Clear
              </button>
            </>
          )}
        </div>
        {context.length > 0 && (
          <ul class="context-files mono">
            {context.map((f) => (
              <li key={f.path} data-path={f.path}>
                {f.path} <span class="dim">{size(f.file.size)}</span>
              </li>
            ))}
          </ul>
        )}
        <ErrorBox error={contextError} onClose={() => setContextError(null)} />
      </div>
      {progress && (
        <div class="build-progress">
          {progress.step && (
            <div class="step">
              <progress max={100} value={pct} />
              <span>
                Step {progress.step.index}/{progress.step.total}: <code>{progress.step.name}</code>
              </span>
            </div>
          )}
          {building && !progress.step && <Busy>Starting the build…</Busy>}
          {progress.log && <pre class="build-log">{progress.log}</pre>}
          {progress.done && <div class="notice ok">Template {progress.done.name} is ready: pick it when you create a sandbox.</div>}
          <ErrorBox error={progress.error} />
        </div>
      )}
    </form>
  );
}
