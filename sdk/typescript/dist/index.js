// Entry point of `@lizard-build/sdk`: re-exports the public API (CodeSandbox, the execution types,
// the typed errors and the types of options and answers). No logic lives here. The package ships
// what `tsc` makes of these sources (dist/: ESM and declarations, `npm run build`).
//
// The server's wire types (the JSON of the HTTP API, snake_case) are in wire.d.ts, generated from
// crates/lizard-server/openapi.json (`npm run gen:wire`). The SDK's types are its camelCase view of
// them, made from the answers by the typed converters of convert.ts; test/wire-check.ts checks each
// one against its wire schema at compile time (a field added, removed, renamed or retyped on the
// wire fails the SDK's tests until the type and the code that builds it follow) and lists where and
// why the SDK deliberately differs. The pure enumerations are aliases of the wire's.
export { CodeSandbox, DEFAULT_TEMPLATE } from './sandbox.js';
export { Execution, ExecutionError, Result } from './execution.js';
export { AuthenticationError, CommandExitError, ConflictError, ConnectionError, InvalidArgumentError, LizardError, NotFoundError, RateLimitError, SandboxError, TemplateBuildError, TemplateInUseError, TimeoutError, VolumeInUseError, } from './errors.js';
export { Volumes } from './volumes.js';
export { Templates } from './templates.js';
export { Snapshots } from './snapshots.js';
export { Secrets } from './secrets.js';
export { DEFAULT_API_URL } from './http.js';
