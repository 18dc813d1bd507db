/**
 * The seccomp filter handed to `bwrap --seccomp FD`: a classic-BPF program, generated here without
 * libseccomp, that refuses the syscalls a sandboxed tool never needs.
 *
 * It is a deny-list on top of bubblewrap's namespaces, modelled on Flatpak's: everything not listed
 * in {@link SECCOMP_RULES} is allowed, and a listed call fails with an errno the program can handle
 * (it is not killed). Only a foreign syscall ABI (i386 or AArch32 entry points, x32 numbers) gets
 * harsher treatment, because the rules below are keyed on native syscall numbers.
 */

/** Syscall ABIs the filter is generated for. */
export type SeccompArch = 'x86_64' | 'aarch64';

/** One entry of the published deny table. */
export interface SeccompRule {
  /** Kernel name of the syscall, as in the kernel's syscall tables. */
  syscall: string;
  /** The errno the call fails with. */
  action: 'EPERM' | 'ENOSYS' | 'EAFNOSUPPORT';
  /** When present, the call is refused only under this argument condition; otherwise always. */
  when?: string;
  /** Why the sandbox refuses it. */
  why: string;
}

/** The seccomp ABI of the running Node process, or `undefined` off Linux or on another CPU. */
export function hostSeccompArch(): SeccompArch | undefined {
  if (process.platform !== 'linux') return undefined;
  if (process.arch === 'x64') return 'x86_64';
  if (process.arch === 'arm64') return 'aarch64';
  return undefined;
}

// Machine-readable form of `when`, over the low 32 bits of one argument. Every argument inspected
// here is declared `int`/`unsigned int` in the kernel (clone's flags are cut with lower_32_bits), so
// the kernel ignores the high word too; testing it would only let set high bits slip past a denial.
type ArgTest =
  | { arg: number; op: 'anyBitOf'; mask: number }
  | { arg: number; op: 'oneOf'; values: readonly number[] }
  | { arg: number; op: 'noneOf'; values: readonly number[] };

interface RuleSpec extends SeccompRule {
  test?: ArgTest;
}

const CLONE_NEW_ANY =
  0x0002_0000 | // CLONE_NEWNS
  0x0200_0000 | // CLONE_NEWCGROUP
  0x0400_0000 | // CLONE_NEWUTS
  0x0800_0000 | // CLONE_NEWIPC
  0x1000_0000 | // CLONE_NEWUSER
  0x2000_0000 | // CLONE_NEWPID
  0x4000_0000; // CLONE_NEWNET

const TIOCSTI = 0x5412;
const TIOCLINUX = 0x541c;
const AF_UNIX = 1;
const AF_INET = 2;
const AF_INET6 = 10;
const PER_LINUX = 0;
const PERSONALITY_QUERY = 0xffff_ffff;

const NEW_MOUNT_API = 'new mount API: same power as mount; ENOSYS so callers fall back to mount, which is refused';
const NUMA = 'NUMA memory placement: no tool needs it, and migrate_pages/move_pages reach other processes';

const RULES: readonly RuleSpec[] = [
  // Namespaces and the mount table: the jail is made of these, so nothing inside may remake them.
  { syscall: 'unshare', action: 'EPERM', why: 'new namespaces: a nested user namespace regains capabilities and kernel attack surface' },
  { syscall: 'setns', action: 'EPERM', why: 'joins another namespace through an inherited descriptor' },
  {
    syscall: 'clone',
    action: 'EPERM',
    when: 'flags has any CLONE_NEW* (NS, CGROUP, UTS, IPC, USER, PID, NET)',
    why: 'same as unshare, at fork time; plain fork and threads stay allowed',
    // Flags are the first argument on x86_64 and arm64 alike; only s390 and cris swap the first two.
    test: { arg: 0, op: 'anyBitOf', mask: CLONE_NEW_ANY },
  },
  {
    syscall: 'clone3',
    action: 'ENOSYS',
    why: 'its flags sit behind a pointer seccomp cannot read; ENOSYS makes libc fall back to clone (CVE-2021-41133)',
  },
  { syscall: 'mount', action: 'EPERM', why: 'changes the mount table the jail is built from' },
  { syscall: 'umount2', action: 'EPERM', why: 'could uncover what bubblewrap mounted over' },
  { syscall: 'pivot_root', action: 'EPERM', why: 'replaces the root the jail is built on' },
  { syscall: 'chroot', action: 'EPERM', why: 'nested roots are a classic escape step; no tool needs one' },
  { syscall: 'open_tree', action: 'ENOSYS', why: NEW_MOUNT_API },
  { syscall: 'move_mount', action: 'ENOSYS', why: NEW_MOUNT_API },
  { syscall: 'fsopen', action: 'ENOSYS', why: NEW_MOUNT_API },
  { syscall: 'fsconfig', action: 'ENOSYS', why: NEW_MOUNT_API },
  { syscall: 'fsmount', action: 'ENOSYS', why: NEW_MOUNT_API },
  { syscall: 'fspick', action: 'ENOSYS', why: NEW_MOUNT_API },
  { syscall: 'mount_setattr', action: 'ENOSYS', why: NEW_MOUNT_API },
  {
    syscall: 'open_by_handle_at',
    action: 'EPERM',
    why: 'opens any inode of a mounted filesystem by handle, bypassing the binds (the "shocker" escape)',
  },
  { syscall: 'name_to_handle_at', action: 'EPERM', why: 'mints the handles open_by_handle_at takes; leaks inode identities' },

  // Reaching into other processes.
  { syscall: 'ptrace', action: 'EPERM', why: 'inspects and controls other processes; a long CVE history' },
  { syscall: 'process_vm_readv', action: 'EPERM', why: "reads another process's memory (ptrace-class)" },
  { syscall: 'process_vm_writev', action: 'EPERM', why: "writes another process's memory (ptrace-class)" },
  { syscall: 'pidfd_getfd', action: 'EPERM', why: 'copies a file descriptor out of another process (ptrace-class)' },
  { syscall: 'kcmp', action: 'EPERM', why: "compares two processes' kernel objects (ptrace-class); leaks kernel pointer order" },

  // Large kernel interfaces with a record of privilege escalations and no use in a tool run.
  { syscall: 'perf_event_open', action: 'EPERM', why: 'profiling interface with a long CVE history; profile from outside' },
  { syscall: 'bpf', action: 'EPERM', why: 'loads programs into the kernel' },
  { syscall: 'userfaultfd', action: 'EPERM', why: 'stalls kernel page faults at will, a standard exploit primitive for races' },
  {
    syscall: 'io_uring_setup',
    action: 'EPERM',
    why: 'io_uring operations bypass this filter and have many CVEs; runtimes fall back to threads',
  },
  { syscall: 'io_uring_enter', action: 'EPERM', why: 'io_uring (see io_uring_setup)' },
  { syscall: 'io_uring_register', action: 'EPERM', why: 'io_uring (see io_uring_setup)' },
  { syscall: 'keyctl', action: 'EPERM', why: 'the kernel keyring is not namespaced: keys of the same uid outside' },
  { syscall: 'add_key', action: 'EPERM', why: 'kernel keyring (see keyctl)' },
  { syscall: 'request_key', action: 'EPERM', why: 'kernel keyring (see keyctl)' },
  { syscall: 'mbind', action: 'EPERM', why: NUMA },
  { syscall: 'set_mempolicy', action: 'EPERM', why: NUMA },
  { syscall: 'get_mempolicy', action: 'EPERM', why: NUMA },
  { syscall: 'set_mempolicy_home_node', action: 'EPERM', why: NUMA },
  { syscall: 'migrate_pages', action: 'EPERM', why: NUMA },
  { syscall: 'move_pages', action: 'EPERM', why: NUMA },
  { syscall: 'uselib', action: 'EPERM', why: 'obsolete a.out library loader; attack surface only (x86_64 only)' },
  { syscall: 'modify_ldt', action: 'EPERM', why: '16-bit segments: unused by modern code, historic leaks and exploits (x86_64 only)' },
  {
    syscall: 'personality',
    action: 'EPERM',
    when: 'persona is neither PER_LINUX (0) nor the 0xffffffff query',
    why: 'other personas weaken memory protection (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE) or emulate other OSes',
    test: { arg: 0, op: 'noneOf', values: [PER_LINUX, PERSONALITY_QUERY] },
  },

  // Host administration: needs capabilities the jail drops; refused anyway so a capability leak is not enough.
  { syscall: 'kexec_load', action: 'EPERM', why: 'boots another kernel' },
  { syscall: 'kexec_file_load', action: 'EPERM', why: 'boots another kernel' },
  { syscall: 'init_module', action: 'EPERM', why: 'loads code into the kernel' },
  { syscall: 'finit_module', action: 'EPERM', why: 'loads code into the kernel' },
  { syscall: 'delete_module', action: 'EPERM', why: 'unloads kernel modules' },
  { syscall: 'reboot', action: 'EPERM', why: "halts the machine or the jail's PID namespace" },
  { syscall: 'swapon', action: 'EPERM', why: 'host swap configuration' },
  { syscall: 'swapoff', action: 'EPERM', why: 'host swap configuration' },
  { syscall: 'syslog', action: 'EPERM', why: 'reads the kernel log (dmesg): kernel addresses and host activity' },
  { syscall: 'acct', action: 'EPERM', why: 'switches host process accounting on or off' },
  { syscall: 'quotactl', action: 'EPERM', why: 'reads or changes disk quotas of host filesystems' },
  { syscall: 'quotactl_fd', action: 'EPERM', why: 'quotactl by descriptor' },

  // Terminal input injection: bubblewrap's --new-session is the main fix, this the second lock.
  {
    syscall: 'ioctl',
    action: 'EPERM',
    when: 'request is TIOCSTI (0x5412)',
    why: "pushes input into the terminal, run as the user's commands after the jail exits (CVE-2017-5226)",
    test: { arg: 1, op: 'oneOf', values: [TIOCSTI] },
  },
  {
    syscall: 'ioctl',
    action: 'EPERM',
    when: 'request is TIOCLINUX (0x541c)',
    why: 'virtual-console copy/paste, the same injection as TIOCSTI (CVE-2023-28100)',
    test: { arg: 1, op: 'oneOf', values: [TIOCLINUX] },
  },

  // Network: the namespace is private; the only way out is forge's egress proxy (when granted).
  {
    syscall: 'socket',
    action: 'EAFNOSUPPORT',
    when: 'domain is not AF_UNIX (1), AF_INET (2) or AF_INET6 (10)',
    why: 'packet, netlink, vsock, … sockets: kernel attack surface, and vsock is not namespaced (reaches the host)',
    test: { arg: 0, op: 'noneOf', values: [AF_UNIX, AF_INET, AF_INET6] },
  },
];

/**
 * What the filter refuses, and why: one row per (syscall, condition), in filter order. A syscall
 * that does not exist on an architecture (see `why`) is simply absent from that architecture's
 * program. Everything else is allowed.
 */
export const SECCOMP_RULES: readonly SeccompRule[] = Object.freeze(
  RULES.map(({ syscall, action, when, why }) =>
    Object.freeze(when === undefined ? { syscall, action, why } : { syscall, action, when, why }),
  ),
);

// Syscall numbers, only for the syscalls in RULES. x86_64: the kernel's
// arch/x86/entry/syscalls/syscall_64.tbl (the "common"/"64" ABI). aarch64: the kernel's
// include/uapi/asm-generic/unistd.h, which arm64 uses. A name missing from a table does not exist
// on that architecture (uselib and modify_ldt on arm64; the old one-argument umount on both).
const SYSCALL_NUMBERS: Readonly<Record<SeccompArch, Readonly<Record<string, number>>>> = {
  x86_64: {
    ioctl: 16,
    socket: 41,
    clone: 56,
    ptrace: 101,
    syslog: 103,
    uselib: 134,
    personality: 135,
    modify_ldt: 154,
    pivot_root: 155,
    chroot: 161,
    acct: 163,
    mount: 165,
    umount2: 166,
    swapon: 167,
    swapoff: 168,
    reboot: 169,
    init_module: 175,
    delete_module: 176,
    quotactl: 179,
    mbind: 237,
    set_mempolicy: 238,
    get_mempolicy: 239,
    kexec_load: 246,
    add_key: 248,
    request_key: 249,
    keyctl: 250,
    migrate_pages: 256,
    unshare: 272,
    move_pages: 279,
    perf_event_open: 298,
    name_to_handle_at: 303,
    open_by_handle_at: 304,
    setns: 308,
    process_vm_readv: 310,
    process_vm_writev: 311,
    kcmp: 312,
    finit_module: 313,
    kexec_file_load: 320,
    bpf: 321,
    userfaultfd: 323,
    io_uring_setup: 425,
    io_uring_enter: 426,
    io_uring_register: 427,
    open_tree: 428,
    move_mount: 429,
    fsopen: 430,
    fsconfig: 431,
    fsmount: 432,
    fspick: 433,
    clone3: 435,
    pidfd_getfd: 438,
    mount_setattr: 442,
    quotactl_fd: 443,
    set_mempolicy_home_node: 450,
  },
  aarch64: {
    ioctl: 29,
    umount2: 39,
    mount: 40,
    pivot_root: 41,
    chroot: 51,
    quotactl: 60,
    acct: 89,
    personality: 92,
    unshare: 97,
    kexec_load: 104,
    init_module: 105,
    delete_module: 106,
    syslog: 116,
    ptrace: 117,
    reboot: 142,
    socket: 198,
    add_key: 217,
    request_key: 218,
    keyctl: 219,
    clone: 220,
    swapon: 224,
    swapoff: 225,
    mbind: 235,
    get_mempolicy: 236,
    set_mempolicy: 237,
    migrate_pages: 238,
    move_pages: 239,
    perf_event_open: 241,
    name_to_handle_at: 264,
    open_by_handle_at: 265,
    setns: 268,
    process_vm_readv: 270,
    process_vm_writev: 271,
    kcmp: 272,
    finit_module: 273,
    bpf: 280,
    userfaultfd: 282,
    kexec_file_load: 294,
    io_uring_setup: 425,
    io_uring_enter: 426,
    io_uring_register: 427,
    open_tree: 428,
    move_mount: 429,
    fsopen: 430,
    fsconfig: 431,
    fsmount: 432,
    fspick: 433,
    clone3: 435,
    pidfd_getfd: 438,
    mount_setattr: 442,
    quotactl_fd: 443,
    set_mempolicy_home_node: 450,
  },
};

const AUDIT_ARCH: Readonly<Record<SeccompArch, number>> = { x86_64: 0xc000_003e, aarch64: 0xc000_00b7 };
const X32_SYSCALL_BIT = 0x4000_0000;

// include/uapi/asm-generic/errno*.h; x86_64 and arm64 both use the generic numbers.
const ERRNO: Readonly<Record<SeccompRule['action'], number>> = { EPERM: 1, ENOSYS: 38, EAFNOSUPPORT: 97 };

// include/uapi/linux/seccomp.h
const RET_KILL_PROCESS = 0x8000_0000;
const RET_ERRNO = 0x0005_0000;
const RET_ALLOW = 0x7fff_0000;

// include/uapi/linux/filter.h and bpf_common.h
const LD_W_ABS = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JSET_K = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET_K = 0x06; // BPF_RET | BPF_K

// struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
const OFFSET_NR = 0;
const OFFSET_ARCH = 4;
const argLowWordOffset = (arg: number): number => 16 + 8 * arg; // both supported arches are little-endian

const BPF_MAXINSNS = 4096;

/** A jump target: `'next'` is the following instruction, anything else a label placed later. */
type Target = string;

type Insn = { code: number; k: number; jt?: Target; jf?: Target } | { label: string };

/** Builds a program with symbolic forward jumps, then resolves them into 8-bit offsets. */
class Assembler {
  readonly #items: Insn[] = [];
  #labels = 0;

  newLabel(): string {
    return `L${this.#labels++}`;
  }

  place(label: string): void {
    this.#items.push({ label });
  }

  load(offset: number): void {
    this.#items.push({ code: LD_W_ABS, k: offset });
  }

  jump(code: typeof JEQ_K | typeof JSET_K, k: number, jt: Target, jf: Target): void {
    this.#items.push({ code, k, jt, jf });
  }

  ret(k: number): void {
    this.#items.push({ code: RET_K, k });
  }

  /** Encodes `struct sock_filter` little-endian; throws if a jump is backwards, unresolved or longer than 255. */
  encode(): Buffer {
    const at = new Map<string, number>();
    let count = 0;
    for (const item of this.#items) {
      if ('label' in item) at.set(item.label, count);
      else count++;
    }
    if (count > BPF_MAXINSNS) throw new Error(`seccomp program has ${count} instructions, over the kernel's limit of ${BPF_MAXINSNS}`);
    const out = Buffer.alloc(count * 8);
    let index = 0;
    for (const item of this.#items) {
      if ('label' in item) continue;
      const offset = (target: Target | undefined): number => {
        if (target === undefined || target === 'next') return 0;
        const to = at.get(target);
        if (to === undefined) throw new Error(`seccomp program: jump to unplaced label ${target} at instruction ${index}`);
        const distance = to - index - 1;
        if (distance < 0 || distance > 255) {
          throw new Error(`seccomp program: jump of ${distance} at instruction ${index} does not fit classic BPF's 8-bit forward offset`);
        }
        return distance;
      };
      out.writeUInt16LE(item.code, index * 8);
      out.writeUInt8(offset(item.jt), index * 8 + 2);
      out.writeUInt8(offset(item.jf), index * 8 + 3);
      out.writeUInt32LE(item.k >>> 0, index * 8 + 4);
      index++;
    }
    return out;
  }
}

/**
 * Emits the refusal of one conditional rule; the accumulator is clobbered (it holds the argument).
 * Falls through to the next instruction when the call is not refused.
 */
function emitArgTest(asm: Assembler, test: ArgTest, errno: number): void {
  const deny = asm.newLabel();
  const pass = asm.newLabel();
  asm.load(argLowWordOffset(test.arg));
  if (test.op === 'anyBitOf') {
    asm.jump(JSET_K, test.mask, deny, pass);
  } else {
    if (test.values.length === 0) throw new Error(`seccomp rule: an empty ${test.op} list at argument ${test.arg}`);
    const last = test.values.length - 1;
    test.values.forEach((value, i) => {
      const notEqual = i === last ? (test.op === 'oneOf' ? pass : deny) : 'next';
      asm.jump(JEQ_K, value, test.op === 'oneOf' ? deny : pass, notEqual);
    });
  }
  asm.place(deny);
  asm.ret(RET_ERRNO | errno);
  asm.place(pass);
}

/**
 * Builds the classic-BPF seccomp program for `arch`, in the form `bwrap --seccomp FD` reads: an
 * array of `struct sock_filter` (8 bytes each, little-endian), with no header.
 *
 * The program kills the process if the syscall comes through another ABI than `arch` (i386 or
 * AArch32 entry points would otherwise dodge the numbers below), refuses x32 syscall numbers on
 * x86_64 with ENOSYS, refuses each call in {@link SECCOMP_RULES} with its errno, and allows the rest.
 * Allowed paths read only `nr` and `arch`, so the kernel's per-syscall allow cache applies.
 *
 * @throws Error if `arch` is not a {@link SeccompArch}, or (a bug) if the program cannot be encoded.
 */
export function buildSeccompFilter(arch: SeccompArch): Buffer {
  if (!Object.hasOwn(SYSCALL_NUMBERS, arch)) {
    throw new Error(`buildSeccompFilter: unsupported architecture ${JSON.stringify(arch)}; expected "x86_64" or "aarch64"`);
  }
  const numbers = SYSCALL_NUMBERS[arch];
  const asm = new Assembler();

  const nativeAbi = asm.newLabel();
  asm.load(OFFSET_ARCH);
  asm.jump(JEQ_K, AUDIT_ARCH[arch], nativeAbi, 'next');
  asm.ret(RET_KILL_PROCESS);
  asm.place(nativeAbi);
  asm.load(OFFSET_NR);

  if (arch === 'x86_64') {
    // x32 shares AUDIT_ARCH_X86_64 but numbers its calls with this bit set, so the table misses them.
    const native = asm.newLabel();
    asm.jump(JSET_K, X32_SYSCALL_BIT, 'next', native);
    asm.ret(RET_ERRNO | ERRNO.ENOSYS);
    asm.place(native);
  }

  // Rules grouped per syscall, in table order. The accumulator holds nr between groups; a group
  // with argument tests overwrites it, which is fine because it always ends in a RET.
  const groups = new Map<string, RuleSpec[]>();
  for (const rule of RULES) {
    const group = groups.get(rule.syscall);
    if (group === undefined) groups.set(rule.syscall, [rule]);
    else group.push(rule);
  }
  for (const [syscall, rules] of groups) {
    const nr = numbers[syscall];
    if (nr === undefined) continue;
    const nextGroup = asm.newLabel();
    asm.jump(JEQ_K, nr, 'next', nextGroup);
    const unconditional = rules.find((rule) => rule.test === undefined);
    if (unconditional !== undefined) {
      asm.ret(RET_ERRNO | ERRNO[unconditional.action]);
    } else {
      for (const rule of rules) if (rule.test !== undefined) emitArgTest(asm, rule.test, ERRNO[rule.action]);
      asm.ret(RET_ALLOW);
    }
    asm.place(nextGroup);
  }

  asm.ret(RET_ALLOW);
  return asm.encode();
}
