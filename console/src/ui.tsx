// Small pieces every page uses: the error box (the API's message as it said it), a busy marker,
// and formatting of ages and sizes.

import type { ComponentChildren } from 'preact';
import { useEffect } from 'preact/hooks';
import { ApiError, messageOf } from './api';

/**
 * Run `step` now and again `ms` after each run ends, while the component is mounted and `deps`
 * are unchanged; skipped while the tab is hidden. `step` gets whether the poll was stopped
 * meanwhile (its results are then stale) and returns `false` to stop polling.
 */
export function usePoll(step: (stopped: () => boolean) => Promise<boolean | void>, ms: number, deps: unknown[]): void {
  useEffect(() => {
    let stop = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      const again = document.hidden ? true : (await step(() => stop)) !== false;
      if (!stop && again) timer = setTimeout(run, ms);
    };
    run();
    return () => {
      stop = true;
      clearTimeout(timer);
    };
  }, deps);
}

/** An error as the API put it: its message, with the code when there is one. */
export function ErrorBox({ error, onClose }: { error: unknown; onClose?: () => void }) {
  if (error === null || error === undefined) return null;
  const code = error instanceof ApiError && error.status !== 0 ? error.code : null;
  return (
    <div class="error-box" role="alert">
      {code && <span class="error-code">{code}</span>}
      <span class="error-message">{messageOf(error)}</span>
      {onClose && (
        <button class="link" type="button" onClick={onClose} aria-label="Dismiss">
          ×
        </button>
      )}
    </div>
  );
}

/**
 * Ask before something that cannot be undone: a modal `<dialog>` in the page with `message`, a
 * Cancel button and one named `action`. Resolves with whether `action` was chosen (Escape and
 * Cancel say no). Not the browser's `confirm()`: that one blocks the page's polls and streams
 * while it is open, and a browser may close it on its own.
 */
export function ask(message: string, action: string): Promise<boolean> {
  return new Promise((resolve) => {
    const dialog = document.createElement('dialog');
    dialog.className = 'ask';
    const text = document.createElement('p');
    text.textContent = message;
    const form = document.createElement('form');
    form.method = 'dialog';
    const button = (label: string, cls: string, value: string) => {
      const b = document.createElement('button');
      b.type = 'submit';
      b.className = cls;
      b.value = value;
      b.textContent = label;
      return b;
    };
    const cancel = button('Cancel', 'secondary', 'cancel');
    form.append(cancel, button(action, 'danger', 'yes'));
    dialog.append(text, form);
    dialog.addEventListener('close', () => {
      dialog.remove();
      resolve(dialog.returnValue === 'yes');
    });
    document.body.append(dialog);
    dialog.showModal();
    cancel.focus();
  });
}

/** A spinner with a label, for work in progress. */
export function Busy({ children }: { children: ComponentChildren }) {
  return (
    <div class="busy" role="status">
      <span class="spinner" aria-hidden="true" />
      {children}
    </div>
  );
}

/** What to do when there is nothing to show. */
export function Empty({ title, children }: { title: string; children?: ComponentChildren }) {
  return (
    <div class="empty">
      <strong>{title}</strong>
      {children && <p>{children}</p>}
    </div>
  );
}

/** `3 s`, `5 min`, `2 h 10 min`, `3 d 4 h`: how long ago `ms` was. */
export function age(ms: number, now: number = Date.now()): string {
  const s = Math.max(0, Math.floor((now - ms) / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** Lifetimes a person picks from (a sandbox is killed, or paused, when its timeout passes). */
export const LIFETIMES: Record<string, number> = {
  '5 min': 5 * 60_000,
  '30 min': 30 * 60_000,
  '1 h': 3_600_000,
  '4 h': 4 * 3_600_000,
};

/** `512 MiB`, `2.0 GiB`. */
export function mib(n: number): string {
  return n >= 1024 ? `${(n / 1024).toFixed(1)} GiB` : `${n} MiB`;
}

/** `512 B`, `3.4 KiB`, `1.2 MiB`, `2.0 GiB`: a number of bytes. */
export function size(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  return `${(n / (1 << 30)).toFixed(1)} GiB`;
}

/** Have the browser save `blob` as a download named `name`. */
export function saveBlob(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** The state as a coloured label. */
export function StateBadge({ state }: { state: string }) {
  return <span class={`state state-${state}`}>{state}</span>;
}

/** A labelled `<select>` whose options are `options` (each its own label), after `first` ([value, label]) when given. */
export function Select({
  label,
  name,
  value,
  options,
  first,
  onChange,
}: {
  label: string;
  name: string;
  value: string;
  options: readonly string[];
  first?: [string, string];
  onChange: (value: string) => void;
}) {
  return (
    <label>
      {label}
      <select name={name} value={value} onChange={(e) => onChange(e.currentTarget.value)}>
        {first && <option value={first[0]}>{first[1]}</option>}
        {options.map((o) => (
          <option key={o} value={o}>
            {o}
          </option>
        ))}
      </select>
    </label>
  );
}
