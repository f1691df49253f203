// Compile-time checks of the SDK's public types (declared in src/*.ts, re-exported by src/index.ts)
// against the server's wire types (src/wire.ts, generated from crates/lizard-server/openapi.json by
// `npm run gen:wire`).
// Nothing here runs: test/wire.test.js type-checks this file with `tsc --noEmit --strict`, and
// every `Ok<…>` below fails to compile, naming the field, when the two disagree. So a field added
// to, removed from, renamed or retyped in a wire schema (crates/lizard-proto) fails the SDK's tests
// until the SDK's type — and the code that builds it, named next to each check — follow it.
// The answers' converters are in src/convert.ts, typed with both sides and type-checked too (a
// field they read that the wire renames is an error there).
//
// How the SDK's public types map to the wire (the rules `Problems` applies, at every depth):
//  - names: the wire's snake_case key `a_b_c` is the SDK's camelCase `aBC`;
//  - times: an epoch-milliseconds number on the wire may be a `Date` in the SDK, then named without
//    its `_ms` suffix (`created_at_ms` → `createdAt: Date`; `created_at` → `createdAt: Date`);
//  - null: the wire's `null` is the SDK's absent field (the converters drop nulls);
//  - answers (`'out'`, wire → SDK): every wire value must fit the SDK's type, and a field the wire
//    may omit (optional or nullable) must be optional in the SDK unless the converter fills a
//    default (listed as `defaulted`);
//  - requests (`'in'`, SDK options → wire body): every SDK value must fit the wire's type;
//  - per check, explicitly: `rename` (a wire key the SDK names otherwise), `wireOnly` (wire keys
//    the SDK deliberately does not surface), `sdkOnly` (SDK fields with no wire key: client-side
//    options, derived values), `converted` (fields whose values the converter reshapes; their
//    parts are checked by a check of their own).
// A key of `rename`, `wireOnly` or `sdkOnly` that is not on its side is itself reported (a stale
// exception), so those lists stay exact. When one check has several problems, tsc may print only the
// first of them (the rest show once it is fixed).

import type { components } from '../src/wire.js';
import type * as sdk from '../src/index.js';

type W = components['schemas'];

// ---- machinery -----------------------------------------------------------------------------------

/** Compiles only when `T` is `never`: a non-empty union of problem strings shows in tsc's error. */
type Ok<T extends never> = T;

type Primitive = string | number | boolean | bigint | symbol;
type Defined<T> = Exclude<T, null | undefined>;
type Camel<S extends string> = S extends `${infer H}_${infer T}` ? `${H}${Capitalize<Camel<T>>}` : S;
type IsAny<T> = 0 extends 1 & T ? true : false;
type IsUnknown<T> = IsAny<T> extends true ? false : unknown extends T ? true : false;

interface Cfg {
  dir: 'out' | 'in';
  rename: Record<string, string>;
  wireOnly: string;
  sdkOnly: string;
  defaulted: string;
  converted: string;
}
type Opts<C> = {
  dir: C extends { dir: infer D } ? D : 'out';
  rename: C extends { rename: infer R extends Record<string, string> } ? R : {};
  wireOnly: C extends { wireOnly: infer X extends string } ? X : never;
  sdkOnly: C extends { sdkOnly: infer X extends string } ? X : never;
  defaulted: C extends { defaulted: infer X extends string } ? X : never;
  converted: C extends { converted: infer X extends string } ? X : never;
};

/** The SDK key a wire key `K` maps to, given the SDK type `P`. */
type SdkKey<K extends string, P, C extends Cfg> = K extends keyof C['rename']
  ? C['rename'][K]
  : K extends `${infer B}_ms`
    ? Camel<B> extends keyof P
      ? [Defined<P[Camel<B>]>] extends [Date]
        ? Camel<B>
        : Camel<K>
      : Camel<K>
    : Camel<K>;

type StrKeys<T> = Extract<keyof T, string>;
type OptionalOrNull<T, K extends keyof T> = {} extends Pick<T, K> ? true : null extends T[K] ? true : false;
type IsOptional<T, K extends keyof T> = {} extends Pick<T, K> ? true : undefined extends T[K] ? true : false;

type ObjProblems<P, Wt, Path extends string, C extends Cfg> =
  | {
      [K in StrKeys<Wt>]: K extends C['wireOnly']
        ? never
        : SdkKey<K, P, C> extends infer S extends string
          ? S extends keyof P
            ?
                | (S extends C['converted'] ? never : Go<P[S], Wt[K], `${Path}.${S}`, C>)
                | (C['dir'] extends 'out'
                    ? OptionalOrNull<Wt, K> extends true
                      ? IsOptional<P, S> extends true
                        ? never
                        : S extends C['defaulted']
                          ? never
                          : `${Path}.${S}: the wire may omit ${K} (optional or null) but the SDK's field is required (make it optional, or default it in the converter and list it as defaulted)`
                      : never
                    : never)
            : `${Path}: the wire's ${K} is not in the SDK (expected as ${S})`
          : never;
    }[StrKeys<Wt>]
  | {
      [S in StrKeys<P>]: S extends C['sdkOnly']
        ? never
        : S extends { [K in StrKeys<Wt>]: K extends C['wireOnly'] ? never : SdkKey<K, P, C> }[StrKeys<Wt>]
          ? never
          : `${Path}.${S}: in the SDK but not on the wire`;
    }[StrKeys<P>];

/** Problems (a union of strings; `never` when none) of the SDK type `P` against the wire type `Wt`. */
type Go<P0, W0, Path extends string, C extends Cfg> =
  IsUnknown<W0> extends true
    ? IsUnknown<P0> extends true
      ? never
      : IsAny<P0> extends true
        ? never
        : `${Path}: unknown on the wire but not in the SDK`
    : Split<Defined<P0>, Defined<W0>, Path, C>;

type Split<P, Wt, Path extends string, C extends Cfg> =
  | ([Extract<Wt, Primitive>] extends [never] ? never : Prim<P, Extract<Wt, Primitive>, Path, C>)
  | ([Extract<Wt, readonly unknown[]>] extends [never]
      ? never
      : [Extract<P, readonly unknown[]>] extends [never]
        ? `${Path}: an array on the wire, not in the SDK`
        : Go<
            Extract<P, readonly unknown[]>[number],
            Extract<Wt, readonly unknown[]>[number],
            `${Path}[]`,
            C
          >)
  | ([Exclude<Wt, Primitive | readonly unknown[]>] extends [never]
      ? never
      : [Exclude<P, Primitive | readonly unknown[] | Date>] extends [never]
        ? `${Path}: an object on the wire, not in the SDK`
        : ObjProblems<Exclude<P, Primitive | readonly unknown[] | Date>, Exclude<Wt, Primitive | readonly unknown[]>, Path, C>);

type Prim<P, Wp, Path extends string, C extends Cfg> = [Wp] extends [number]
  ? [Extract<P, Date>] extends [never]
    ? Fits<P, Wp, Path, C>
    : never
  : Fits<P, Wp, Path, C>;

type Fits<P, Wp, Path extends string, C extends Cfg> = C['dir'] extends 'out'
  ? [Wp] extends [P]
    ? never
    : `${Path}: the wire's values do not fit the SDK's type`
  : [Extract<P, Primitive>] extends [Wp]
    ? never
    : `${Path}: the SDK's values do not fit the wire's type`;

/** Exception lists naming keys that are on neither side. */
type Stale<P, Wt, C extends Cfg, Name extends string> =
  | (C['wireOnly'] extends infer K extends string
      ? K extends AllKeys<Wt>
        ? never
        : `${Name}: wireOnly ${K} is not a wire key`
      : never)
  | (C['sdkOnly'] extends infer K extends string
      ? K extends AllKeys<P>
        ? never
        : `${Name}: sdkOnly ${K} is not an SDK key`
      : never)
  | (keyof C['rename'] extends infer K extends string
      ? K extends AllKeys<Wt>
        ? never
        : `${Name}: rename ${K} is not a wire key`
      : never);

/** Keys at any depth (for the stale-exception check). */
type AllKeys<T, D extends unknown[] = []> = D['length'] extends 6
  ? never
  : T extends readonly (infer E)[]
    ? AllKeys<E, [...D, 0]>
    : T extends Primitive | Date | null | undefined
      ? never
      : { [K in StrKeys<T>]: K | AllKeys<Defined<T[K]>, [...D, 0]> }[StrKeys<T>];

/** Every problem of `P` against `Wt` under the options `C0` (see the header), with `Name` as the path. */
type Problems<P, Wt, Name extends string, C0 = {}> = [Wt] extends [never]
  ? `${Name}: no such wire type (or variant)`
  : [P] extends [never]
    ? `${Name}: no such SDK type`
    : Opts<C0> extends infer C extends Cfg
      ? Go<P, Wt, Name, C> | Stale<P, Wt, C, Name>
      : never;

/** The variant of a tagged wire union with this `type`, without the tag (and an EventFrame's `seq`). */
type Variant<U, T extends string> = Omit<Extract<U, { type: T }>, 'type' | 'seq'>;
/** The variant of a wire union that has the key `K` (openapi-typescript drops the `type` tag of a
 * variant that is a `$ref` with sibling properties, such as EventFrame's `result` and `error`). */
type WithKey<U, K extends string> = Omit<Extract<U, Record<K, unknown>>, 'type' | 'seq'>;

// ---- answers: wire → SDK -------------------------------------------------------------------------

// convert.ts toInfo (with toNetwork, toReport, toContextReports). The SDK's `state`
// also has no widening: a new SandboxState value must be added to sdk.SandboxState.
export type SandboxInfo = Ok<
  Problems<sdk.SandboxInfo, W['SandboxInfo'], 'SandboxInfo', { defaulted: 'metadata' | 'lost' | 'restored' }>
>;
export type SandboxState = Ok<Problems<sdk.SandboxState, W['SandboxState'], 'SandboxState'>>;

// convert.ts toContext.
export type Context = Ok<Problems<sdk.Context, W['Context'], 'Context'>>;
// convert.ts toForkedContext: toContext plus forkedFrom and lost.
export type ForkedContext = Ok<Problems<sdk.ForkedContext, W['ContextFork'], 'ContextFork', { defaulted: 'lost' }>>;

// convert.ts toSnapshotInfo.
export type SnapshotInfo = Ok<
  Problems<sdk.SnapshotInfo, W['SnapshotInfo'], 'SnapshotInfo', { defaulted: 'metadata' | 'lost' | 'restored' }>
>;

// convert.ts toNetworkLog (every counter defaults to 0).
export type NetworkLog = Ok<Problems<sdk.NetworkLog, W['NetworkLog'], 'NetworkLog'>>;

// convert.ts toSecretInfo; `created` of Secrets.set comes from the HTTP status (201 or 200).
export type SecretInfo = Ok<Problems<sdk.SecretInfo, W['SecretInfo'], 'SecretInfo'>>;
export type SecretSetResult = Ok<
  Problems<sdk.SecretSetResult, W['SecretInfo'], 'SecretSetResult', { sdkOnly: 'created' }>
>;

// convert.ts toVolumeInfo.
export type VolumeInfo = Ok<Problems<sdk.VolumeInfo, W['VolumeInfo'], 'VolumeInfo'>>;

// convert.ts toTemplateInfo. `error.code` is a string in the SDK (it is also an SDK error's code).
export type TemplateInfo = Ok<
  Problems<sdk.TemplateInfo, W['TemplateInfo'], 'TemplateInfo', { defaulted: 'buildLog' }>
>;
// templates.ts build: the `step` and `log` events are handed to onStep and onLog as they are.
export type TemplateBuildStep = Ok<
  Problems<sdk.TemplateBuildStep, Variant<W['TemplateBuildEvent'], 'step'>, 'TemplateBuildEvent(step)'>
>;
export type TemplateBuildLog = Ok<
  Problems<sdk.TemplateBuildLog, Variant<W['TemplateBuildEvent'], 'log'>, 'TemplateBuildEvent(log)'>
>;
// The `done` and `error` events carry a TemplateInfo (checked above) and an ErrorBody.
export type TemplateBuildDone = Ok<
  Problems<
    { template: sdk.TemplateInfo },
    Variant<W['TemplateBuildEvent'], 'done'>,
    'TemplateBuildEvent(done)',
    { defaulted: 'buildLog' }
  >
>;
export type TemplateBuildFailed = Ok<
  Problems<{ error: { code: string; message: string } }, Variant<W['TemplateBuildEvent'], 'error'>, 'TemplateBuildEvent(error)'>
>;

// convert.ts toEntry and toFsEvent (watchDir drops the `start` event, so `type` lacks it).
export type EntryInfo = Ok<Problems<sdk.EntryInfo, W['EntryInfo'], 'EntryInfo'>>;
export type FilesystemEvent = Ok<
  | Problems<Omit<sdk.FilesystemEvent, 'type'>, Omit<W['FsEvent'], 'type'>, 'FsEvent'>
  | Problems<sdk.FilesystemEvent['type'], Exclude<W['FsEventType'], 'start'>, 'FsEvent.type'>
>;

// convert.ts toProcessInfo and toEnd (`env` is `envs` like every option of the SDK's).
export type ProcessInfo = Ok<
  Problems<sdk.ProcessInfo, W['ProcessInfo'], 'ProcessInfo', { rename: { env: 'envs' }; defaulted: 'envs' | 'timedOut' }>
>;
// commands.ts Fold.result, from the command stream's `start`, `stdout`/`stderr` and `end` events
// (the shape of a foreground command's answer, CommandResult). `exitCode` is the exit status or
// 128 + the signal's number, -1 when unknown (so never absent); the byte counts of dropped
// output, the raw bytes (base64) and `truncated` are not surfaced.
export type CommandResult = Ok<
  Problems<
    sdk.CommandResult,
    W['CommandResult'],
    'CommandResult',
    {
      wireOnly: 'dropped_stderr_bytes' | 'dropped_stdout_bytes' | 'stderr_b64' | 'stdout_b64' | 'truncated';
      defaulted: 'exitCode' | 'timedOut';
    }
  >
>;
export type CommandEvents = Ok<
  | Problems<
      { pid: number },
      Variant<W['CommandEvent'], 'start'>,
      'CommandEvent(start)',
      { wireOnly: 'dropped_stderr_bytes' | 'dropped_stdout_bytes' }
    >
  | Problems<{ text: string; dataB64?: string }, Variant<W['CommandEvent'], 'stdout'>, 'CommandEvent(stdout)'>
  | Problems<{ text: string; dataB64?: string }, Variant<W['CommandEvent'], 'stderr'>, 'CommandEvent(stderr)'>
  | Problems<sdk.ProcessEnd, W['CommandEnd'], 'CommandEnd', { defaulted: 'timedOut' }>
>;
// pty.ts: a terminal's end is the same event, with the exit code of exitCodeOf.
export type PtyResult = Ok<
  Problems<Omit<sdk.PtyResult, 'pid'>, W['CommandEnd'], 'PtyResult', { defaulted: 'exitCode' | 'timedOut' }>
>;
export type PtySize = Ok<Problems<sdk.PtySize, W['PtySize'], 'PtySize'>>;

// execution.ts Execution.apply, one event frame at a time. The `Execution` class derives most of
// its fields (output, text, formats, outputs, success, logs); what comes from the frames:
//   start  → executionCount, contextId;   stdout/stderr → logs.stdout/stderr (stdout/stderr joined);
//   result → results[] (Result);          error → error (ExecutionError);
//   end    → status, durationMs, usage.
type FrameTypes = Extract<W['EventFrame'], { type: string }>['type'];
export type EventFrameTypes = Ok<
  Exclude<FrameTypes, 'start' | 'stdout' | 'stderr' | 'result' | 'error' | 'end'> extends infer X extends string
    ? X extends unknown
      ? `EventFrame: a frame type ${X} that Execution.apply does not handle`
      : never
    : never
>;
export type ExecutionFrames = Ok<
  | Problems<Pick<sdk.Execution, 'executionCount' | 'contextId'>, Variant<W['EventFrame'], 'start'>, 'EventFrame(start)'>
  | Problems<{ text: string }, Variant<W['EventFrame'], 'stdout'>, 'EventFrame(stdout)'>
  | Problems<{ text: string }, Variant<W['EventFrame'], 'stderr'>, 'EventFrame(stderr)'>
  | Problems<
      Pick<sdk.Execution, 'status' | 'durationMs' | 'usage'>,
      Variant<W['EventFrame'], 'end'>,
      'EventFrame(end)'
    >
  | Problems<{ seq: number }, Pick<W['EventFrame'], 'seq'>, 'EventFrame'>
>;
// The non-streamed form of a whole run (W['Execution']), which sandbox.ts folds back into frames.
export type ExecutionJson = Ok<
  Problems<
    Pick<sdk.Execution, 'executionCount' | 'contextId' | 'status' | 'durationMs' | 'usage'> & {
      error?: Omit<sdk.ExecutionError, 'message' | 'toString'>;
      stdout: string[];
      stderr: string[];
      results: ResultWire[];
    },
    W['Execution'],
    'Execution'
  >
>;
// execution.ts Result takes the `result` frame (or an Execution's results[]) as it is: its
// accessors read the MIME bundle `data` (`raw`), `isMainResult` and `metadata`.
type ResultWire = { isMainResult: boolean; data: Record<string, unknown>; metadata?: unknown };
export type ResultFrame = Ok<
  | Problems<ResultWire, W['ExecutionResult'], 'ExecutionResult'>
  | Problems<ResultWire, WithKey<W['EventFrame'], 'is_main_result'>, 'EventFrame(result)'>
  | Problems<Pick<sdk.Result, 'isMainResult' | 'raw' | 'metadata'>, W['ExecutionResult'], 'Result', { rename: { data: 'raw' } }>
>;
// execution.ts ExecutionError (plus `message`, the same as `value`, and `toString`).
export type ExecutionError = Ok<
  | Problems<Omit<sdk.ExecutionError, 'message' | 'toString'>, W['ExecutionError'], 'ExecutionError'>
  | Problems<Omit<sdk.ExecutionError, 'message' | 'toString'>, WithKey<W['EventFrame'], 'traceback'>, 'EventFrame(error)'>
>;
export type ExecutionStatus = Ok<Problems<sdk.ExecutionStatus, W['ExecutionStatus'], 'ExecutionStatus'>>;

// errors.ts (http.ts errorFromResponse): `{ code, message }` → LizardError's `code` and message.
export type ErrorBody = Ok<Problems<{ code: string; message: string }, W['ErrorBody'], 'ErrorBody'>>;

// ---- requests: SDK options → wire body -----------------------------------------------------------

// sandbox.ts create: the options that are not the body's are the connection's and `snapshot`
// (which makes the body `{ snapshot_id, … }` of _fromSnapshot); `egress` and `inject` make its
// `network` (networkBody, checked below); `volumes` names become `{ name }` (volumeMountsBody).
export type CreateOptions = Ok<
  Problems<
    sdk.CreateOptions,
    W['CreateSandboxRequest'],
    'CreateSandboxRequest',
    {
      dir: 'in';
      rename: { env: 'envs'; snapshot_id: 'snapshot' };
      wireOnly: 'network';
      sdkOnly: 'apiUrl' | 'apiKey' | 'requestTimeoutMs' | 'fetch' | 'egress' | 'inject' | 'publicPorts' | 'autoResume';
      converted: 'snapshot' | 'volumes';
    }
  >
>;
export type CreateNetwork = Ok<
  Problems<
    Pick<sdk.CreateOptions, 'egress' | 'inject' | 'publicPorts' | 'autoResume'>,
    W['NetworkRequest'],
    'NetworkRequest',
    { dir: 'in'; converted: 'egress' }
  >
>;
// networkBody turns a list into `{ allow: list }`; the rest of an Egress is the wire's.
export type EgressBody = Ok<Problems<Exclude<sdk.Egress, string[]>, W['Egress'], 'Egress', { dir: 'in' }>>;
export type SetNetworkOptions = Ok<
  Problems<sdk.SetNetworkOptions, W['UpdateNetworkRequest'], 'UpdateNetworkRequest', { dir: 'in'; converted: 'egress' }>
>;
export type VolumeMount = Ok<Problems<sdk.VolumeMount, W['VolumeMountRequest'], 'VolumeMountRequest', { dir: 'in' }>>;
export type Limits = Ok<Problems<Partial<sdk.SandboxLimits>, W['LimitsRequest'], 'LimitsRequest', { dir: 'in' }>>;

// sandbox.ts createContext and forkContext.
export type CreateContextOptions = Ok<
  Problems<sdk.CreateContextOptions, W['CreateContextRequest'], 'CreateContextRequest', { dir: 'in'; converted: 'language' }>
>;
export type ForkContextOptions = Ok<
  Problems<sdk.ForkContextOptions, W['ForkContextRequest'], 'ForkContextRequest', { dir: 'in' }>
>;
// sandbox.ts createSnapshot and fork.
export type CreateSnapshotOptions = Ok<
  Problems<sdk.CreateSnapshotOptions, W['CreateSnapshotRequest'], 'CreateSnapshotRequest', { dir: 'in' }>
>;
export type ForkOptions = Ok<Problems<sdk.ForkOptions, W['ForkSandboxRequest'], 'ForkSandboxRequest', { dir: 'in' }>>;

// sandbox.ts runCode: `context` (an object or an id) becomes the id; `envs` the body's `env`.
export type RunCodeOptions = Ok<
  Problems<
    sdk.RunCodeOptions & { code: string },
    W['ExecuteRequest'],
    'ExecuteRequest',
    {
      dir: 'in';
      rename: { env: 'envs' };
      converted: 'context' | 'language';
      sdkOnly:
        | 'stream'
        | 'onStdout'
        | 'onStderr'
        | 'onOutput'
        | 'onResult'
        | 'onError'
        | 'signal'
        | 'requestTimeoutMs';
    }
  >
>;

// volumes.ts create.
export type VolumeCreateOptions = Ok<
  Problems<
    sdk.VolumeCreateOptions,
    W['CreateVolumeRequest'],
    'CreateVolumeRequest',
    { dir: 'in'; sdkOnly: 'apiUrl' | 'apiKey' | 'requestTimeoutMs' | 'fetch' }
  >
>;

// templates.ts build (a `context` is packed into a tar.gz and sent base64; `fromSandbox` is its id).
export type TemplateBuildOptions = Ok<
  Problems<
    sdk.TemplateBuildOptions,
    W['BuildTemplateRequest'],
    'BuildTemplateRequest',
    {
      dir: 'in';
      converted: 'context' | 'fromSandbox';
      sdkOnly: 'apiUrl' | 'apiKey' | 'requestTimeoutMs' | 'fetch' | 'onStep' | 'onLog' | 'signal' | 'timeoutMs';
    }
  >
>;

// commands.ts run and pty.ts create: `cmd` runs as `bash -c`; `stdin` data is sent after start.
export type CommandStartOptions = Ok<
  Problems<
    sdk.CommandStartOptions & { cmd: string; background?: boolean },
    W['StartCommandRequest'],
    'StartCommandRequest',
    {
      dir: 'in';
      rename: { env: 'envs' };
      wireOnly: 'argv' | 'base64';
      converted: 'stdin';
      sdkOnly: 'onStdout' | 'onStderr' | 'signal' | 'requestTimeoutMs';
    }
  >
>;
export type PtyCreateOptions = Ok<
  Problems<
    sdk.PtyCreateOptions & { background?: boolean },
    W['StartPtyRequest'],
    'StartPtyRequest',
    { dir: 'in'; rename: { env: 'envs' }; wireOnly: 'argv'; sdkOnly: 'onData' | 'signal' }
  >
>;

// Bodies the SDK builds inline (the SDK side is the literal shape its code sends).
// secrets.ts set.
export type SetSecretBody = Ok<Problems<{ name: string; value: string }, W['SetSecretRequest'], 'SetSecretRequest', { dir: 'in' }>>;
// sandbox.ts setTimeout.
export type SetTimeoutBody = Ok<Problems<{ timeoutMs: number }, W['SetTimeoutRequest'], 'SetTimeoutRequest', { dir: 'in' }>>;
// commands.ts kill and pty.ts kill.
export type SignalBody = Ok<Problems<{ signal: 'SIGKILL' }, W['SignalRequest'], 'SignalRequest', { dir: 'in' }>>;
// files.ts makeDir and rename (the only user is `user`, the server's default).
export type MakeDirBody = Ok<Problems<{ path: string }, W['MakeDirRequest'], 'MakeDirRequest', { dir: 'in'; wireOnly: 'user' }>>;
export type RenameBody = Ok<
  Problems<{ from: string; to: string }, W['RenameRequest'], 'RenameRequest', { dir: 'in'; wireOnly: 'user' }>
>;
// commands.ts and pty.ts inputBody: text as `data`, bytes as `data_b64`.
export type InputBody = Ok<
  Problems<{ data?: string; dataB64?: string }, W['ProcessInputRequest'], 'ProcessInputRequest', { dir: 'in' }>
>;
// templates.ts list reads `{ templates }`.
export type TemplateList = Ok<
  Problems<{ templates: sdk.TemplateInfo[] }, W['TemplateList'], 'TemplateList', { defaulted: 'buildLog' }>
>;

// ---- coverage ------------------------------------------------------------------------------------

/**
 * The wire schemas the SDK does not use: the operator's APIs (projects, API keys, audit, usage, a
 * sandbox's metrics samples), which this SDK does not wrap, and the terminal WebSocket's messages
 * (`GET /pty/ws`, for browsers: the SDK's terminals use the PTY API's NDJSON stream). test/wire.test.js checks that every schema of openapi.json is
 * either named as `W['…']` in a check above (or reached from one through `$ref`) or listed here,
 * so a new schema cannot go unnoticed.
 */
export type NotInSdk =
  | 'AuditEvent'
  | 'CreateProjectRequest'
  | 'ExecutionRow'
  | 'MetricSample'
  | 'ProjectCreated'
  | 'ProjectSettings'
  | 'ProjectUsage'
  | 'PtyWsClientMessage'
  | 'PtyWsServerMessage'
  | 'SandboxUsage'
  | 'SnapshotUsage'
  | 'UpdateProjectRequest'
  | 'UsageTotals'
  | 'VolumeUsage';
export type NotInSdkExists = Ok<
  Exclude<NotInSdk, keyof W> extends infer X extends string
    ? X extends unknown
      ? `NotInSdk: ${X} is not a wire schema`
      : never
    : never
>;
