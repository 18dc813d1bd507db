const chunks = [];
process.stdin.on('data', (c) => chunks.push(c));
process.stdin.on('end', () => {
  const { text, top = 5 } = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  const words = text.toLowerCase().match(/[\p{L}\p{N}']+/gu) ?? [];
  const freq = new Map();
  for (const w of words) freq.set(w, (freq.get(w) ?? 0) + 1);
  const most = [...freq].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, top);
  const data = { words: words.length, lines: text === '' ? 0 : text.split('\n').length, characters: [...text].length, top: most };
  process.stdout.write(JSON.stringify({ ok: true, data }));
});
