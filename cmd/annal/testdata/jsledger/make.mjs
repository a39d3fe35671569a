// make.mjs: an independent writer of Evently ledgers, written from the
// Event ID design alone (the ledger ID of the genesis event, each event's
// CRC32C over the UTF-8 bytes of its entity, key, event name, sorted
// compact meta and data, ledger ID, timestamp and previous ID), with
// nothing but node's built-in modules. It never reads annal's code; annal's
// tests import what it writes and check that annal keeps it byte for byte.
//
// Usage:
//
//   node make.mjs --ledgers DIR      write the ledgers below, one NDJSON file each
//   node make.mjs --rewrite IN OUT   write ledger IN as annal exports it
//
// The ledgers' entity, key and event names hold what a JavaScript string
// may and Append would refuse: tabs, NULs, U+2028, other control
// characters (C0, DEL, C1), and a mix of them with separators, format and
// bidirectional characters. Each line is written as annal exports
// (docs/format.md 9.1: members in the order entity, key, event, eventId,
// timestamp, meta, data; JSON.stringify's escapes; six fraction digits),
// so that an export of its import must be the file itself.
//
// --rewrite reads a ledger written by anyone (such as Evently's, with
// three fraction digits and unsorted objects) and writes each line in
// that form, checking every Event ID on the way.

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const CRC32C_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

function crc32c(...parts) {
  let c = 0xffffffff;
  for (const p of parts) {
    const b = Buffer.from(p, "utf8");
    for (let i = 0; i < b.length; i++) c = CRC32C_TABLE[(c ^ b[i]) & 0xff] ^ (c >>> 8);
  }
  return (c ^ 0xffffffff) >>> 0;
}

const hex8 = (x) => x.toString(16).padStart(8, "0");

function sortKeys(v) {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v !== null && typeof v === "object") {
    const o = Object.create(null);
    for (const k of Object.keys(v).sort()) o[k] = sortKeys(v[k]);
    return o;
  }
  return v;
}

const compact = (v) => JSON.stringify(sortKeys(v));

function timestamp(us) {
  const frac = (us % 1000000n).toString().padStart(6, "0");
  return new Date(Number(us / 1000000n) * 1000).toISOString().slice(0, 19) + "." + frac + "Z";
}

function micros(s) {
  const m = /^(.*T\d\d:\d\d:\d\d)\.(\d{3}|\d{6})Z$/.exec(s);
  if (!m) throw new Error(`timestamp ${JSON.stringify(s)}`);
  return BigInt(Date.parse(m[1] + "Z")) * 1000n + (m[2].length === 3 ? BigInt(m[2]) * 1000n : BigInt(m[2]));
}

// Ledger chains events: the first is the genesis event.
class Ledger {
  constructor() {
    this.lines = [];
    this.ledgerHex = "";
    this.prev = "";
  }

  add(ev, us) {
    const meta = compact(ev.meta);
    const data = compact(ev.data);
    if (this.lines.length === 0) {
      this.ledgerHex = hex8((crc32c(ev.entity, ev.key, ev.event, meta, data) & 0xfffffffc) >>> 0);
      this.prev = "0".repeat(24) + this.ledgerHex;
    }
    const ts = us.toString(16).padStart(16, "0");
    const id = ts + hex8(crc32c(ev.entity, ev.key, ev.event, meta, data, this.ledgerHex, ts, this.prev)) + this.ledgerHex;
    this.prev = id;
    this.lines.push(
      `{"entity":${JSON.stringify(ev.entity)},"key":${JSON.stringify(ev.key)},"event":${JSON.stringify(ev.event)},` +
        `"eventId":"${id}","timestamp":"${timestamp(us)}","meta":${meta},"data":${data}}\n`,
    );
    return id;
  }

  text() {
    return this.lines.join("");
  }
}

// c is the string of the code points given.
const c = (...cps) => String.fromCodePoint(...cps);
const C0 = Array.from({ length: 32 }, (_, i) => c(i)).join("");
const C1 = Array.from({ length: 32 }, (_, i) => c(0x80 + i)).join("");

// The ledgers: a name, the genesis event's ledger name, and the entity,
// key and event names of its events.
const LEDGERS = {
  tab: ["js tab", [["tab\tentity", "key\twith\ttabs", "tab\tname"], ["account", "acc\t1", "opened"], ["account", "acc\t1", "debited\t"]]],
  nul: ["js nul", [["nul\0entity", "\0", "nul\0"], ["a\0", "b", "x"], ["a", "\0b", "x"], ["a", "b\0", "x\0"]]],
  u2028: ["js separators", [["line\u2028entity", "key\u2029", "\u2028"], ["para", "a\u2028b", "p\u2029p"]]],
  controls: ["js controls", [["c0", C0, "all C0"], ["del", "\x7f", "d\x7fl"], ["c1", C1, "all C1"], ["esc", "\x1b[31mred\x1b[0m", "\x1b]0;title\x07"], ["lines", "a\nb\rc", "\n"]]],
  mix: ["js\tmix", [["mix\t\0\u2028", "\x01\u202e\u0085\u200b", "\u2066x\u2069\t\0"], ["📒\t", "Evently\u0000⑆\u2028", "刅\x7f"], ["order\u202e", "k\u200b-1\ufeff", "placed"]]],
};

function writeLedgers(dir) {
  let t = 1764331200000000n; // 2025-11-28T12:00:00Z
  for (const [file, [name, events]] of Object.entries(LEDGERS)) {
    const l = new Ledger();
    l.add({ entity: "ledger", key: name, event: "ledger-created", meta: { created: timestamp(t), by: "make.mjs" }, data: { name, description: `names: ${file}` } }, t);
    events.forEach(([entity, key, event], i) => {
      t += 1000n + BigInt(i);
      l.add({ entity, key, event, meta: { actor: "make.mjs", note: `${entity}|${key}` }, data: { i, name: event } }, t);
    });
    writeFileSync(join(dir, `${file}.ndjson`), l.text());
    t += 60000000n;
  }
}

function rewrite(inPath, outPath) {
  const l = new Ledger();
  const text = readFileSync(inPath, "utf8");
  text.split("\n").forEach((line, i) => {
    if (line === "") return;
    const v = JSON.parse(line);
    const id = l.add(v, micros(v.timestamp));
    if (id !== v.eventId.toLowerCase()) throw new Error(`${inPath}: line ${i + 1}: eventId ${v.eventId}, recomputed ${id}`);
  });
  writeFileSync(outPath, l.text());
}

const [mode, ...args] = process.argv.slice(2);
if (mode === "--ledgers" && args.length === 1) {
  writeLedgers(args[0]);
} else if (mode === "--rewrite" && args.length === 2) {
  rewrite(args[0], args[1]);
} else {
  process.stderr.write("usage: node make.mjs --ledgers DIR | --rewrite IN OUT\n");
  process.exit(2);
}
