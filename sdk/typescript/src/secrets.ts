// `Secrets`: a project's secrets (`/v1/projects/{project}/secrets`) — set, list, delete. Secrets
// are write-only: no call returns a value. A sandbox uses them through `network.inject` rules
// (`CodeSandbox.create({ egress, inject: [{ host, headers: { Authorization: 'Bearer
// ${secret:NAME}' } }] })`): the server's egress relay adds the headers on the way out, so the
// values never enter the sandbox. Wire types are the server's (SecretInfo in
// crates/lizard-proto/src/sandbox.rs), converted to camelCase at this boundary (convert.ts). Not here: the
// substitution (the server does it).

import { HttpClient, resolveConfig } from './http.js';
import type { ConnectionOptions } from './http.js';
import { toSecretInfo } from './convert.js';
import { InvalidArgumentError, NotFoundError } from './errors.js';
import type { components } from './wire.js';

type W = components['schemas'];

const enc = encodeURIComponent;

// ---- secrets -------------------------------------------------------------------------------------

/** A secret as the server reports it: its name and times, never its value. */
export interface SecretInfo {
  project: string;
  name: string;
  createdAt: Date;
  /** When its value was last set. */
  updatedAt: Date;
}

/** What {@link Secrets.set} resolves to. */
export interface SecretSetResult extends SecretInfo {
  /** `true` if the secret is new, `false` if its value was replaced. */
  created: boolean;
}

function required(v: unknown, what: string): string {
  if (typeof v !== 'string' || !v) throw new InvalidArgumentError(`${what} must be a non-empty string`);
  return v;
}

function path(project: unknown, name?: unknown): string {
  const base = `/v1/projects/${enc(required(project, 'project'))}/secrets`;
  return name === undefined ? base : `${base}/${enc(required(name, 'the secret name'))}`;
}

/** A project's secrets, write-only: no call returns a value. Sandboxes use them through
 * {@link CreateOptions.inject} rules, and the values never enter them. An admin key reaches
 * every project's, a project key its own (another project is a {@link NotFoundError}). */
export class Secrets {
  private constructor() {}

  /** Create or replace a secret. `name`: 1-64 letters, digits, `_` or `-`; `value`: 1-8192 bytes
   * of visible ASCII or spaces (else an {@link InvalidArgumentError}, which does not show it); at
   * most 256 per project ({@link ConflictError}). Running sandboxes get a new value at their
   * next `setNetwork` or start. */
  static async set(project: string, name: string, value: string, opts: ConnectionOptions = {}): Promise<SecretSetResult> {
    if (typeof value !== 'string') throw new InvalidArgumentError('a secret value must be a string');
    const http = new HttpClient(resolveConfig(opts));
    const { res } = await http.send('POST', path(project), { body: { name: required(name, 'the secret name'), value } });
    return { ...toSecretInfo((await res.json()) as W['SecretInfo']), created: res.status === 201 };
  }

  /** Names and times, never values. */
  static async list(project: string, opts: ConnectionOptions = {}): Promise<SecretInfo[]> {
    const http = new HttpClient(resolveConfig(opts));
    return (((await http.json('GET', path(project))) as W['SecretInfo'][] | undefined) ?? []).map(toSecretInfo);
  }

  /** `true` if deleted, `false` if the project has no such secret. Running sandboxes keep its
   * value until their next start or rule change. */
  static async delete(project: string, name: string, opts: ConnectionOptions = {}): Promise<boolean> {
    const http = new HttpClient(resolveConfig(opts));
    try {
      await http.json('DELETE', path(project, name));
      return true;
    } catch (err) {
      // The server answers 404 for a project the key cannot see too: that one is not `false`
      // but the list's own `NotFoundError`.
      if (err instanceof NotFoundError) {
        await http.json('GET', path(project));
        return false;
      }
      throw err;
    }
  }
}
