// A terminal in the sandbox: xterm.js on the PTY API's WebSocket. `GET /v1/sandboxes/{id}/pty/ws`
// starts an interactive shell on a pseudo-terminal; binary messages carry its bytes both ways and
// text messages JSON control (`start` with the pid and `end` from the server, `resize` from here).
// A browser cannot set `Authorization` on a WebSocket: the key goes as a second subprotocol,
// `lizard.key.<key>`, which the server takes and never echoes. Closing the socket (closing the
// terminal, leaving the page) ends the shell.

import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'preact/hooks';
import type { Api } from './api';
import { Busy, ErrorBox } from './ui';

/** One open terminal: the emulator and how to end it with its shell. */
interface Session {
  term: Terminal;
  fit: FitAddon;
  close: () => void;
}

/** The WebSocket URL of a new terminal of sandbox `sandbox`, `cols` × `rows`. */
function terminalUrl(sandbox: string, cols: number, rows: number): string {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${scheme}//${location.host}/v1/sandboxes/${encodeURIComponent(sandbox)}/pty/ws?cols=${cols}&rows=${rows}`;
}

export function TerminalPanel({ api, sandbox, visible }: { api: Api; sandbox: string; visible: boolean }) {
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
    const ws = new WebSocket(terminalUrl(sandbox, term.cols, term.rows), ['lizard.pty.v1', `lizard.key.${api.key}`]);
    ws.binaryType = 'arraybuffer';
    const encoder = new TextEncoder();
    let started = false;
    let closing = false;
    // What is typed before the socket is open is sent once it is (in order).
    const early: (string | Uint8Array)[] = [];
    const send = (data: string | Uint8Array) => {
      if (ws.readyState === WebSocket.CONNECTING) early.push(data);
      else if (ws.readyState === WebSocket.OPEN) ws.send(data);
    };
    ws.onopen = () => {
      for (const data of early.splice(0)) ws.send(data);
    };
    term.onData((d) => send(encoder.encode(d)));
    term.onBinary((d) => send(Uint8Array.from(d, (c) => c.charCodeAt(0))));
    term.onResize(({ cols, rows }) => send(JSON.stringify({ type: 'resize', cols, rows })));
    ws.onmessage = (m) => {
      if (m.data instanceof ArrayBuffer) {
        term.write(new Uint8Array(m.data));
        return;
      }
      const msg = JSON.parse(String(m.data)) as Record<string, unknown>;
      if (msg.type === 'start') {
        started = true;
        setState('open');
        term.focus();
      } else if (msg.type === 'end') {
        const how = msg.signal ? `killed by ${String(msg.signal)}` : `exited with code ${String(msg.exit_code)}`;
        setEnded(`The shell ${how}.`);
      } else if (msg.type === 'error') {
        setError(new Error(String(msg.message)));
      }
    };
    ws.onclose = (e) => {
      if (closing) return;
      if (!started) {
        // The handshake was refused: the API's own message is not readable from a WebSocket.
        setError(new Error(`The terminal could not be opened (WebSocket closed with code ${e.code}). Is the sandbox running, and may this key use it?`));
        close();
        setState('closed');
      } else {
        setEnded((s) => s ?? 'The terminal\'s connection closed.');
      }
    };
    const onWindowResize = () => fit.fit();
    addEventListener('resize', onWindowResize);
    const close = () => {
      closing = true;
      removeEventListener('resize', onWindowResize);
      ws.close();
      term.dispose();
      session.current = null;
    };
    session.current = { term, fit, close };
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
