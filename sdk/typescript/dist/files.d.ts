import { SandboxNamespace } from './commands.js';
/** A filesystem entry (symlinks are not followed). */
export interface EntryInfo {
    /** The last path component. */
    name: string;
    /** The normalised absolute path. */
    path: string;
    type: 'file' | 'dir' | 'symlink' | 'other';
    /** Bytes (of the link itself for a symlink). */
    size: number;
    /** Permission bits, e.g. 420 (= 0o644). */
    mode: number;
    /** `ls -l` style, e.g. `-rw-r--r--`. */
    permissions: string;
    owner: string;
    group: string;
    /** Last modification, milliseconds since the Unix epoch. */
    modifiedMs: number;
    /** Where a symlink points. */
    symlinkTarget?: string;
}
/** A change seen by {@link Files.watchDir}. */
export interface FilesystemEvent {
    type: 'create' | 'write' | 'remove' | 'rename' | 'chmod';
    /** Absolute path of the affected entry. */
    path: string;
    /** `path` relative to the watched directory. */
    name: string;
    isDir: boolean;
}
/** What {@link Files.watchDir} resolves to. */
export interface WatchHandle {
    /** Stop watching. */
    stop(): Promise<void>;
}
/** What a file can be written from. */
export type FileData = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;
/** Options of file transfers. */
export interface FileRequestOptions {
    signal?: AbortSignal;
    /** Client deadline in ms (not applied to streams). */
    requestTimeoutMs?: number;
}
/** `sandbox.files`: the sandbox's filesystem. Relative paths start at `/home/user`. */
export declare class Files extends SandboxNamespace {
    read(path: string, opts?: FileRequestOptions & {
        format?: 'text';
    }): Promise<string>;
    read(path: string, opts: FileRequestOptions & {
        format: 'bytes';
    }): Promise<Uint8Array>;
    read(path: string, opts: FileRequestOptions & {
        format: 'stream';
    }): Promise<ReadableStream<Uint8Array>>;
    /** Write a file (parents are created, an existing file is replaced). */
    write(path: string, data: FileData, opts?: FileRequestOptions): Promise<EntryInfo>;
    /** Write several files, one after the other. */
    write(files: {
        path: string;
        data: FileData;
    }[], opts?: FileRequestOptions): Promise<EntryInfo[]>;
    /** Entries below a directory, `depth` levels deep (default 1), sorted by path. */
    list(path: string, opts?: {
        depth?: number;
    }): Promise<EntryInfo[]>;
    exists(path: string): Promise<boolean>;
    getInfo(path: string): Promise<EntryInfo>;
    /** Create a directory and its parents: `false` if it already existed. */
    makeDir(path: string): Promise<boolean>;
    /** Remove a file, symlink, or directory with its contents. */
    remove(path: string): Promise<void>;
    /** Move `from` to `to`; resolves to the moved entry. */
    rename(from: string, to: string): Promise<EntryInfo>;
    /** Watch a directory; resolves once the watch is in place. */
    watchDir(path: string, onEvent: (event: FilesystemEvent) => unknown, opts?: {
        recursive?: boolean;
        signal?: AbortSignal;
        onExit?: (err?: unknown) => unknown;
    }): Promise<WatchHandle>;
}
