// Sign in with an API key: checked against the server before it is kept.

import { useState } from 'preact/hooks';
import { type Session, signIn } from './session';
import { ErrorBox } from './ui';

export function SignIn({ onSignedIn }: { onSignedIn: (s: Session) => void }) {
  const [key, setKey] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      onSignedIn(await signIn(key));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="card signin" onSubmit={submit}>
      <h1>Lizard console</h1>
      <p>
        Sign in with an API key. An admin key (<code>&lt;data-dir&gt;/admin-key</code>) sees every project; a project's
        key (<code>lizard project create</code>) sees its own.
      </p>
      <label>
        API key
        <input
          type="password"
          name="api-key"
          autocomplete="off"
          placeholder="lz_…"
          value={key}
          onInput={(e) => setKey(e.currentTarget.value)}
          required
        />
      </label>
      <ErrorBox error={error} />
      <button type="submit" disabled={busy || !key.trim()}>
        {busy ? 'Signing in…' : 'Sign in'}
      </button>
      <p class="hint">The key is kept in this tab's session storage only, and sent to this server only.</p>
    </form>
  );
}
