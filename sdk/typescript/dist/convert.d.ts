import type { components } from './wire.js';
import type * as Sdk from './index.js';
type W = components['schemas'];
/**
 * A context as the API reports it.
 */
export declare function toContext(w: W['Context']): Sdk.Context;
/**
 * The answer of a context fork: a context, where it was forked from, and what it lost.
 */
export declare function toForkedContext(w: W['ContextFork']): Sdk.ForkedContext;
/**
 * A sandbox's or a snapshot's limits.
 */
export declare function toLimits(l: W['SandboxLimits']): Sdk.SandboxLimits;
/**
 * A sandbox as the API reports it.
 */
export declare function toInfo(w: W['SandboxInfo']): Sdk.SandboxInfo;
/**
 * A hibernation report: per context, what was saved/restored and what was lost.
 */
export declare function toReport(r: W['HibernationReport']): Sdk.HibernationReport;
/**
 * Per-context reports (saved/restored items and what was lost).
 */
export declare function toContextReports(contexts: W['ContextReport'][] | undefined): Sdk.ContextReport[];
/**
 * The `network` of a `SandboxInfo` (`{ egress, inject?, publicPorts?, autoResume? }`, the same
 * shape in camelCase).
 */
export declare function toNetwork(w: W['NetworkRequest'] | undefined): Sdk.SandboxNetwork;
/**
 * `GET …/network/log`.
 */
export declare function toNetworkLog(w: W['NetworkLog']): Sdk.NetworkLog;
/**
 * A snapshot as the API reports it.
 */
export declare function toSnapshotInfo(w: W['SnapshotInfo']): Sdk.SnapshotInfo;
/**
 * A secret as the API reports it (never its value).
 */
export declare function toSecretInfo(w: W['SecretInfo']): Sdk.SecretInfo;
/**
 * A volume as the API reports it.
 */
export declare function toVolumeInfo(w: W['VolumeInfo']): Sdk.VolumeInfo;
/**
 * A template as the API reports it.
 */
export declare function toTemplateInfo(w: W['TemplateInfo']): Sdk.TemplateInfo;
/**
 * A filesystem entry.
 */
export declare function toEntry(w: W['EntryInfo']): Sdk.EntryInfo;
/**
 * A watch event other than the stream's first (`start`, which the caller skips).
 */
export declare function toFsEvent(w: W['FsEvent'] & {
    type: Exclude<W['FsEventType'], 'start'>;
}): Sdk.FilesystemEvent;
/**
 * How a process ended.
 */
export declare function toEnd(w: W['CommandEnd'] | null | undefined): Sdk.ProcessEnd | undefined;
/**
 * A process as `GET …/commands` lists it.
 */
export declare function toProcessInfo(w: W['ProcessInfo']): Sdk.ProcessInfo;
export {};
