import type * as NodeNet from 'node:net';
import type { Transport } from './transport.js';
/**
 * The transport: HTTP/1.1 over `net` for `http:` URLs with bodies known in full, `fallback` for
 * the rest.
 */
export declare function netTransport(net: Pick<typeof NodeNet, 'connect'>, fallback: Transport): Transport;
