// A terminal in the sandbox: xterm.js fed from the PTY API. `POST /v1/sandboxes/{id}/pty` with
// `Accept: application/x-ndjson` starts an interactive shell on a pseudo-terminal and streams its
// bytes (`stdout` events with `data_b64`); keys go to `POST …/pty/{pid}/input` (one request at a
// time, in order), size changes to `POST …/pty/{pid}/resize`. Leaving the sandbox's page kills
// the shell (`POST …/commands/{pid}/signal`): a client disconnect alone would not.

import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'preact/hooks';
import type { Api } from './api';
import { Busy, ErrorBox } from './ui';

function bytesOf(frame: Record<string, unknown>): Uint8Array | string {
  if (typeof frame.data_b64 === 'string') return Uint8Array.from(atob(frame.data_b64), (c) => c.charCodeAt(0));
  return String(frame.text ?? '');
}

/** One open terminal: the emulator, the shell's pid once it started, and how to end both. */
interface Session {
  term: Terminal;
  fit: FitAddon;
  close: () => void;
}

export function TerminalPanel({ api, sandbox, visible }: { api: Api; sandbox: string; visible: boolean }) {
  const base = `/v1/sandboxes/${encodeURIComponent(sandbox)}`;
  const host = useRef<HTMLDivElement>(null);
  const session = useRef<Session | null>(null);
  const [state, setState] = useState<'closed' | 'starting' | 'open'>('closed');
  const [ended, setEnded] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);

  const open = () => {
    if (!host.current || session.current) return;
    setError(null);
    setEnded(null);
    setState('starting');
    const term = new Terminal({
      cursorBlink: true,
      fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace",
      fontSize: 13,
      scrollback: 5000,
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    // Shown before it is measured (the next render keeps it shown).
    host.current.classList.remove('hidden');
    term.open(host.current);
    fit.fit();
    const ctrl = new AbortController();
    let pid: number | null = null;
    let done = false;
    let pending = '';
    let sending = false;
    const flush = async () => {
      if (sending || pending === '' || pid === null || done) return;
      sending = true;
      const data = pending;
      pending = '';
      try {
        await api.json('POST', `${base}/pty/${pid}/input`, { data });
      } catch (e) {
        if (!done) setError(e);
      } finally {
        sending = false;
        flush();
      }
    };
    term.onData((d) => {
      pending += d;
      flush();
    });
    term.onResize(({ cols, rows }) => {
      if (pid !== null && !done) api.json('POST', `${base}/pty/${pid}/resize`, { cols, rows }).catch(() => {});
    });
    const onWindowResize = () => fit.fit();
    addEventListener('resize', onWindowResize);
    const close = () => {
      removeEventListener('resize', onWindowResize);
      if (pid !== null && !done) {
        api.json('POST', `${base}/commands/${pid}/signal`, { signal: 'SIGKILL' }).catch(() => {});
      }
      done = true;
      ctrl.abort();
      term.dispose();
      session.current = null;
    };
    session.current = { term, fit, close };
    api
      .stream(
        `${base}/pty`,
        { cols: term.cols, rows: term.rows },
        (frame) => {
          if (frame.type === 'start') {
            pid = Number(frame.pid);
            setState('open');
            term.focus();
            flush();
          } else if (frame.type === 'stdout' || frame.type === 'stderr') {
            term.write(bytesOf(frame));
          } else if (frame.type === 'end') {
            done = true;
            const how = frame.signal ? `killed by ${String(frame.signal)}` : `exited with code ${String(frame.exit_code)}`;
            setEnded(`The shell ${how}.`);
          }
        },
        ctrl.signal,
      )
      .catch((e) => {
        if (!ctrl.signal.aborted) setError(e);
      })
      .finally(() => {
        done = true;
        if (!ctrl.signal.aborted) setState((s) => (s === 'starting' ? 'closed' : s));
      });
  };

  // Leaving the page (or the sandbox) ends the shell.
  useEffect(() => () => session.current?.close(), [sandbox]);
  // A terminal opened while hidden, or a tab shown again, is fitted to its box.
  useEffect(() => {
    if (visible && session.current) session.current.fit.fit();
  }, [visible]);

  const closeNow = () => {
    session.current?.close();
    setState('closed');
    setEnded(null);
  };

  return (
    <section class="terminal-panel">
      <div class="terminal-bar">
        {state === 'closed' ? (
          <button type="button" class="small" onClick={open}>
            Open terminal
          </button>
        ) : (
          <button type="button" class="secondary small" onClick={closeNow}>
            Close terminal
          </button>
        )}
        <span class="dim">An interactive bash as the sandbox's user; closing it (or leaving this page) ends the shell.</span>
      </div>
      {state === 'starting' && <Busy>Starting a shell…</Busy>}
      {ended && <div class="notice">{ended} Close it and open a new one.</div>}
      <ErrorBox error={error} onClose={() => setError(null)} />
      <div class={`terminal-host${state === 'closed' ? ' hidden' : ''}`} ref={host} />
    </section>
  );
}
