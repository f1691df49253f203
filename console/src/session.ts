// The signed-in session: the API key, kept in the tab's session storage (gone when the tab
// closes; never in local storage, a cookie or the URL), and the projects it sees.

import { Api } from './api';

const KEY = 'lizard.apiKey';

export interface Session {
  api: Api;
  /** `GET /v1/projects`: every project for an admin key, its own for a project key. */
  projects: string[];
}

export function storedKey(): string | null {
  try {
    return sessionStorage.getItem(KEY);
  } catch {
    return null;
  }
}

/** Check `key` against the server (`GET /v1/projects`) and keep it for this tab. */
export async function signIn(key: string): Promise<Session> {
  const api = new Api(key.trim());
  const projects = await api.get<string[]>('/v1/projects');
  sessionStorage.setItem(KEY, api.key);
  return { api, projects };
}

export function signOut(): void {
  sessionStorage.removeItem(KEY);
}
