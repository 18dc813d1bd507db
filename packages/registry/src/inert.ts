/**
 * Text an agent, a tool or an upstream wrote is inert on a person's screen: the characters a
 * terminal acts on or a reader cannot see are shown as escapes instead of being passed through.
 * One rule, used by every place forge prints such text for a person (the CLI's output) and by the
 * toolsmith's refusal of a proposal that carries them.
 *
 * Unsafe: C0 controls but tab and newline (ESC starts every terminal command: erase a line, set a
 * title, an OSC 8 link), a carriage return not followed by a newline (it overwrites the line), DEL,
 * the C1 controls U+0080–U+009F (U+009B is a one-character CSI), bidirectional overrides, embeddings,
 * isolates and marks (Trojan Source), zero-width and other invisible characters, the line and
 * paragraph separators, and the Unicode noncharacters U+FDD0–U+FDEF.
 */

/** Every unsafe character; `\r` only when no `\n` follows it. */
const UNSAFE =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching them is the point
  /[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufdd0-\ufdef\ufeff]|\r(?!\n)/gu;

const NAMES: Record<number, string> = {
  27: 'ESC (a terminal escape)',
  13: 'a carriage return (it overwrites the line)',
  8: 'a backspace',
  127: 'DEL',
  155: 'CSI (a terminal escape)',
  157: 'OSC (a terminal escape)',
  173: 'a soft hyphen (invisible)',
  8203: 'a zero-width space',
  8204: 'a zero-width non-joiner',
  8205: 'a zero-width joiner',
  8206: 'a left-to-right mark',
  8207: 'a right-to-left mark',
  8232: 'a line separator',
  8233: 'a paragraph separator',
  8234: 'a left-to-right embedding',
  8235: 'a right-to-left embedding',
  8236: 'a pop directional formatting',
  8237: 'a left-to-right override',
  8238: 'a right-to-left override',
  8294: 'a left-to-right isolate',
  8295: 'a right-to-left isolate',
  8296: 'a first strong isolate',
  8297: 'a pop directional isolate',
  65279: 'a zero-width no-break space',
};

/** The visible spelling of one unsafe character: `\r`, `\x1b`, `\u202e`. */
export function escapeCharacter(ch: string): string {
  const code = ch.codePointAt(0) as number;
  if (ch === '\r') return '\\r';
  if (code <= 0xff) return `\\x${code.toString(16).padStart(2, '0')}`;
  return `\\u${code.toString(16).padStart(4, '0')}`;
}

/** What an unsafe character is, for a refusal: `ESC (a terminal escape)`, `U+202E, a right-to-left override`. */
export function describeCharacter(ch: string): string {
  const code = ch.codePointAt(0) as number;
  const u = `U+${code.toString(16).toUpperCase().padStart(4, '0')}`;
  const name = NAMES[code];
  if (name) return `${u}, ${name}`;
  if (code < 0x20 || (code >= 0x80 && code <= 0x9f)) return `${u}, a control character`;
  if (code >= 0x2060 && code <= 0x206f) return `${u}, an invisible formatting character`;
  return `${u}, an invisible or noncharacter code point`;
}

/**
 * `text` with every unsafe character shown as its escape (`\x1b`, `\u202e`, `\r`). `keep` lists
 * exact sequences left as they are: forge's own colour codes, which only set or reset a colour,
 * bold or dim (nothing that moves the cursor, erases, conceals, retitles or links).
 */
export function inertText(text: string, keep: readonly string[] = []): string {
  if (keep.length === 0) return text.replace(UNSAFE, escapeCharacter);
  let out = '';
  let from = 0;
  UNSAFE.lastIndex = 0;
  for (let m = UNSAFE.exec(text); m; m = UNSAFE.exec(text)) {
    const at = m.index;
    const kept = m[0] === '\x1b' ? keep.find((k) => text.startsWith(k, at)) : undefined;
    out += text.slice(from, at);
    if (kept) {
      out += kept;
      from = at + kept.length;
      UNSAFE.lastIndex = from;
    } else {
      out += escapeCharacter(m[0]);
      from = at + m[0].length;
    }
  }
  return out + text.slice(from);
}

/** Where the first unsafe character of `text` is (1-based line and column), and what it is. */
export interface UnsafeCharacter {
  line: number;
  column: number;
  /** `U+001B, ESC (a terminal escape)`. */
  what: string;
}

/** The first unsafe character of `text`, or undefined when the text is safe to show as it is. */
export function findUnsafeCharacter(text: string): UnsafeCharacter | undefined {
  UNSAFE.lastIndex = 0;
  const m = UNSAFE.exec(text);
  UNSAFE.lastIndex = 0;
  if (!m) return undefined;
  const before = text.slice(0, m.index);
  const line = before.split('\n').length;
  const column = m.index - (before.lastIndexOf('\n') + 1) + 1;
  return { line, column, what: describeCharacter(m[0]) };
}

/**
 * A JSON text with the unsafe characters inside its strings written as `\uXXXX` escapes: the same
 * value for a parser, inert on a screen. (JSON.stringify escapes C0 but leaves DEL, C1, bidi and
 * invisible characters raw; outside strings JSON has none of them.)
 */
export function inertJson(json: string): string {
  return json.replace(UNSAFE, (ch) => `\\u${(ch.codePointAt(0) as number).toString(16).padStart(4, '0')}`);
}
