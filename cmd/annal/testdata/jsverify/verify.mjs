// verify.mjs: an independent verifier of annal's exports, signed
// checkpoints and proofs, written from docs/format.md alone (sections 9.1
// to 9.5 for the tree, checkpoints and proofs; 9.7 for the log in a
// bucket as tiles; 3 to 5 for the Event IDs),
// with nothing but node's built-in modules. It is annal's check that a
// stranger can implement the formats from that page: it never reads
// annal's code, and annal's tests run it on what annal produced.
//
// Usage:
//
//   node verify.mjs --key K --export FILE --checkpoint C
//                   [--note C2]... [--inclusion P.json]... [--consistency P.json]...
//                   [--ids] [--evently]
//   node verify.mjs --manifest M.json
//   node verify.mjs --key K --tiles DIR [--note C]... [--leaf I]...
//
// K is the verifier key (format.md 9.3: "name+hash+base64"), or a file
// holding it. C is a signed checkpoint (9.3); FILE an export (9.1). It
// checks, and prints what it checked:
//
//   - the checkpoint's signature by K, and that its origin ends with "/"
//     and the export's ledger ID;
//   - that the export has at least the checkpoint's size lines and that
//     the root of its first `size` lines (9.1, 9.2) is the checkpoint's;
//   - each --note: another signed checkpoint of the same ledger, verified
//     like C; if the export has that many lines, its root must be the
//     export's too;
//   - each inclusion proof (9.4): the leaf hash recomputed from the export's
//     line leafIndex (the proof's leafHash must equal it, it is not used),
//     the line's eventId and sequence number the proof's, and RFC 9162's
//     algorithm against the trusted root of size treeSize;
//   - each consistency proof (9.4) against the trusted roots of sizes
//     oldSize and newSize (the proof's oldRoot and newRoot must equal them;
//     they are not used);
//   - with --ids, every line's Event ID and the chain (3, 4, 5), and that
//     the line is written as annal writes it (9.1);
//   - with --evently, the leaf bytes are each line rewritten in annal's
//     form (9.1: for files written by Evently), and --ids is implied.
//
// A trusted root of size s is the root of a signed note verified with K
// (C, a --note, a proof's "checkpoint"), or, for s at most C's size, the
// root of the export's first s lines (which C's root authenticates). Two
// trusted roots of one size must agree. A proof whose tree has no trusted
// root fails.
//
// With --tiles, DIR is a ledger's folder of a bucket as files (9.7):
// DIR/checkpoint signed by K, the root that DIR's tiles give at its size,
// the inclusion of each leaf I (its entry from its bundle, or from
// leaf/I when empty, the path built from the tiles) and the consistency
// of each older checkpoint C with it (the proof built from the tiles),
// and the root that the tiles of C's size give. A partial tile or bundle
// that is missing (the log deleted it once its full tile was stored, as
// C2SP tlog-tiles allows) is read from the first hashes or entries of
// its full tile.
//
// A manifest runs many such checks in one process:
//
//   {"key": K, "cases": [{"name": "...", "export": FILE, "checkpoint": C,
//     "notes": [...], "inclusion": [...], "consistency": [...],
//     "ids": false, "evently": false,
//     "expect": "ok" | "fail", "failMatch": "text the failure must name"}]}
//
// Paths are relative to the manifest's directory. Each case prints one line,
// "ok NAME: ..." or "FAIL NAME: reason" ("failed as expected" for expected
// failures). The exit status is 0 only if every case ended as expected
// (and, for a single check, only if everything verified); 1 otherwise, 2
// for bad usage.

import { createHash, createPublicKey, verify as cryptoVerify } from "node:crypto";
import { readFileSync, existsSync } from "node:fs";
import { dirname, resolve } from "node:path";

class VerifyError extends Error {}

function fail(msg) {
  throw new VerifyError(msg);
}

// ---- hashing (9.1, 9.2) ----

function sha256(...parts) {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest();
}

const LEAF = Buffer.from([0x00]);
const NODE = Buffer.from([0x01]);

function leafHash(leafBytes) {
  return sha256(LEAF, leafBytes);
}

function nodeHash(left, right) {
  return sha256(NODE, left, right);
}

// largestPowerOf2Below returns the largest power of 2 smaller than n (n >= 2).
function largestPowerOf2Below(n) {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

// mth is RFC 9162's MTH over hashes[lo, hi), hi - lo >= 1 (9.2).
function mth(hashes, lo, hi) {
  const n = hi - lo;
  if (n === 1) return hashes[lo];
  const k = largestPowerOf2Below(n);
  return nodeHash(mth(hashes, lo, lo + k), mth(hashes, lo + k, hi));
}

// ---- the verifier key and signed notes (9.3) ----

function b64decodeStrict(s, what) {
  if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(s)) {
    fail(`${what}: not standard base64 with padding: ${JSON.stringify(s)}`);
  }
  const b = Buffer.from(s, "base64");
  if (b.toString("base64") !== s) fail(`${what}: not canonical base64: ${JSON.stringify(s)}`);
  return b;
}

function keyHash(name, pub) {
  return sha256(Buffer.from(name + "\n", "utf8"), Buffer.from([0x01]), pub).subarray(0, 4);
}

// parseVerifierKey reads "name+hash+base64(0x01 ‖ key)". The name cannot
// hold "+", the base64 can: split at the first two.
function parseVerifierKey(text) {
  const s = text.trim();
  const p1 = s.indexOf("+");
  const p2 = p1 < 0 ? -1 : s.indexOf("+", p1 + 1);
  if (p1 <= 0 || p2 < 0) fail(`verifier key: not "name+hash+key": ${JSON.stringify(s)}`);
  const name = s.slice(0, p1);
  const hashHex = s.slice(p1 + 1, p2);
  if (/[\s+]/.test(name) || !/^[\x21-\x7e]+$/.test(name)) fail(`verifier key: bad key name ${JSON.stringify(name)}`);
  if (!/^[0-9a-f]{8}$/.test(hashHex)) fail(`verifier key: key hash ${JSON.stringify(hashHex)} is not 8 lower-case hex digits`);
  const raw = b64decodeStrict(s.slice(p2 + 1), "verifier key");
  if (raw.length !== 33 || raw[0] !== 0x01) fail(`verifier key: not 0x01 and a 32-byte Ed25519 key (${raw.length} bytes, type ${raw[0]})`);
  const pub = raw.subarray(1);
  const h = keyHash(name, pub);
  if (h.toString("hex") !== hashHex) fail(`verifier key: key hash ${hashHex} is not the key's (${h.toString("hex")})`);
  const keyObject = createPublicKey({
    key: { kty: "OKP", crv: "Ed25519", x: pub.toString("base64url") },
    format: "jwk",
  });
  return { name, hash: h, pub, keyObject, text: s };
}

const EM_DASH_SPACE = Buffer.from("\u2014 ", "utf8"); // e2 80 94 20

// verifyNote checks a signed note's signature by key and returns its body
// (the bytes signed).
function verifyNote(buf, key, what) {
  if (buf.length === 0 || buf[buf.length - 1] !== 0x0a) fail(`${what}: a signed note ends with "\\n"`);
  // The body ends at the last empty line: the signatures follow it.
  let sep = -1;
  for (let i = buf.length - 2; i >= 0; i--) {
    if (buf[i] === 0x0a && buf[i + 1] === 0x0a) {
      sep = i;
      break;
    }
  }
  if (sep < 0) fail(`${what}: no empty line before the signatures`);
  const body = buf.subarray(0, sep + 1);
  const sigBlock = buf.subarray(sep + 2);
  const lines = sigBlock.toString("utf8").split("\n");
  lines.pop(); // after the last "\n"
  if (lines.length === 0) fail(`${what}: no signature lines`);
  let checked = 0;
  for (const line of lines) {
    if (!line.startsWith("\u2014 ")) fail(`${what}: signature line does not start with "— ": ${JSON.stringify(line)}`);
    const rest = line.slice(2);
    const sp = rest.lastIndexOf(" ");
    if (sp <= 0) fail(`${what}: signature line is not "— name base64": ${JSON.stringify(line)}`);
    const name = rest.slice(0, sp);
    const sig = b64decodeStrict(rest.slice(sp + 1), `${what}: signature of ${name}`);
    if (sig.length < 4) fail(`${what}: signature of ${name} is shorter than its key hash`);
    if (name !== key.name || !sig.subarray(0, 4).equals(key.hash)) continue; // another key's
    checked++;
    if (sig.length !== 68) fail(`${what}: signature by ${name} is ${sig.length - 4} bytes, not 64`);
    if (!cryptoVerify(null, body, key.keyObject, sig.subarray(4))) {
      fail(`${what}: the Ed25519 signature by ${name} does not verify`);
    }
    return body;
  }
  fail(`${what}: no signature by ${key.name}+${key.hash.toString("hex")} (${lines.length} signature lines)`);
}

// parseCheckpoint reads a tlog-checkpoint body: origin, size, root, and
// extension lines that it ignores.
function parseCheckpoint(body, what) {
  const text = body.toString("utf8");
  if (!Buffer.from(text, "utf8").equals(body)) fail(`${what}: body is not UTF-8`);
  const lines = text.split("\n");
  lines.pop();
  if (lines.length < 3) fail(`${what}: body has ${lines.length} lines, a checkpoint has at least 3`);
  const [origin, sizeText, rootText] = lines;
  if (origin === "") fail(`${what}: empty origin`);
  if (!/^(0|[1-9][0-9]*)$/.test(sizeText)) fail(`${what}: size ${JSON.stringify(sizeText)} is not a decimal number without leading zeros`);
  const size = Number(sizeText);
  if (!Number.isSafeInteger(size)) fail(`${what}: size ${sizeText} too large`);
  const root = b64decodeStrict(rootText, `${what}: root`);
  if (root.length !== 32) fail(`${what}: root is ${root.length} bytes, not 32`);
  return { origin, size, root };
}

// ---- proofs (9.4), with BigInt so that sizes above 2^32 shift right ----

const lsb = (x) => x & 1n;

function verifyInclusion(h, index, size, path, root) {
  let i = BigInt(index);
  const n = BigInt(size);
  if (i >= n) return `leaf index ${index} >= tree size ${size}`;
  let fn = i;
  let sn = n - 1n;
  let r = h;
  for (const p of path) {
    if (sn === 0n) return "inclusion path is too long";
    if (lsb(fn) === 1n || fn === sn) {
      r = nodeHash(p, r);
      if (lsb(fn) === 0n) {
        while (lsb(fn) === 0n && fn !== 0n) {
          fn >>= 1n;
          sn >>= 1n;
        }
      }
    } else {
      r = nodeHash(r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) return "inclusion path is too short";
  if (!r.equals(root)) return `inclusion path leads to root ${r.toString("hex")}, not ${root.toString("hex")}`;
  return null;
}

function isPowerOf2(x) {
  return x > 0n && (x & (x - 1n)) === 0n;
}

function verifyConsistency(m, n, r1, r2, proof) {
  const bm = BigInt(m);
  const bn = BigInt(n);
  if (bm > bn) return `old size ${m} > new size ${n}`;
  if (bm === bn) {
    if (proof.length !== 0) return "trees of one size: the path must be empty";
    if (!r1.equals(r2)) return "trees of one size with different roots";
    return null;
  }
  if (bm === 0n || proof.length === 0) return "empty consistency path";
  let path = proof;
  if (isPowerOf2(bm)) path = [r1, ...proof];
  let fn = bm - 1n;
  let sn = bn - 1n;
  while (lsb(fn) === 1n) {
    fn >>= 1n;
    sn >>= 1n;
  }
  let fr = path[0];
  let sr = path[0];
  for (const c of path.slice(1)) {
    if (sn === 0n) return "consistency path is too long";
    if (lsb(fn) === 1n || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      if (lsb(fn) === 0n) {
        while (lsb(fn) === 0n && fn !== 0n) {
          fn >>= 1n;
          sn >>= 1n;
        }
      }
    } else {
      sr = nodeHash(sr, c);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) return "consistency path is too short";
  if (!fr.equals(r1)) return `consistency path leads to old root ${fr.toString("hex")}, not ${r1.toString("hex")}`;
  if (!sr.equals(r2)) return `consistency path leads to new root ${sr.toString("hex")}, not ${r2.toString("hex")}`;
  return null;
}

// ---- the log in a bucket: tiles and entry bundles (9.7) ----

// tilePath writes a tile index as 3-digit path elements, all but the last
// prefixed with "x", and ".p/W" for a partial tile.
function tilePath(n, w) {
  let s = String(n % 1000).padStart(3, "0");
  for (let m = Math.floor(n / 1000); m > 0; m = Math.floor(m / 1000)) {
    s = "x" + String(m % 1000).padStart(3, "0") + "/" + s;
  }
  return w === 256 ? s : `${s}.p/${w}`;
}

// tiledLog reads the tiles of the tree of size n from the folder dir (the
// ledger's objects as files, named by their keys); stats.fallbacks counts
// the partial tiles and bundles read from their full one.
function tiledLog(dir, n, stats) {
  const cache = new Map();
  const read = (rel, what) => {
    const path = resolve(dir, rel);
    if (!existsSync(path)) fail(`${what} ${rel} is missing`);
    return readFileSync(path);
  };
  // a tile or bundle of index k, width w under folder; a partial one the
  // log deleted once its full tile was stored (C2SP tlog-tiles allows
  // it) is read from the full one, which begins with it (full: true)
  const readTile = (folder, k, w, what) => {
    const rel = `${folder}/${tilePath(k, w)}`;
    if (w === 256 || existsSync(resolve(dir, rel))) return { rel, b: read(rel, what), full: false };
    const fullRel = `${folder}/${tilePath(k, 256)}`;
    if (!existsSync(resolve(dir, fullRel))) fail(`${what} ${rel} is missing, and its full ${what} ${fullRel}`);
    stats.fallbacks++;
    return { rel: fullRel, b: read(fullRel, what), full: true };
  };
  // the tile of level l, index k, of the width the tree of size n gives it
  const tile = (l, k) => {
    const span = 256 ** l;
    const full = Math.floor(n / (span * 256));
    const w = k < full ? 256 : Math.floor(n / span) % 256;
    const key = `tile/${l}/${tilePath(k, w)}`;
    if (!cache.has(key)) {
      const { rel, b, full } = readTile(`tile/${l}`, k, w, "tile");
      const want = full ? 32 * 256 : 32 * w;
      if (b.length !== want) fail(`tile ${rel} is ${b.length} bytes, not ${want}`);
      cache.set(key, b.subarray(0, 32 * w));
    }
    return cache.get(key);
  };
  // hash j of level l: the root of leaves [j * 256^l, (j + 1) * 256^l)
  const levelHash = (l, j) => tile(l, Math.floor(j / 256)).subarray(32 * (j % 256), 32 * (j % 256) + 32);
  // MTH of leaves [lo, hi) (9.2) from the tiles: an aligned power of 2 is
  // a tile hash, or the MTH of the 2^r hashes of the tile level below it
  const sub = (lo, hi) => {
    const size = hi - lo;
    if ((size & (size - 1)) === 0 && lo % size === 0) {
      const h = Math.log2(size);
      const l = Math.floor(h / 8);
      const span = 256 ** l;
      const hashes = [];
      for (let j = lo / span; j < hi / span; j++) hashes.push(levelHash(l, j));
      return mth(hashes, 0, hashes.length);
    }
    const k = largestPowerOf2Below(size);
    return nodeHash(sub(lo, lo + k), sub(lo + k, hi));
  };
  // RFC 9162 2.1.3.1 PATH(m, D[lo:hi])
  const path = (m, lo, hi) => {
    if (hi - lo === 1) return [];
    const k = largestPowerOf2Below(hi - lo);
    if (m < k) return [...path(m, lo, lo + k), sub(lo + k, hi)];
    return [...path(m - k, lo + k, hi), sub(lo, lo + k)];
  };
  // RFC 9162 2.1.4.1 SUBPROOF(m, D[lo:hi], b)
  const subproof = (m, lo, hi, b) => {
    const size = hi - lo;
    if (m === size) return b ? [] : [sub(lo, hi)];
    const k = largestPowerOf2Below(size);
    if (m <= k) return [...subproof(m, lo, lo + k, b), sub(lo + k, hi)];
    return [...subproof(m - k, lo + k, hi, false), sub(lo, lo + k)];
  };
  // entry i from its bundle; an empty entry is a large leaf, under leaf/
  const entry = (i) => {
    const k = Math.floor(i / 256);
    const w = k < Math.floor(n / 256) ? 256 : n % 256;
    const { rel, b, full } = readTile("tile/entries", k, w, "entry bundle");
    const entries = [];
    for (let off = 0; off < b.length; ) {
      if (off + 2 > b.length) fail(`entry bundle ${rel}: entry ${entries.length} is cut short`);
      const len = b.readUInt16BE(off);
      if (off + 2 + len > b.length) fail(`entry bundle ${rel}: entry ${entries.length} is cut short`);
      entries.push(b.subarray(off + 2, off + 2 + len));
      off += 2 + len;
    }
    if (entries.length !== (full ? 256 : w)) fail(`entry bundle ${rel} holds ${entries.length} entries, not ${full ? 256 : w}`);
    const e = entries[i % 256];
    if (e.length > 0) return { bytes: e, large: false };
    return { bytes: read(`leaf/${String(i).padStart(20, "0")}`, `the large leaf of empty entry ${i} in ${rel}:`), large: true };
  };
  return { sub, path, subproof, entry };
}

// runTiles verifies the log in dir (9.7): its checkpoint signed by key,
// the root of its tiles, the inclusion of each leaf (its entry hashed,
// the path built from the tiles) and the consistency of each older
// checkpoint (a note) with it.
function runTiles(dir, notes, leaves, key) {
  const ck = parseCheckpoint(verifyNote(readFileSync(resolve(dir, "checkpoint")), key, "checkpoint"), "checkpoint");
  const n = ck.size;
  const stats = { fallbacks: 0 };
  const log = tiledLog(dir, n, stats);
  if (n === 0) fail("checkpoint: an empty tree");
  const root = log.sub(0, n);
  if (!root.equals(ck.root)) fail(`the tiles give root ${root.toString("hex")} at size ${n}, the checkpoint ${ck.root.toString("hex")}`);
  let large = 0;
  for (const i of leaves) {
    if (i >= n) fail(`leaf ${i} is not in the tree of size ${n}`);
    const e = log.entry(i);
    if (e.large) large++;
    const err = verifyInclusion(leafHash(e.bytes), i, n, log.path(i, 0, n), ck.root);
    if (err) fail(`leaf ${i}: ${err}`);
  }
  for (const file of notes) {
    const old = parseCheckpoint(verifyNote(readFileSync(file), key, file), file);
    if (old.origin !== ck.origin) fail(`${file}: origin ${old.origin}, the checkpoint's is ${ck.origin}`);
    if (old.size > n) fail(`${file}: size ${old.size} is past the checkpoint's ${n}`);
    const proof = old.size === n ? [] : log.subproof(old.size, 0, n, true);
    const err = verifyConsistency(old.size, n, old.root, ck.root, proof);
    if (err) fail(`${file}: ${err}`);
    // the tiles of the older size give its root too (a client holding
    // it reads them: the partial ones, or their full ones once deleted)
    const oldRoot = tiledLog(dir, old.size, stats).sub(0, old.size);
    if (!oldRoot.equals(old.root)) fail(`${file}: the tiles give root ${oldRoot.toString("hex")} at size ${old.size}, the note ${old.root.toString("hex")}`);
  }
  return `tiles: size ${n}, ${leaves.length} leaves included (${large} from leaf/), ${notes.length} checkpoints consistent, ${stats.fallbacks} partial tiles read from full ones`;
}

// ---- Event IDs (3), canonical JSON (4), annal's line (5, 9.1) ----

const CRC32C_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[i] = c >>> 0;
  }
  return t;
})();

// crc32c is one running CRC over the parts' UTF-8 bytes.
function crc32c(...parts) {
  let c = 0xffffffff;
  for (const p of parts) {
    const b = Buffer.isBuffer(p) ? p : Buffer.from(p, "utf8");
    for (let i = 0; i < b.length; i++) c = CRC32C_TABLE[(c ^ b[i]) & 0xff] ^ (c >>> 8);
  }
  return (c ^ 0xffffffff) >>> 0;
}

const hex8 = (x) => x.toString(16).padStart(8, "0");

// sortKeys rebuilds every object with its keys sorted by
// Array.prototype.sort() and re-inserted; JSON.stringify then writes them
// in JavaScript's order (array indices first). The fresh objects have no
// prototype, so that a key "__proto__" stays a key.
function sortKeys(v) {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v !== null && typeof v === "object") {
    const o = Object.create(null);
    for (const k of Object.keys(v).sort()) o[k] = sortKeys(v[k]);
    return o;
  }
  return v;
}

const canonical = (v) => JSON.stringify(sortKeys(v));

const TS_RE = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3}|\d{6})Z$/;

// parseTimestamp returns the microseconds since the epoch (a BigInt).
function parseTimestamp(s, where) {
  const m = TS_RE.exec(s);
  if (!m) fail(`${where}: timestamp ${JSON.stringify(s)} is not YYYY-MM-DDTHH:MM:SS.fff[fff]Z`);
  const [, y, mo, d, h, mi, sec, frac] = m;
  const date = new Date(0);
  date.setUTCFullYear(Number(y), Number(mo) - 1, Number(d));
  date.setUTCHours(Number(h), Number(mi), Number(sec), 0);
  const back = date.toISOString().slice(0, 19);
  if (back !== s.slice(0, 19)) fail(`${where}: timestamp ${JSON.stringify(s)} is not a valid time`);
  const micros = frac.length === 3 ? BigInt(frac) * 1000n : BigInt(frac);
  return BigInt(date.getTime() / 1000) * 1000000n + micros;
}

function formatTimestamp(us) {
  const secs = us / 1000000n;
  const frac = (us % 1000000n).toString().padStart(6, "0");
  return new Date(Number(secs) * 1000).toISOString().slice(0, 19) + "." + frac + "Z";
}

const MEMBERS = ["entity", "key", "event", "eventId", "timestamp", "meta", "data"];

// parseLine reads one NDJSON line (5) into its members.
function parseLine(text, where) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    fail(`${where}: not JSON: ${e.message}`);
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) fail(`${where}: not a JSON object`);
  const keys = Object.keys(v);
  for (const k of keys) if (!MEMBERS.includes(k)) fail(`${where}: unknown member ${JSON.stringify(k)}`);
  for (const k of MEMBERS) if (!(k in v)) fail(`${where}: no member ${JSON.stringify(k)}`);
  for (const k of ["entity", "key", "event", "eventId", "timestamp"]) {
    if (typeof v[k] !== "string") fail(`${where}: ${k} is not a string`);
  }
  if (v.meta === null || typeof v.meta !== "object" || Array.isArray(v.meta)) fail(`${where}: meta is not an object`);
  if (!/^[0-9a-fA-F]{32}$/.test(v.eventId)) fail(`${where}: eventId ${JSON.stringify(v.eventId)} is not 32 hex digits`);
  return v;
}

// annalLine writes an event as annal exports it (9.1).
function annalLine(v, us) {
  return (
    `{"entity":${JSON.stringify(v.entity)},"key":${JSON.stringify(v.key)},"event":${JSON.stringify(v.event)},` +
    `"eventId":${JSON.stringify(v.eventId.toLowerCase())},"timestamp":"${formatTimestamp(us)}",` +
    `"meta":${canonical(v.meta)},"data":${canonical(v.data)}}`
  );
}

// checkIDs verifies every line's Event ID and the chain (3), and returns
// the lines as annal writes them (9.1).
function checkIDs(lines, file) {
  let ledger = null;
  let ledgerHex = "";
  let prev = "";
  let prevUs = -1n;
  const rewritten = [];
  lines.forEach((buf, i) => {
    const where = `${file}: line ${i + 1}`;
    const v = parseLine(buf.toString("utf8"), where);
    const metaC = canonical(v.meta);
    const dataC = canonical(v.data);
    if (i === 0) {
      ledger = (crc32c(v.entity, v.key, v.event, metaC, dataC) & 0xfffffffc) >>> 0;
      ledgerHex = hex8(ledger);
      prev = "0".repeat(24) + ledgerHex;
    }
    const us = parseTimestamp(v.timestamp, where);
    if (us <= prevUs) fail(`${where}: timestamp ${v.timestamp} is not after the previous event's`);
    const tsHex = us.toString(16).padStart(16, "0");
    const sum = crc32c(v.entity, v.key, v.event, metaC, dataC, ledgerHex, tsHex, prev);
    const id = tsHex + hex8(sum) + ledgerHex;
    if (v.eventId.toLowerCase() !== id) {
      fail(`${where}: eventId ${v.eventId} does not verify: recomputed ${id} (ledger ${ledgerHex}, previous ${prev})`);
    }
    prev = id;
    prevUs = us;
    rewritten.push(Buffer.from(annalLine(v, us), "utf8"));
  });
  return { ledgerHex, rewritten };
}

// ---- an export and what it proves ----

const exportCache = new Map();

// loadExport splits an export into its leaf bytes (9.1) and hashes them.
function loadExport(path, { ids, evently }) {
  const cacheKey = `${path}\0${ids}\0${evently}`;
  if (exportCache.has(cacheKey)) {
    const c = exportCache.get(cacheKey);
    if (c.error) throw c.error;
    return c;
  }
  try {
    const data = readFileSync(path);
    const lines = [];
    let start = 0;
    while (start < data.length) {
      let end = data.indexOf(0x0a, start);
      if (end < 0) end = data.length;
      let line = data.subarray(start, end);
      if (evently && line.length > 0 && line[line.length - 1] === 0x0d) line = line.subarray(0, line.length - 1);
      if (line.length === 0) fail(`${path}: line ${lines.length + 1} is empty`);
      lines.push(line);
      start = end + 1;
    }
    if (lines.length === 0) fail(`${path}: no events`);
    let leaves = lines;
    let ledgerHex;
    if (ids || evently) {
      const r = checkIDs(lines, path);
      ledgerHex = r.ledgerHex;
      if (evently) {
        leaves = r.rewritten;
      } else {
        r.rewritten.forEach((b, i) => {
          if (!b.equals(lines[i])) fail(`${path}: line ${i + 1} is not written as annal writes it (9.1): expected ${b.toString("utf8")}`);
        });
      }
    } else {
      // Without --ids the ledger ID is the first line's eventId's last 8
      // hex digits (the root covers the other lines).
      ledgerHex = parseLine(lines[0].toString("utf8"), `${path}: line 1`).eventId.slice(24).toLowerCase();
    }
    const hashes = leaves.map(leafHash);
    const c = { path, lines, leaves, hashes, ledgerHex, roots: new Map() };
    exportCache.set(cacheKey, c);
    return c;
  } catch (e) {
    exportCache.set(cacheKey, { error: e });
    throw e;
  }
}

function exportRoot(exp, size) {
  if (size < 1 || size > exp.hashes.length) fail(`${exp.path}: no root at size ${size} (${exp.hashes.length} lines)`);
  let r = exp.roots.get(size);
  if (!r) {
    r = mth(exp.hashes, 0, size);
    exp.roots.set(size, r);
  }
  return r;
}

function readText(path, what) {
  try {
    return readFileSync(path);
  } catch (e) {
    fail(`${what}: ${e.message}`);
  }
}

const b64 = (b) => b.toString("base64");
const hashList = (arr, what) => {
  if (!Array.isArray(arr)) fail(`${what}: not a list of hashes`);
  return arr.map((s, i) => {
    if (typeof s !== "string") fail(`${what}[${i}]: not a string`);
    const b = b64decodeStrict(s, `${what}[${i}]`);
    if (b.length !== 32) fail(`${what}[${i}]: ${b.length} bytes, not 32`);
    return b;
  });
};
const sizeField = (v, what, min) => {
  if (!Number.isSafeInteger(v) || v < min) fail(`${what}: ${JSON.stringify(v)} is not an integer >= ${min}`);
  return v;
};

// runCase verifies one export, checkpoint, notes and proofs, and returns a
// summary; it throws VerifyError at the first failure.
function runCase(c, key) {
  const exp = loadExport(c.export, { ids: !!c.ids, evently: !!c.evently });
  const ledgerHex = exp.ledgerHex;
  const trusted = new Map(); // size -> {root, source}
  let cpSize = 0;

  const trust = (size, root, source) => {
    const t = trusted.get(size);
    if (t && !t.root.equals(root)) {
      fail(`${source} says the root of size ${size} is ${root.toString("hex")}, ${t.source} says ${t.root.toString("hex")}`);
    }
    if (!t) trusted.set(size, { root, source });
  };

  const checkNote = (buf, what) => {
    const cp = parseCheckpoint(verifyNote(buf, key, what), what);
    if (!cp.origin.endsWith("/" + ledgerHex)) fail(`${what}: origin ${JSON.stringify(cp.origin)} does not end with "/" and the export's ledger ID ${ledgerHex}`);
    if (cp.size < 1) fail(`${what}: size 0`);
    if (cp.size <= exp.hashes.length) {
      const r = exportRoot(exp, cp.size);
      if (!r.equals(cp.root)) {
        fail(`${what}: root ${cp.root.toString("hex")} at size ${cp.size}, but the export's first ${cp.size} lines have root ${r.toString("hex")}`);
      }
    }
    trust(cp.size, cp.root, what);
    return cp;
  };

  const rootAt = (size, what) => {
    const t = trusted.get(size);
    if (t) return t.root;
    if (size >= 1 && size <= cpSize) {
      const r = exportRoot(exp, size);
      trust(size, r, `the export's first ${size} lines`);
      return r;
    }
    fail(`${what}: no trusted root of size ${size} (checkpoint size ${cpSize}, no signed note of that size)`);
  };

  // The checkpoint the export is verified against.
  const cpWhat = `checkpoint ${c.checkpoint}`;
  const cpBuf = readText(c.checkpoint, cpWhat);
  const cpBody = verifyNote(cpBuf, key, cpWhat);
  const cp = parseCheckpoint(cpBody, cpWhat);
  if (!cp.origin.endsWith("/" + ledgerHex)) fail(`${cpWhat}: origin ${JSON.stringify(cp.origin)} does not end with "/" and the export's ledger ID ${ledgerHex}`);
  if (cp.size < 1) fail(`${cpWhat}: size 0`);
  if (exp.hashes.length < cp.size) fail(`${c.export}: ${exp.hashes.length} lines, fewer than the checkpoint's size ${cp.size}`);
  const root = exportRoot(exp, cp.size);
  if (!root.equals(cp.root)) {
    fail(`${c.export}: the root of its first ${cp.size} lines is ${root.toString("hex")}, the checkpoint's is ${cp.root.toString("hex")}`);
  }
  trust(cp.size, cp.root, cpWhat);
  cpSize = cp.size;

  for (const n of c.notes || []) checkNote(readText(n, `note ${n}`), `note ${n}`);

  let inclusions = 0;
  for (const p of c.inclusion || []) {
    const what = `inclusion proof ${p}`;
    let j;
    try {
      j = JSON.parse(readText(p, what).toString("utf8"));
    } catch (e) {
      if (e instanceof VerifyError) throw e;
      fail(`${what}: not JSON: ${e.message}`);
    }
    if (j === null || typeof j !== "object" || Array.isArray(j)) fail(`${what}: not a JSON object`);
    if (j.ledger !== ledgerHex) fail(`${what}: ledger ${JSON.stringify(j.ledger)}, the export's is ${ledgerHex}`);
    const idx = sizeField(j.leafIndex, `${what}: leafIndex`, 0);
    const size = sizeField(j.treeSize, `${what}: treeSize`, 1);
    if (idx >= size) fail(`${what}: leafIndex ${idx} >= treeSize ${size}`);
    if (j.seq !== idx + 1) fail(`${what}: seq ${JSON.stringify(j.seq)} is not leafIndex + 1 = ${idx + 1}`);
    if (idx >= exp.hashes.length) fail(`${what}: leaf ${idx} is not in the export (${exp.hashes.length} lines)`);
    const line = parseLine(exp.leaves[idx].toString("utf8"), `${c.export}: line ${idx + 1}`);
    if (typeof j.eventId !== "string" || j.eventId.toLowerCase() !== line.eventId.toLowerCase()) {
      fail(`${what}: eventId ${JSON.stringify(j.eventId)}, but line ${idx + 1} of the export is ${line.eventId}`);
    }
    const h = exp.hashes[idx];
    if (j.leafHash !== undefined && j.leafHash !== b64(h)) {
      fail(`${what}: leafHash ${j.leafHash} is not the hash of line ${idx + 1} of the export (${b64(h)})`);
    }
    if (j.checkpoint !== undefined) {
      if (typeof j.checkpoint !== "string") fail(`${what}: checkpoint is not a string`);
      const pc = checkNote(Buffer.from(j.checkpoint, "utf8"), `${what}: checkpoint`);
      if (pc.size !== size) fail(`${what}: its checkpoint has size ${pc.size}, the proof's treeSize is ${size}`);
    }
    const r = rootAt(size, what);
    const path = hashList(j.inclusionPath, `${what}: inclusionPath`);
    const err = verifyInclusion(h, idx, size, path, r);
    if (err) fail(`${what} (leaf ${idx}, tree size ${size}): ${err}`);
    inclusions++;
  }

  let consistencies = 0;
  for (const p of c.consistency || []) {
    const what = `consistency proof ${p}`;
    let j;
    try {
      j = JSON.parse(readText(p, what).toString("utf8"));
    } catch (e) {
      if (e instanceof VerifyError) throw e;
      fail(`${what}: not JSON: ${e.message}`);
    }
    if (j === null || typeof j !== "object" || Array.isArray(j)) fail(`${what}: not a JSON object`);
    if (j.ledger !== ledgerHex) fail(`${what}: ledger ${JSON.stringify(j.ledger)}, the export's is ${ledgerHex}`);
    const m = sizeField(j.oldSize, `${what}: oldSize`, 1);
    const n = sizeField(j.newSize, `${what}: newSize`, 1);
    if (m > n) fail(`${what}: oldSize ${m} > newSize ${n}`);
    if (j.checkpoint !== undefined) {
      if (typeof j.checkpoint !== "string") fail(`${what}: checkpoint is not a string`);
      const pc = checkNote(Buffer.from(j.checkpoint, "utf8"), `${what}: checkpoint`);
      if (pc.size !== n) fail(`${what}: its checkpoint has size ${pc.size}, the proof's newSize is ${n}`);
    }
    const r1 = rootAt(m, what);
    const r2 = rootAt(n, what);
    if (j.oldRoot !== undefined && j.oldRoot !== b64(r1)) fail(`${what}: oldRoot ${j.oldRoot} is not the trusted root of size ${m} (${b64(r1)})`);
    if (j.newRoot !== undefined && j.newRoot !== b64(r2)) fail(`${what}: newRoot ${j.newRoot} is not the trusted root of size ${n} (${b64(r2)})`);
    const path = hashList(j.consistencyPath, `${what}: consistencyPath`);
    const err = verifyConsistency(m, n, r1, r2, path);
    if (err) fail(`${what} (sizes ${m} to ${n}): ${err}`);
    consistencies++;
  }

  return {
    summary:
      `export ${exp.hashes.length} lines of ledger ${ledgerHex}${c.ids || c.evently ? " (Event IDs verified)" : ""}; ` +
      `checkpoint size ${cp.size} root ${cp.root.toString("hex")} signed by ${key.name}; ` +
      `${(c.notes || []).length} notes, ${inclusions} inclusion and ${consistencies} consistency proofs verified`,
    inclusions,
    consistencies,
  };
}

// ---- command line ----

function loadKey(k) {
  if (existsSync(k)) return parseVerifierKey(readFileSync(k, "utf8"));
  return parseVerifierKey(k);
}

function usage(msg) {
  process.stderr.write(`verify.mjs: ${msg}\nusage: node verify.mjs --key K --export FILE --checkpoint C [--note C2]... [--inclusion P.json]... [--consistency P.json]... [--ids] [--evently]\n       node verify.mjs --manifest M.json\n       node verify.mjs --key K --tiles DIR [--note C]... [--leaf I]...\n`);
  process.exit(2);
}

function main(argv) {
  const c = { notes: [], inclusion: [], consistency: [], leaves: [] };
  let keyArg;
  let manifest;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case "--key": keyArg = val(); break;
      case "--export": c.export = val(); break;
      case "--checkpoint": c.checkpoint = val(); break;
      case "--note": c.notes.push(val()); break;
      case "--inclusion": c.inclusion.push(val()); break;
      case "--consistency": c.consistency.push(val()); break;
      case "--ids": c.ids = true; break;
      case "--evently": c.evently = true; break;
      case "--manifest": manifest = val(); break;
      case "--tiles": c.tiles = val(); break;
      case "--leaf": c.leaves.push(Number(val())); break;
      default: usage(`unknown argument ${JSON.stringify(a)}`);
    }
  }

  if (manifest !== undefined) {
    const base = dirname(resolve(manifest));
    const m = JSON.parse(readFileSync(manifest, "utf8"));
    const rel = (p) => resolve(base, p);
    let key;
    try {
      key = loadKey(m.key.includes("+") ? m.key : rel(m.key));
    } catch (e) {
      process.stdout.write(`FAIL: ${e.message}\n`);
      return 1;
    }
    let bad = 0;
    let okCases = 0;
    let failedAsExpected = 0;
    let inclusions = 0;
    let consistencies = 0;
    for (const kc of m.cases) {
      const cc = {
        ...kc,
        export: rel(kc.export),
        checkpoint: rel(kc.checkpoint),
        notes: (kc.notes || []).map(rel),
        inclusion: (kc.inclusion || []).map(rel),
        consistency: (kc.consistency || []).map(rel),
      };
      const expectFail = kc.expect === "fail";
      try {
        const r = runCase(cc, key);
        if (expectFail) {
          bad++;
          process.stdout.write(`FAIL ${kc.name}: verified, but it was expected to fail: ${r.summary}\n`);
        } else {
          okCases++;
          inclusions += r.inclusions;
          consistencies += r.consistencies;
          process.stdout.write(`ok ${kc.name}: ${r.summary}\n`);
        }
      } catch (err) {
        // Anything thrown is a failure of the case; a bug of this
        // verifier says so.
        const internal = !(err instanceof VerifyError);
        const e = internal ? new VerifyError(`internal error (a bug of verify.mjs): ${err && err.stack}`) : err;
        if (!expectFail || internal) {
          bad++;
          process.stdout.write(`FAIL ${kc.name}: ${e.message}\n`);
        } else if (kc.failMatch && !e.message.includes(kc.failMatch)) {
          bad++;
          process.stdout.write(`FAIL ${kc.name}: failed, but not naming ${JSON.stringify(kc.failMatch)}: ${e.message}\n`);
        } else {
          failedAsExpected++;
          process.stdout.write(`ok ${kc.name}: failed as expected: ${e.message}\n`);
        }
      }
    }
    process.stdout.write(
      `${m.cases.length} cases: ${okCases} verified (${inclusions} inclusion, ${consistencies} consistency proofs), ` +
        `${failedAsExpected} failed as expected, ${bad} not as expected\n`,
    );
    return bad === 0 ? 0 : 1;
  }

  if (c.tiles !== undefined) {
    if (keyArg === undefined) usage("--tiles needs --key");
    try {
      process.stdout.write(`ok: ${runTiles(c.tiles, c.notes, c.leaves, loadKey(keyArg))}\n`);
      return 0;
    } catch (e) {
      if (!(e instanceof VerifyError)) throw e;
      process.stdout.write(`FAIL: ${e.message}\n`);
      return 1;
    }
  }
  if (keyArg === undefined || c.export === undefined || c.checkpoint === undefined) usage("--key, --export and --checkpoint are required");
  try {
    const key = loadKey(keyArg);
    const r = runCase(c, key);
    process.stdout.write(`ok: ${r.summary}\n`);
    return 0;
  } catch (e) {
    if (!(e instanceof VerifyError)) throw e;
    process.stdout.write(`FAIL: ${e.message}\n`);
    return 1;
  }
}

process.exitCode = main(process.argv.slice(2));
