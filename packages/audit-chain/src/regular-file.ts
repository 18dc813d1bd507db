import { constants as fsc } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';

/**
 * The bytes of `path` when it is a regular file. It is opened without blocking and its type
 * checked before it is read: a FIFO or device put where forge keeps a file of its own (a tile, a
 * tree checkpoint, an anchor, a witness record) throws, naming it, instead of holding the reader
 * forever. A missing file throws ENOENT as `readFile` does.
 */
export async function readRegularFile(path: string): Promise<Buffer> {
  const fh = await openRegular(path);
  try {
    return await fh.readFile();
  } finally {
    await fh.close();
  }
}

/**
 * `path` opened for reading when it is a regular file (a segment of the log, a checkpoint file):
 * opened without blocking, then its type checked; anything else throws (code `ENOTREG`), naming it.
 */
export async function openRegular(path: string): Promise<FileHandle> {
  const fh = await open(path, fsc.O_RDONLY | fsc.O_NONBLOCK);
  try {
    await assertRegular(fh, path);
  } catch (err) {
    await fh.close();
    throw err;
  }
  return fh;
}

/** Throws (code `ENOTREG`) unless the open file is a regular file. */
export async function assertRegular(fh: FileHandle, path: string): Promise<void> {
  if (!(await fh.stat()).isFile())
    throw Object.assign(
      new Error(
        `${path} is not a regular file (a log's files are plain files; something else was put there): remove it and restore the file from a copy, or check the log with forge audit verify`,
      ),
      {
        code: 'ENOTREG',
      },
    );
}
