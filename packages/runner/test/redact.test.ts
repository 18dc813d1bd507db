import { describe, expect, it } from 'vitest';
import { excerpt, redactCutEnd, redactTail, redactTextFolded, secretList } from '../src/redact.js';

const S = secretList(new Map([['TOKEN', 'Zq7vXw3KpL9m']]));

describe('cutting redacted text', () => {
  it('excerpt redacts before it cuts, and never splits a mark or a surrogate pair', () => {
    // The cut at 10 falls inside the secret: redacted first, the mark is then left out whole.
    expect(excerpt('abcdefgh Zq7vXw3KpL9m tail', S, 10)).toBe('abcdefgh ');
    expect(excerpt('head Zq7vXw3KpL9m abcdefgh', S, 10, 'end')).toBe(' abcdefgh');
    expect(excerpt('ab Zq7vXw3KpL9m', S, 40)).toBe('ab <redacted:TOKEN>');
    expect(excerpt('abc😀def', [], 4)).toBe('abc');
    expect(excerpt('abc😀def', [], 4, 'end')).toBe('def');
  });

  it('redactTail removes a leading end of a secret left by an upstream cut, of any length, after a cut character', () => {
    expect(redactTail('L9m rest', S)).toBe('… rest');
    expect(redactTail('XpL9m rest', S)).toBe('XpL9m rest'); // not an end of the secret
    expect(redactTail('w3KpL9m rest', S)).toBe('<redacted:TOKEN> rest');
    expect(redactTail('\uFFFD\uFFFDKpL9m rest', S)).toBe('<redacted:TOKEN> rest');
    expect(redactTail('KpL9m rest', S, false)).toBe('KpL9m rest'); // nothing was cut
  });

  it('redactCutEnd removes a trailing start of a secret; redactTextFolded matches any letter case', () => {
    expect(redactCutEnd(Buffer.from('out Zq7vX'), S).toString()).toBe('out <redacted:TOKEN>');
    expect(redactCutEnd(Buffer.from('out Zq'), S).toString()).toBe('out …');
    expect(redactTextFolded('http://zq7vxw3kpl9m.example/', S)).toBe('http://<redacted:TOKEN>.example/');
  });
});
