/**
 * The strict JSON reader: it agrees with JSON.parse on what JSON is, refuses what JSON.parse
 * refuses (and duplicate keys, which JSON.parse lets the last one win), and records where every
 * value starts.
 */
import { describe, expect, it } from 'vitest';
import { lineColumn, pointerToken, readJsonText } from '../src/json-document.js';

function value(text: string): unknown {
  const r = readJsonText(text);
  if (!r.ok) throw new Error(`expected ${JSON.stringify(text)} to be read, got ${r.reason} at ${r.offset}`);
  return r.value;
}

function offsets(text: string): Record<string, number> {
  const r = readJsonText(text);
  if (!r.ok) throw new Error(`expected ${JSON.stringify(text)} to be read, got ${r.reason} at ${r.offset}`);
  return Object.fromEntries(r.offsets);
}

describe('readJsonText agrees with JSON.parse on valid JSON', () => {
  const valid = [
    '{}',
    '[]',
    '{"a":{}}',
    '[[],{},[[]]]',
    'null',
    'true',
    'false',
    '0',
    '-0',
    '42',
    '-17',
    '3.25',
    '-0.5',
    '1e3',
    '1E+3',
    '2.5e-3',
    '-1.5E-07',
    '1e400',
    '123456789012345678901234567890',
    '""',
    '"plain"',
    '"\\"\\\\\\/\\b\\f\\n\\r\\t"',
    '"\\u0041\\u00e9\\u4e2d\\uD83D\\uDE00\\ud800"',
    '"é中😀"',
    ' \t\r\n {"a" : [ 1 , 2 ] , "b" :\n{ "c" : null } } \n',
    '{"nested":{"deeper":{"list":[1,{"x":[true,false,null]},"s"]}},"n":-1.0e+2}',
    '{"":"empty key","a b":1,"é":2}',
  ];
  for (const text of valid) {
    it(`reads ${JSON.stringify(text)}`, () => {
      expect(value(text)).toEqual(JSON.parse(text));
    });
  }

  it('keeps the sign of -0 and reads an overflowing exponent as Infinity, like JSON.parse', () => {
    expect(Object.is(value('-0'), -0)).toBe(true);
    expect(value('[1e400, -1e400]')).toEqual([Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]);
  });

  it('keeps key order as written', () => {
    expect(Object.keys(value('{"b":1,"a":2,"c":3}') as object)).toEqual(['b', 'a', 'c']);
  });
});

describe('readJsonText refuses what JSON.parse refuses, saying where', () => {
  const cases: [text: string, offset: number, reason: string][] = [
    ['', 0, 'expected a value, found end of file'],
    ['   ', 3, 'expected a value, found end of file'],
    ['01', 1, 'unexpected "1" after the document'],
    ['[01]', 2, 'expected "," or "]" after an element, found "1"'],
    ['-', 0, 'expected a value, found "-"'],
    ['+1', 0, 'expected a value, found "+"'],
    ['.5', 0, 'expected a value, found "."'],
    ['1.', 1, 'unexpected "." after the document'],
    ['1e', 1, 'unexpected "e" after the document'],
    ['0x10', 1, 'unexpected "x" after the document'],
    ['NaN', 0, 'expected a value, found "N"'],
    ['[Infinity]', 1, 'expected a value, found "I"'],
    ['[-Infinity]', 1, 'expected a value, found "-"'],
    ["'single'", 0, 'expected a value, found "\'"'],
    ["{'a':1}", 1, 'expected a property name in double quotes, found "\'"'],
    ['{a:1}', 1, 'expected a property name in double quotes, found "a"'],
    ['// comment\n{}', 0, 'expected a value, found "/"'],
    ['{} // comment', 3, 'unexpected "/" after the document'],
    ['{/* c */}', 1, 'expected a property name in double quotes, found "/"'],
    ['[1,]', 3, 'trailing comma before "]"'],
    ['{"a":1,}', 7, 'trailing comma before "}"'],
    ['[1 2]', 3, 'expected "," or "]" after an element, found "2"'],
    ['[,1]', 1, 'expected a value, found ","'],
    ['{"a" 1}', 5, 'expected ":" after "a", found "1"'],
    ['{"a":}', 5, 'expected a value, found "}"'],
    ['{"a":1 "b":2}', 7, 'expected "," or "}" after a property, found "\\""'],
    ['[1', 2, 'expected "," or "]" after an element, found end of file'],
    ['{"a":1', 6, 'expected "," or "}" after a property, found end of file'],
    ['"abc', 0, 'unterminated string'],
    ['"a\nb"', 2, 'control character in a string (escape it, e.g. \\n)'],
    ['"a\tb"', 2, 'control character in a string (escape it, e.g. \\n)'],
    ['"\\x41"', 1, 'invalid escape "\\\\x" in a string'],
    ['"\\u12"', 1, 'invalid escape "\\\\u" in a string'],
    ['"\\', 1, 'invalid escape "\\\\" in a string'],
    ['tru', 0, 'expected a value, found "t"'],
    ['True', 0, 'expected a value, found "T"'],
    ['nul', 0, 'expected a value, found "n"'],
    ['truex', 4, 'unexpected "x" after the document'],
    ['\f{}', 0, 'expected a value, found "\\f"'],
    ['\u00a0{}', 0, 'expected a value, found "\u00a0"'],
    ['\uFEFF{}', 0, 'expected a value, found "\uFEFF"'],
    ['{}}', 2, 'unexpected "}" after the document'],
    ['[]]', 2, 'unexpected "]" after the document'],
  ];
  for (const [text, offset, reason] of cases) {
    it(`refuses ${JSON.stringify(text)}`, () => {
      expect(() => JSON.parse(text)).toThrow(SyntaxError);
      expect(readJsonText(text)).toEqual({ ok: false, offset, reason });
    });
  }

  it('refuses duplicate keys (which JSON.parse accepts), at the second key', () => {
    const text = '{"a": 1, "b": {"x": 1, "x": 2}}';
    expect(JSON.parse(text)).toEqual({ a: 1, b: { x: 2 } });
    expect(readJsonText(text)).toEqual({ ok: false, offset: text.lastIndexOf('"x"'), reason: 'duplicate key "x"' });
    // Keys are compared after unescaping.
    expect(readJsonText('{"a":1,"\\u0061":2}')).toEqual({ ok: false, offset: 7, reason: 'duplicate key "a"' });
  });
});

describe('readJsonText offsets', () => {
  it('records the offset of every value by JSON pointer', () => {
    const text = ' {"a": [10, {"b": "x"}], "c": null}';
    expect(offsets(text)).toEqual({ '': 1, '/a': 7, '/a/0': 8, '/a/1': 12, '/a/1/b': 18, '/c': 30 });
    for (const [pointer, at] of Object.entries(offsets(text))) {
      if (pointer === '/a') expect(text[at]).toBe('[');
      if (pointer === '/a/1/b') expect(text.slice(at, at + 3)).toBe('"x"');
    }
  });

  it('escapes / and ~ in keys (RFC 6901)', () => {
    const text = '{"a/b": 1, "m~n": {"~/": 2}, "~1": 3}';
    expect(offsets(text)).toEqual({
      '': 0,
      '/a~1b': text.indexOf('1'),
      '/m~0n': text.indexOf('{', 1),
      '/m~0n/~0~1': text.indexOf('2'),
      '/~01': text.indexOf('3'),
    });
    expect(pointerToken('a/b~c')).toBe('a~1b~0c');
    expect(pointerToken('~1')).toBe('~01');
  });

  it('lineColumn is 1-based and counts lines by line feed', () => {
    const text = 'ab\ncd\r\nef';
    expect(lineColumn(text, 0)).toEqual({ line: 1, column: 1 });
    expect(lineColumn(text, 2)).toEqual({ line: 1, column: 3 });
    expect(lineColumn(text, 3)).toEqual({ line: 2, column: 1 });
    expect(lineColumn(text, 7)).toEqual({ line: 3, column: 1 });
    expect(lineColumn(text, text.length)).toEqual({ line: 3, column: 3 });
  });
});

describe('readJsonText is safe on hostile input', () => {
  it('reads __proto__ as a plain key, without touching any prototype', () => {
    const text = '{"__proto__": {"polluted": true}, "a": {"__proto__": []}, "constructor": {"prototype": {"polluted": 1}}}';
    const v = value(text) as Record<string, unknown>;
    expect(Object.getPrototypeOf(v)).toBe(Object.prototype);
    expect(Object.keys(v)).toEqual(['__proto__', 'a', 'constructor']);
    expect(Object.getOwnPropertyDescriptor(v, '__proto__')?.value).toEqual({ polluted: true });
    expect((v as { polluted?: unknown }).polluted).toBeUndefined();
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
    expect(Array.isArray(Object.getPrototypeOf(v.a))).toBe(false);
    expect(v).toEqual(JSON.parse(text));
    expect(offsets(text)['/__proto__']).toBe(14);
  });

  it('refuses a duplicate __proto__ key', () => {
    expect(readJsonText('{"__proto__": 1, "__proto__": 2}')).toEqual({ ok: false, offset: 17, reason: 'duplicate key "__proto__"' });
  });

  it('reads 64 levels of nesting and refuses a value deeper than that', () => {
    const nest = (n: number, inner: string) => `${'['.repeat(n)}${inner}${']'.repeat(n)}`;
    expect(value(nest(64, '1'))).toEqual(JSON.parse(nest(64, '1')));
    const objs = `${'{"a":'.repeat(64)}1${'}'.repeat(64)}`;
    expect(value(objs)).toEqual(JSON.parse(objs));
    expect(readJsonText(nest(65, '1'))).toEqual({ ok: false, offset: 65, reason: 'nested deeper than 64 levels' });
    expect(readJsonText(nest(10_000, ''))).toEqual({ ok: false, offset: 65, reason: 'nested deeper than 64 levels' });
    const deepObjs = `${'{"a":'.repeat(100)}1${'}'.repeat(100)}`;
    expect(readJsonText(deepObjs)).toEqual({ ok: false, offset: 65 * 5, reason: 'nested deeper than 64 levels' });
  });
});
