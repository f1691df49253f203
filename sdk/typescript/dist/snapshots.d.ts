import type { ConnectionOptions } from './http.js';
import type { ContextReport, SandboxLimits } from './sandbox.js';
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
export declare function snapshotId(snapshot: unknown): string;
/** Saved copies of running sandboxes: taken with {@link CodeSandbox.createSnapshot}, started from
 * with `CodeSandbox.create({ snapshot })`. */
export declare class Snapshots {
    private constructor();
    static list(opts?: SnapshotListOptions): Promise<SnapshotInfo[]>;
    /** {@link NotFoundError} if the key cannot see it. */
    static get(snapshot: string | SnapshotInfo, opts?: ConnectionOptions): Promise<SnapshotInfo>;
    /** `true` if deleted, `false` if it did not exist (or the key cannot see it). Clones keep running. */
    static delete(snapshot: string | SnapshotInfo, opts?: ConnectionOptions): Promise<boolean>;
}
