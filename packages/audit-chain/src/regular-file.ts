import { constants as fsc } from 'node:fs';
import { open } from 'node:fs/promises';

/**
 * The bytes of `path` when it is a regular file. It is opened without blocking and its type
 * checked before it is read: a FIFO or device put where forge keeps a file of its own (a tile, a
 * tree checkpoint, an anchor, a witness record) throws, naming it, instead of holding the reader
 * forever. A missing file throws ENOENT as `readFile` does.
 */
export async function readRegularFile(path: string): Promise<Buffer> {
  const fh = await open(path, fsc.O_RDONLY | fsc.O_NONBLOCK);
  try {
    if (!(await fh.stat()).isFile()) throw Object.assign(new Error(`${path} is not a regular file`), { code: 'ENOTREG' });
    return await fh.readFile();
  } finally {
    await fh.close();
  }
}
