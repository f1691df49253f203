// A small tar writer for template build contexts: packs a directory as a POSIX (ustar + PAX) tar,
// gzipped with node:zlib. Regular files, directories and symlinks (as symlinks, never followed);
// devices, fifos and sockets are left out. Owners are root and times zero, names sorted, so the same
// files give the same bytes (and the server's build cache hits). Not here: reading tars, or
// anything a build does with them (the server unpacks the context).
import { lstat, readFile, readdir, readlink } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
const BLOCK = 512;
const enc = new TextEncoder();
/** Write `value` as a NUL-terminated octal field of `len` bytes at `off`. */
function octal(buf, off, len, value) {
    const s = value.toString(8).padStart(len - 1, '0');
    if (s.length > len - 1)
        throw new RangeError(`tar: ${value} does not fit in ${len} bytes`);
    buf.set(enc.encode(s), off);
}
/** One 512-byte ustar header; `name`/`linkname` longer than the fields go in a PAX header first. */
function header({ name, mode, size = 0, type, linkname = '' }) {
    const h = new Uint8Array(BLOCK);
    h.set(enc.encode(name).subarray(0, 100), 0);
    octal(h, 100, 8, mode & 0o7777);
    octal(h, 108, 8, 0); // uid
    octal(h, 116, 8, 0); // gid
    octal(h, 124, 12, size);
    octal(h, 136, 12, 0); // mtime
    h.fill(0x20, 148, 156); // checksum: spaces while summing
    h[156] = type.charCodeAt(0);
    h.set(enc.encode(linkname).subarray(0, 100), 157);
    h.set(enc.encode('ustar\u000000'), 257);
    let sum = 0;
    for (const b of h)
        sum += b;
    h.set(enc.encode(sum.toString(8).padStart(6, '0') + '\u0000 '), 148);
    return h;
}
/** A PAX record `"<len> key=value\n"` (len counts the whole record, itself included). */
function paxRecord(key, value) {
    const body = ` ${key}=${value}\n`;
    const n = enc.encode(body).length;
    let len = n + String(n).length;
    if (String(len).length !== String(n).length)
        len = n + String(len).length;
    return `${len}${body}`;
}
function padded(bytes) {
    const rest = bytes.length % BLOCK;
    return rest === 0 ? [bytes] : [bytes, new Uint8Array(BLOCK - rest)];
}
/** The tar blocks of one entry (with its PAX header when a name does not fit ustar's 100 bytes). */
function entry(e, data) {
    const out = [];
    let pax = '';
    if (enc.encode(e.name).length > 100)
        pax += paxRecord('path', e.name);
    if (e.linkname && enc.encode(e.linkname).length > 100)
        pax += paxRecord('linkpath', e.linkname);
    if (pax) {
        const p = enc.encode(pax);
        out.push(header({ name: 'PaxHeader', mode: 0o644, size: p.length, type: 'x' }), ...padded(p));
    }
    out.push(header({ ...e, size: data ? data.length : 0 }));
    if (data && data.length)
        out.push(...padded(data));
    return out;
}
/**
 * Pack the directory `dir` (its contents, names relative to it) as a tar.gz; with `maxRawBytes`,
 * stop with a RangeError past this many bytes of tar.
 */
export async function tarGzDirectory(dir, opts = {}) {
    const maxRaw = opts.maxRawBytes ?? 512 * 1024 * 1024;
    const chunks = [];
    let total = 0;
    const push = (blocks) => {
        for (const b of blocks) {
            total += b.length;
            chunks.push(b);
        }
        if (total > maxRaw)
            throw new RangeError(`the build context ${dir} is larger than ${maxRaw} bytes`);
    };
    const walk = async (abs, rel) => {
        const names = (await readdir(abs)).sort();
        for (const n of names) {
            const full = join(abs, n);
            const name = rel ? `${rel}/${n}` : n;
            const st = await lstat(full);
            if (st.isDirectory()) {
                push(entry({ name: `${name}/`, mode: st.mode, type: '5' }));
                await walk(full, name);
            }
            else if (st.isSymbolicLink()) {
                push(entry({ name, mode: st.mode, type: '2', linkname: await readlink(full) }));
            }
            else if (st.isFile()) {
                push(entry({ name, mode: st.mode, type: '0' }, await readFile(full)));
            } // devices, fifos, sockets: nothing a build can use
        }
    };
    await walk(dir, '');
    push([new Uint8Array(2 * BLOCK)]);
    const tar = new Uint8Array(total);
    let off = 0;
    for (const c of chunks) {
        tar.set(c, off);
        off += c.length;
    }
    return new Uint8Array(gzipSync(tar));
}
