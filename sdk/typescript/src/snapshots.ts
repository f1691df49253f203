// `Snapshots`: saved copies of running sandboxes (`/v1/snapshots`) — list, get, delete. A snapshot
// is taken with `sandbox.createSnapshot()` and new sandboxes start from it with
// `CodeSandbox.create({ snapshot })` (clones: each its own copy of the disk and of the kernels'
// state). Wire types are the server's (see crates/lizard-proto/src/snapshot.rs), converted to
// camelCase at this boundary (convert.ts). Not here: the capture itself (the server does it).

import { HttpClient, query, resolveConfig } from './http.js';
import type { ConnectionOptions } from './http.js';
import { toSnapshotInfo } from './convert.js';
import { InvalidArgumentError, NotFoundError } from './errors.js';
import type { ContextReport, SandboxLimits } from './sandbox.js';
import type { components } from './wire.js';

type W = components['schemas'];

const enc = encodeURIComponent;

// ---- snapshots -----------------------------------------------------------------------------------

/** How memory state was captured: `criu` — every process of the sandbox checkpointed (memory,
 * threads, sockets, running commands) —, or `per-language` — each kernel saved its own state
 * (variables, functions, imports, cwd); what cannot be saved is listed in `lost`. */
export type SnapshotMethod = 'criu' | 'per-language' | (string & {});

/** Options of {@link CodeSandbox.createSnapshot}. */
export interface CreateSnapshotOptions {
  /** Free-form string labels of the snapshot. */
  metadata?: Record<string, string>;
}

/** Options of {@link CodeSandbox.fork}. */
export interface ForkOptions {
  /** The fork's lifetime in ms (the source's timeout when absent). */
  timeoutMs?: number;
  /** The fork's labels. */
  metadata?: Record<string, string>;
}

/** A snapshot as the server reports it. */
export interface SnapshotInfo {
  /** `snap_…`: what `CodeSandbox.create({ snapshot })` takes. */
  snapshotId: string;
  /** The sandbox it was taken of (it may be gone since). */
  sandboxId: string;
  project: string;
  template: string;
  createdAt: Date;
  /** Host disk the snapshot holds. */
  sizeBytes: number;
  /** How the memory state was captured. */
  method: SnapshotMethod;
  /** Why this method (what the host offers). */
  methodReason: string;
  /** How long the source sandbox was frozen for the snapshot (memory dump and disk copy), in
   * milliseconds; absent for snapshots of older servers. */
  frozenMs?: number;
  /** Per context: what was saved (`restored`) and what could not be (`lost`). */
  contexts: ContextReport[];
  metadata: Record<string, string>;
  /** The source's limits, which every clone gets. */
  limits?: SandboxLimits;
}

/** Options of {@link Snapshots.list}. */
export interface SnapshotListOptions extends ConnectionOptions {
  /** Only the snapshots of this sandbox. */
  sandboxId?: string;
  /** Admin keys: only this project's (every project's when absent). */
  project?: string;
}

/** A snapshot given as its id (`snap_…`) or as a {@link SnapshotInfo} object → its id. */
export function snapshotId(snapshot: unknown): string {
  if (typeof snapshot === 'string' && snapshot) return snapshot;
  if (snapshot !== null && typeof snapshot === 'object') {
    const id: unknown = (snapshot as { snapshotId?: unknown }).snapshotId;
    if (typeof id === 'string' && id) return id;
  }
  throw new InvalidArgumentError('a snapshot must be a snapshot id (snap_…) or a SnapshotInfo');
}

/** Saved copies of running sandboxes: taken with {@link CodeSandbox.createSnapshot}, started from
 * with `CodeSandbox.create({ snapshot })`. */
export class Snapshots {
  private constructor() {}

  static async list(opts: SnapshotListOptions = {}): Promise<SnapshotInfo[]> {
    const http = new HttpClient(resolveConfig(opts));
    const list = (await http.json(
      'GET',
      `/v1/snapshots${query({ sandbox_id: opts.sandboxId, project: opts.project })}`,
    )) as W['SnapshotInfo'][];
    return list.map(toSnapshotInfo);
  }

  /** {@link NotFoundError} if the key cannot see it. */
  static async get(snapshot: string | SnapshotInfo, opts: ConnectionOptions = {}): Promise<SnapshotInfo> {
    const id = snapshotId(snapshot);
    const http = new HttpClient(resolveConfig(opts));
    return toSnapshotInfo((await http.json('GET', `/v1/snapshots/${enc(id)}`)) as W['SnapshotInfo']);
  }

  /** `true` if deleted, `false` if it did not exist (or the key cannot see it). Clones keep running. */
  static async delete(snapshot: string | SnapshotInfo, opts: ConnectionOptions = {}): Promise<boolean> {
    const id = snapshotId(snapshot);
    const http = new HttpClient(resolveConfig(opts));
    try {
      await http.json('DELETE', `/v1/snapshots/${enc(id)}`);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }
}
