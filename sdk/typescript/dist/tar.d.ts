/**
 * Pack the directory `dir` (its contents, names relative to it) as a tar.gz; with `maxRawBytes`,
 * stop with a RangeError past this many bytes of tar.
 */
export declare function tarGzDirectory(dir: string, opts?: {
    maxRawBytes?: number;
}): Promise<Uint8Array>;
