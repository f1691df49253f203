// The cell runner: a sandbox's contexts (pick, create with a language, restart, delete) and, for
// the chosen one, a notebook of cells. A cell runs with `POST /v1/sandboxes/{id}/execute` and
// `Accept: application/x-ndjson`; its output is shown frame by frame as it arrives. Interrupt is
// `POST .../contexts/{ctx}/interrupt`. Ctrl+Enter (⌘+Enter) runs a cell, Shift+Enter runs it and
// moves to the next.
//
// Cells live in a store outside the components (one per sandbox and context), so a cell keeps
// streaming, and the notebook keeps its cells, while the person looks at another page.

import { useEffect, useRef, useState } from 'preact/hooks';
import { type Api, type Context, type Language, LANGUAGES } from './api';
import { type Output, Outputs, addFrame } from './output';
import { Busy, Empty, ErrorBox, Select, ask } from './ui';

export interface Cell {
  id: number;
  code: string;
  running: boolean;
  /** The kernel's counter for the cell's last run. */
  count?: number;
  outputs: Output[];
  /** How the last run ended, and how long it took. */
  status?: string;
  durationMs?: number;
}

let nextCellId = 1;
const newCell = (code = ''): Cell => ({ id: nextCellId++, code, running: false, outputs: [] });

/** The cells of one context, and who is watching them. */
class Notebook {
  cells: Cell[] = [newCell()];
  private listeners = new Set<() => void>();
  subscribe(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }
  update(id: number, change: (c: Cell) => Partial<Cell>): void {
    this.cells = this.cells.map((c) => (c.id === id ? { ...c, ...change(c) } : c));
    for (const fn of this.listeners) fn();
  }
  setCells(cells: Cell[]): void {
    this.cells = cells;
    for (const fn of this.listeners) fn();
  }
}

const notebooks = new Map<string, Notebook>();
function notebookOf(sandbox: string, context: string): Notebook {
  const k = `${sandbox}/${context}`;
  let nb = notebooks.get(k);
  if (!nb) notebooks.set(k, (nb = new Notebook()));
  return nb;
}

export function CellRunner({ api, sandbox, canRun }: { api: Api; sandbox: string; canRun: boolean }) {
  const base = `/v1/sandboxes/${encodeURIComponent(sandbox)}`;
  const [contexts, setContexts] = useState<Context[] | null>(null);
  const [chosen, setChosen] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState<string | null>(null);
  const [language, setLanguage] = useState<Language>('python');

  const load = async (select?: string) => {
    try {
      const list = await api.get<Context[]>(`${base}/contexts`);
      setContexts(list);
      setChosen((cur) => {
        const want = select ?? cur;
        if (want && list.some((c) => c.id === want)) return want;
        return (list.find((c) => c.is_default && c.language === 'python') ?? list[0])?.id ?? null;
      });
    } catch (e) {
      setError(e);
    }
  };
  useEffect(() => {
    if (canRun) load();
  }, [sandbox, canRun]);
  // A sandbox that has just started makes its default Python context a moment later: while there
  // is none, the list is asked again.
  const none = contexts !== null && contexts.length === 0;
  useEffect(() => {
    if (!none || !canRun) return;
    const timer = setInterval(() => load(), 2000);
    return () => clearInterval(timer);
  }, [none, canRun]);

  /** Run a context action, then list the contexts again (choosing the one `fn` names, if any). */
  const act = async (label: string, fn: () => Promise<string | void>) => {
    setBusy(label);
    setError(null);
    try {
      const select = await fn();
      await load(select || undefined);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(null);
    }
  };
  const ctxPath = (id: string) => `${base}/contexts/${encodeURIComponent(id)}`;
  const create = () =>
    act('Starting a kernel…', async () => (await api.json<Context>('POST', `${base}/contexts`, { language })).id);
  const restart = (id: string) =>
    act('Restarting the kernel…', async () => {
      await api.json('POST', `${ctxPath(id)}/restart`);
    });
  const remove = async (id: string) => {
    if (!(await ask(`Delete context ${id}? Its kernel and its state are gone.`, 'Delete'))) return;
    act('Deleting the context…', async () => {
      await api.json('DELETE', ctxPath(id));
      notebooks.delete(`${sandbox}/${id}`);
    });
  };

  if (!canRun) return null;
  const ctx = contexts?.find((c) => c.id === chosen) ?? null;
  return (
    <section class="cells-panel">
      <div class="contexts-bar">
        {contexts && contexts.length > 0 && (
          <label>
            Context
            <select name="context" value={chosen ?? ''} onChange={(e) => setChosen(e.currentTarget.value)}>
              {contexts.map((c) => (
                <option key={c.id} value={c.id}>
                  {c.language} · {c.id}
                  {c.is_default ? ' (default)' : ''}
                  {c.kernel_restarts > 0 ? ` · restarted ${c.kernel_restarts}×` : ''}
                </option>
              ))}
            </select>
          </label>
        )}
        {ctx && (
          <>
            <button type="button" class="secondary small" disabled={busy !== null} onClick={() => restart(ctx.id)}>
              Restart
            </button>
            <button type="button" class="secondary small" disabled={busy !== null} onClick={() => remove(ctx.id)}>
              Delete
            </button>
          </>
        )}
        <span class="spacer" />
        <Select label="Language" name="language" value={language} options={LANGUAGES} onChange={(l) => setLanguage(l as Language)} />
        <button type="button" class="small" disabled={busy !== null} onClick={create}>
          New context
        </button>
      </div>
      {busy && <Busy>{busy}</Busy>}
      <ErrorBox error={error} onClose={() => setError(null)} />
      {contexts === null ? (
        error ? null : <Busy>Loading contexts…</Busy>
      ) : !ctx ? (
        <Empty title="No context to run code in yet.">
          A new sandbox's default Python context shows here in a moment; or pick a language and press “New context”.
        </Empty>
      ) : (
        <Cells key={ctx.id} api={api} sandbox={sandbox} ctx={ctx} onRan={() => load()} />
      )}
    </section>
  );
}

function Cells({ api, sandbox, ctx, onRan }: { api: Api; sandbox: string; ctx: Context; onRan: () => void }) {
  const base = `/v1/sandboxes/${encodeURIComponent(sandbox)}`;
  const nb = notebookOf(sandbox, ctx.id);
  const [, setVersion] = useState(0);
  useEffect(() => nb.subscribe(() => setVersion((v) => v + 1)), [nb]);
  const editors = useRef(new Map<number, HTMLTextAreaElement>());
  const [focus, setFocus] = useState<number | null>(null);
  useEffect(() => {
    if (focus !== null) editors.current.get(focus)?.focus();
  }, [focus]);

  const run = async (cell: Cell) => {
    if (cell.running || !cell.code.trim()) return;
    nb.update(cell.id, () => ({ running: true, outputs: [], status: undefined, durationMs: undefined, count: undefined }));
    try {
      await api.stream(`${base}/execute`, { code: cell.code, context: ctx.id }, (frame) => {
        if (frame.type === 'start') nb.update(cell.id, () => ({ count: Number(frame.execution_count) }));
        else if (frame.type === 'end')
          nb.update(cell.id, () => ({ status: String(frame.status), durationMs: Number(frame.duration_ms) }));
        else nb.update(cell.id, (c) => ({ outputs: addFrame(c.outputs, frame) }));
      });
    } catch (e) {
      nb.update(cell.id, (c) => ({ outputs: [...c.outputs, { kind: 'failure', error: e }] }));
    } finally {
      nb.update(cell.id, () => ({ running: false }));
      onRan();
    }
  };
  const interrupt = async (cell: Cell) => {
    try {
      await api.json('POST', `${base}/contexts/${encodeURIComponent(ctx.id)}/interrupt`);
    } catch (e) {
      nb.update(cell.id, (c) => ({ outputs: [...c.outputs, { kind: 'failure', error: e }] }));
    }
  };
  const runAndNext = (cell: Cell) => {
    run(cell);
    const i = nb.cells.findIndex((c) => c.id === cell.id);
    let next = nb.cells[i + 1];
    if (!next) {
      next = newCell();
      nb.setCells([...nb.cells, next]);
    }
    setFocus(next.id);
  };
  const onKey = (cell: Cell) => (e: KeyboardEvent) => {
    if (e.key !== 'Enter') return;
    if (e.ctrlKey || e.metaKey) {
      e.preventDefault();
      run(cell);
    } else if (e.shiftKey) {
      e.preventDefault();
      runAndNext(cell);
    }
  };

  return (
    <div class="cells">
      {nb.cells.map((cell) => (
        <div class={`cell${cell.running ? ' running' : ''}`} key={cell.id} data-cell={cell.id}>
          <div class="cell-head">
            <span class="prompt mono">[{cell.running ? '*' : (cell.count ?? ' ')}]</span>
            <textarea
              class="code mono"
              spellcheck={false}
              rows={Math.max(2, cell.code.split('\n').length)}
              placeholder={`${ctx.language} code: Ctrl+Enter runs it, Shift+Enter runs it and moves to the next cell`}
              value={cell.code}
              ref={(el) => {
                if (el) editors.current.set(cell.id, el);
                else editors.current.delete(cell.id);
              }}
              onInput={(e) => nb.update(cell.id, () => ({ code: e.currentTarget.value }))}
              onKeyDown={onKey(cell)}
            />
            <div class="cell-buttons">
              {cell.running ? (
                <button type="button" class="secondary small" onClick={() => interrupt(cell)}>
                  Interrupt
                </button>
              ) : (
                <button type="button" class="small" onClick={() => run(cell)} title="Ctrl+Enter">
                  Run
                </button>
              )}
              <button
                type="button"
                class="link"
                aria-label="Remove cell"
                disabled={cell.running || nb.cells.length === 1}
                onClick={() => nb.setCells(nb.cells.filter((c) => c.id !== cell.id))}
              >
                ×
              </button>
            </div>
          </div>
          <Outputs outputs={cell.outputs} />
          {cell.running && <Busy>Running…</Busy>}
          {cell.status && (
            <div class={`cell-status status-${cell.status}`}>
              {cell.status} · {cell.durationMs} ms
            </div>
          )}
        </div>
      ))}
      <button
        type="button"
        class="secondary small add-cell"
        onClick={() => {
          const c = newCell();
          nb.setCells([...nb.cells, c]);
          setFocus(c.id);
        }}
      >
        + Cell
      </button>
    </div>
  );
}
