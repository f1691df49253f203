// The console's shell: sign-in, the navigation bar and hash routing (`#/sandboxes`,
// `#/sandboxes/<id>`), so that no page of the console is a path of the API.

import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import './style.css';
import { AuditPage } from './audit';
import { SandboxesPage } from './sandboxes';
import { SandboxPage } from './sandbox';
import { type Session, signIn, signOut, storedKey } from './session';
import { SignIn } from './signin';
import { TemplatesPage } from './templates';
import { Busy, ErrorBox } from './ui';
import { UsagePage } from './usage';

/** The route of a hash: `['sandboxes']`, `['sandboxes', id]`. */
function route(hash: string): string[] {
  return hash
    .replace(/^#\/?/, '')
    .split('/')
    .filter(Boolean)
    .map((s) => decodeURIComponent(s));
}

export function navigate(path: string): void {
  location.hash = `#${path}`;
}

function useHash(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return hash;
}

function App() {
  const hash = useHash();
  const [session, setSession] = useState<Session | null>(null);
  // A key kept in this tab's storage is checked again on load (it may have been revoked).
  const [resuming, setResuming] = useState(() => storedKey() !== null);
  const [resumeError, setResumeError] = useState<unknown>(null);

  useEffect(() => {
    const key = storedKey();
    if (!key) return;
    signIn(key)
      .then(setSession)
      .catch((e) => {
        signOut();
        setResumeError(e);
      })
      .finally(() => setResuming(false));
  }, []);

  // Projects made since sign-in (an admin's `default` comes with its first sandbox) show up at
  // the next page change.
  useEffect(() => {
    if (!session) return;
    session.api
      .get<string[]>('/v1/projects')
      .then((projects) => {
        if (projects.join() !== session.projects.join()) setSession({ ...session, projects });
      })
      .catch(() => {});
  }, [hash]);

  if (resuming) return <Busy>Signing in…</Busy>;
  if (!session) {
    return (
      <main class="signin-page">
        <ErrorBox error={resumeError} />
        <SignIn onSignedIn={setSession} />
      </main>
    );
  }

  const parts = route(hash);
  let page;
  if (parts[0] === 'sandboxes' && parts[1]) {
    page = <SandboxPage key={parts[1]} session={session} id={parts[1]} {...(parts[2] ? { tab: parts[2] } : {})} />;
  } else if (parts[0] === 'templates') {
    page = <TemplatesPage session={session} />;
  } else if (parts[0] === 'audit') {
    page = <AuditPage session={session} />;
  } else if (parts[0] === 'usage') {
    page = <UsagePage session={session} />;
  } else {
    page = <SandboxesPage session={session} />;
  }
  const here = parts[0] ?? 'sandboxes';
  return (
    <>
      <header class="topbar">
        <a class="brand" href="#/sandboxes">
          Lizard
        </a>
        <nav>
          <a href="#/sandboxes" class={here === 'sandboxes' ? 'active' : ''}>
            Sandboxes
          </a>
          <a href="#/templates" class={here === 'templates' ? 'active' : ''}>
            Templates
          </a>
          <a href="#/usage" class={here === 'usage' ? 'active' : ''}>
            Usage
          </a>
          <a href="#/audit" class={here === 'audit' ? 'active' : ''}>
            Audit log
          </a>
        </nav>
        <span class="who" title="The projects this key sees">
          {session.projects.length === 1
            ? `project ${session.projects[0]}`
            : session.projects.length === 0
              ? 'no projects yet'
              : `${session.projects.length} projects`}
        </span>
        <button
          type="button"
          class="secondary"
          onClick={() => {
            signOut();
            setSession(null);
          }}
        >
          Sign out
        </button>
      </header>
      <main>{page}</main>
    </>
  );
}

render(<App />, document.getElementById('app')!);
