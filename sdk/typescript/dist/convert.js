// The SDK's converters from the server's wire types (snake_case JSON, src/wire.d.ts, generated
// from crates/lizard-server/openapi.json) to its public camelCase types (re-exported by src/index.ts). Each one
// is typed with both, and test/wire.test.js type-checks this file with `tsc --strict`:
// a field the wire renames or drops is an error here, where the field is read. The mapping rules
// (and the fields deliberately not surfaced) are stated in test/wire-check.ts. Not here: requests
// (the modules that send them build their bodies) and the streamed frames (execution.ts,
// commands.ts, pty.ts, templates.ts fold them).
/**
 * A context as the API reports it.
 */
export function toContext(w) {
    return {
        id: w.id,
        language: w.language,
        cwd: w.cwd,
        isDefault: Boolean(w.is_default),
        state: w.state,
        executionCount: w.execution_count ?? 0,
        kernelRestarts: w.kernel_restarts ?? 0,
        ...(w.last_restart_reason ? { lastRestartReason: w.last_restart_reason } : {}),
        ...(w.limits
            ? {
                limits: {
                    ...(w.limits.memory_mb != null ? { memoryMb: w.limits.memory_mb } : {}),
                    ...(w.limits.cpu_millicores != null ? { cpuMillicores: w.limits.cpu_millicores } : {}),
                },
            }
            : {}),
        ...(w.memory_bytes != null ? { memoryBytes: w.memory_bytes } : {}),
    };
}
/**
 * The answer of a context fork: a context, where it was forked from, and what it lost.
 */
export function toForkedContext(w) {
    return {
        ...toContext(w),
        forkedFrom: w.forked_from,
        lost: (w.lost ?? []).map((l) => ({ name: l.name, reason: l.reason })),
        method: w.method ?? 'live',
        ...(w.checkpoint_error != null ? { checkpointError: w.checkpoint_error } : {}),
    };
}
/**
 * A sandbox's or a snapshot's limits.
 */
export function toLimits(l) {
    return {
        memoryMb: l.memory_mb,
        cpuMillicores: l.cpu_millicores,
        pids: l.pids,
        tmpMb: l.tmp_mb,
        diskMb: l.disk_mb,
    };
}
/**
 * A sandbox as the API reports it.
 */
export function toInfo(w) {
    return {
        sandboxId: w.sandbox_id,
        project: w.project,
        template: w.template,
        state: w.state,
        createdAt: new Date(w.created_at_ms),
        timeoutAt: new Date(w.timeout_at_ms),
        onTimeout: w.on_timeout ?? 'kill',
        metadata: w.metadata ?? {},
        ...(w.hibernation ? { hibernation: toReport(w.hibernation) } : {}),
        ...(w.restore ? { restore: toReport(w.restore) } : {}),
        limits: w.limits ? toLimits(w.limits) : undefined,
        network: toNetwork(w.network),
        volumes: (w.volumes ?? []).map((v) => ({
            volumeId: v.volume_id,
            name: v.name,
            mountPath: v.mount_path,
            readOnly: Boolean(v.read_only),
        })),
    };
}
/**
 * A hibernation report: per context, what was saved/restored and what was lost.
 */
export function toReport(r) {
    return {
        method: r.method,
        methodReason: r.method_reason,
        contexts: toContextReports(r.contexts),
    };
}
/**
 * Per-context reports (saved/restored items and what was lost).
 */
export function toContextReports(contexts) {
    return (contexts ?? []).map((c) => ({
        id: c.id,
        language: c.language,
        restored: (c.restored ?? []).map((i) => ({ name: i.name, kind: i.kind })),
        lost: (c.lost ?? []).map((l) => ({ name: l.name, reason: l.reason })),
    }));
}
/**
 * The `network` of a `SandboxInfo` (`{ egress, inject?, publicPorts?, autoResume? }`, the same
 * shape in camelCase).
 */
export function toNetwork(w) {
    const e = w?.egress ?? 'none';
    const rules = w?.inject ?? [];
    const inject = {
        ...(rules.length ? { inject: rules.map((r) => ({ host: r.host, headers: { ...r.headers } })) } : {}),
        ...(w?.public_ports ? { publicPorts: true } : {}),
        ...(w?.auto_resume ? { autoResume: true } : {}),
    };
    if (typeof e === 'string')
        return { egress: e, ...inject };
    return {
        egress: {
            ...(e.allow != null ? { allow: e.allow } : {}),
            ...(e.deny != null ? { deny: e.deny } : {}),
        },
        ...inject,
    };
}
/**
 * `GET …/network/log`.
 */
export function toNetworkLog(w) {
    const m = w.mirror ?? {};
    const e = w.egress ?? {};
    return {
        sandboxId: w.sandbox_id,
        mirror: {
            requests: m.requests ?? 0,
            cacheHits: m.cache_hits ?? 0,
            cacheMisses: m.cache_misses ?? 0,
            refused: m.refused ?? 0,
            upstreamBytes: m.upstream_bytes ?? 0,
            servedBytes: m.served_bytes ?? 0,
            rejectedConnections: m.rejected_connections ?? 0,
        },
        egress: {
            connections: e.connections ?? 0,
            bytesOut: e.bytes_out ?? 0,
            bytesIn: e.bytes_in ?? 0,
            refused: e.refused ?? 0,
        },
        refused: (w.refused ?? []).map((r) => ({
            at: new Date(r.at_ms),
            method: r.method,
            destination: r.destination,
            ...(r.reason != null ? { reason: r.reason } : {}),
        })),
    };
}
/**
 * A snapshot as the API reports it.
 */
export function toSnapshotInfo(w) {
    return {
        snapshotId: w.snapshot_id,
        sandboxId: w.sandbox_id,
        project: w.project,
        template: w.template,
        createdAt: new Date(w.created_at_ms),
        sizeBytes: w.size_bytes,
        method: w.method,
        methodReason: w.method_reason,
        frozenMs: w.frozen_ms ?? undefined,
        contexts: toContextReports(w.contexts),
        metadata: w.metadata ?? {},
        limits: w.limits ? toLimits(w.limits) : undefined,
    };
}
/**
 * A secret as the API reports it (never its value).
 */
export function toSecretInfo(w) {
    return {
        project: w.project,
        name: w.name,
        createdAt: new Date(w.created_at_ms),
        updatedAt: new Date(w.updated_at_ms),
    };
}
/**
 * A volume as the API reports it.
 */
export function toVolumeInfo(w) {
    return {
        volumeId: w.volume_id,
        project: w.project,
        name: w.name,
        sizeLimitBytes: w.size_limit_bytes,
        usedBytes: w.used_bytes,
        createdAt: new Date(w.created_at_ms),
        mountedBy: w.mounted_by ?? [],
    };
}
function isPlainObject(v) {
    return v !== null && typeof v === 'object' && !Array.isArray(v);
}
/**
 * A template as the API reports it.
 */
export function toTemplateInfo(w) {
    const p = w.packages;
    return {
        name: w.name,
        project: w.project ?? undefined,
        builtin: Boolean(w.builtin),
        public: Boolean(w.public),
        state: w.state,
        base: w.base ?? undefined,
        key: w.key ?? undefined,
        sizeBytes: w.size_bytes ?? 0,
        createdAt: new Date(w.created_at ?? 0),
        updatedAt: new Date(w.updated_at ?? 0),
        error: w.error ? { code: w.error.code, message: w.error.message } : undefined,
        versions: (w.versions ?? []).map((v) => ({
            key: v.key,
            state: v.state,
            createdAt: new Date(v.created_at ?? 0),
            sizeBytes: v.size_bytes ?? 0,
        })),
        buildLog: w.build_log ?? '',
        packages: p && isPlainObject(p)
            ? {
                debian: { ...(p.debian ?? {}) },
                python: { ...(p.python ?? {}) },
                node: { ...(p.node ?? {}) },
            }
            : undefined,
    };
}
/**
 * A filesystem entry.
 */
export function toEntry(w) {
    return {
        name: w.name,
        path: w.path,
        type: w.type,
        size: w.size,
        mode: w.mode,
        permissions: w.permissions,
        owner: w.owner,
        group: w.group,
        modifiedMs: w.modified_ms,
        ...(w.symlink_target != null ? { symlinkTarget: w.symlink_target } : {}),
    };
}
/**
 * A watch event other than the stream's first (`start`, which the caller skips).
 */
export function toFsEvent(w) {
    return { type: w.type, path: w.path, name: w.name, isDir: Boolean(w.is_dir) };
}
/**
 * How a process ended.
 */
export function toEnd(w) {
    if (!w)
        return undefined;
    return {
        ...(w.exit_code != null ? { exitCode: w.exit_code } : {}),
        ...(w.signal ? { signal: w.signal } : {}),
        timedOut: Boolean(w.timed_out),
        durationMs: w.duration_ms ?? 0,
    };
}
/**
 * A process as `GET …/commands` lists it.
 */
export function toProcessInfo(w) {
    const end = toEnd(w.end);
    return {
        pid: w.pid,
        ...(w.cmd != null ? { cmd: w.cmd } : {}),
        argv: w.argv ?? [],
        cwd: w.cwd,
        envs: w.env ?? {},
        ...(w.tag != null ? { tag: w.tag } : {}),
        ...(w.pty ? { pty: { cols: w.pty.cols, rows: w.pty.rows } } : {}),
        stdin: Boolean(w.stdin),
        startedAtMs: w.started_at_ms,
        ...(end ? { end } : {}),
    };
}
