// What playback leaves out of a terminal's output, the rule `ptyhub terminal export` follows
// (crates/cli/src/export/clean.rs): every OSC 133 sequence with a `k=` parameter (the shell
// integration's private marks, which carry the terminal's nonce) is dropped and reported as a
// mark, and a lone BEL between an exec's `command.note` and its command's start (the line
// editor's answer to exec clearing an empty line) is dropped. Sequences split across events
// are held until they end.
'use strict';

const ptyhubRecording = (() => {
  const ESC = 0x1b;
  const BEL = 0x07;
  const CAN = 0x18;
  const SUB = 0x1a;
  const MARK_MAX_BYTES = 4096;
  const decoder = new TextDecoder();

  // How an OSC body starting at `from` ends: {end, bodyEnd}, {aborted} or null (not yet).
  function oscEnd(data, from) {
    for (let i = from; i < data.length; i += 1) {
      const b = data[i];
      if (b === BEL) return { bodyEnd: i, end: i + 1 };
      if (b === ESC) {
        if (i + 1 >= data.length) return null;
        if (data[i + 1] === 0x5c) return { bodyEnd: i, end: i + 2 };
        return { aborted: i };
      }
      if (b === CAN || b === SUB) return { aborted: i + 1 };
    }
    return null;
  }

  // The mark of a private OSC 133 body, or null for any other OSC.
  function privateMark(body) {
    const text = decoder.decode(body);
    if (!text.startsWith('133;')) return null;
    const [kind, ...params] = text.slice(4).split(';');
    if (!params.some((p) => p.startsWith('k='))) return null;
    if (kind === 'A') return { kind: 'prompt' };
    if (kind === 'C') return { kind: 'start' };
    if (kind === 'D') {
      const code = Number.parseInt(params[0], 10);
      return { kind: 'end', exitCode: Number.isNaN(code) ? null : code };
    }
    return { kind: 'other' };
  }

  class Filter {
    constructor() {
      this.pending = new Uint8Array(0);
      this.isAfterExecNote = false;
    }

    note(origin) {
      if (origin === 'exec') this.isAfterExecNote = true;
    }

    // The bytes of one output event as playback shows them, and the marks it dropped.
    filter(chunk) {
      const data = new Uint8Array(this.pending.length + chunk.length);
      data.set(this.pending);
      data.set(chunk, this.pending.length);
      this.pending = new Uint8Array(0);
      const out = [];
      const marks = [];
      let i = 0;
      while (i < data.length) {
        const b = data[i];
        if (b === BEL && this.isAfterExecNote) { i += 1; continue; }
        if (b !== ESC) { out.push(b); i += 1; continue; }
        if (i + 1 >= data.length) { this.pending = data.slice(i); break; }
        if (data[i + 1] !== 0x5d) { out.push(b); i += 1; continue; }
        const end = oscEnd(data, i + 2);
        if (end === null) {
          if (data.length - i - 2 < MARK_MAX_BYTES) { this.pending = data.slice(i); break; }
          out.push(b);
          i += 1;
        } else if (end.aborted !== undefined) {
          for (let j = i; j < end.aborted; j += 1) out.push(data[j]);
          i = end.aborted;
        } else {
          const mark = privateMark(data.subarray(i + 2, end.bodyEnd));
          if (mark) {
            if (mark.kind !== 'other') this.isAfterExecNote = false;
            marks.push(mark);
          } else {
            for (let j = i; j < end.end; j += 1) out.push(data[j]);
          }
          i = end.end;
        }
      }
      return { bytes: Uint8Array.from(out), marks };
    }
  }

  // Text without escape sequences, for searching what a terminal printed.
  function plainText(bytes) {
    return decoder.decode(bytes)
      .replace(/\x1b\][^\x07\x1b]*(\x07|\x1b\\)?/g, '')
      .replace(/\x1b\[[0-?]*[ -/]*[@-~]/g, '')
      .replace(/\x1b[@-Z\\-_]/g, '')
      .replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '');
  }

  return { Filter, plainText };
})();
